/* pt_record.h - recording: what Python's session (pytrace_cffi/_tracer.py) calls to
 * make a tracer, start and stop it, bound and filter what it records, and learn of
 * a profiler that took the hook. The events it records are read through
 * pt_read.h; what is written from them, through pt_export.h.
 *
 * pt_record.h, pt_read.h and pt_export.h are the plain-C interface Python sees
 * through cffi: build_ffi.py's cdef is the three headers themselves, less their
 * #include lines and guards, so a declaration is written once. Integers,
 * pointers, caller-owned buffers and status codes cross it. No Python object does,
 * except where a function says "py_list" (or py_dict, py_tuple, py_hook): there
 * Python passes id() of an object it owns, and the C side uses it with the GIL
 * held. Every entry point takes the GIL itself (cffi releases it around calls).
 */
#ifndef PT_RECORD_H
#define PT_RECORD_H

#include <stddef.h>
#include <stdint.h>

/* Status codes. Anything but PT_OK leaves a message in pt_last_error(). */
#define PT_OK 0
#define PT_ERR_NOMEM -1     /* an allocation failed */
#define PT_ERR_STATE -2     /* wrong lifecycle step (start twice, stop before start) */
#define PT_ERR_PYTHON -3    /* a Python API call failed; the message says which */
#define PT_ERR_ARG -4       /* an index or size out of range */

/* Event kinds. An event is 8 bytes: the clock ticks since the thread's previous
 * event, and what happened to which key (key << PT_KEY_SHIFT | kind). */
#define PT_EV_PY_CALL 0     /* a Python frame started or resumed */
#define PT_EV_PY_RETURN 1   /* a Python frame returned, yielded or unwound */
#define PT_EV_C_CALL 2      /* a built-in function or method was called */
#define PT_EV_C_RETURN 3    /* ... and returned or raised */
#define PT_EV_PY_SEED 4     /* a frame already active when the thread was attached */
/* 5 and 6: reserved, never written (events version 1's TAG and ARGS, now aux events).
 * An event of either kind in a file is damage (TraceFormatError). */
#define PT_EV_AUX 7         /* no call: key = payload << PT_AUX_SHIFT | PT_AUX_* */
#define PT_KEY_SHIFT 3
#define PT_KIND_MASK 7
#define PT_MAX_KEYS 536870912   /* 2^29: keys fit beside the 3-bit kind */

/* Aux events: every event that is not a call has kind 7; its key's low 3 bits say
 * which (the sub-kind), the 26 above are its payload. A reader meeting a sub-kind
 * it does not know skips the event (its delta still moves the clock): that is the
 * room for new kinds. A new "no call" event is a new sub-kind, which readers of
 * this events version that predate it pass over (docs/INTERNALS.md, "Adding an
 * event kind"). */
#define PT_AUX_TIME 0      /* the clock moved delta + (payload << 32) ticks */
#define PT_AUX_TAG 1       /* Python tagged the call just made with tag `payload` */
#define PT_AUX_ARGS 2      /* the open annotation's args are annotation_args[payload] */
/* 3-7: free */
#define PT_AUX_SHIFT 3
#define PT_AUX_MASK 7
#define PT_AUX_PAYLOADS 67108864   /* 2^26: payloads fit beside sub-kind and kind */
#define PT_TAG_ARGS_BIT 0x80000000   /* in pt_slice.tag: the rest indexes annotation args */
/* The version of events written to files (events.bin's header). Version 1 had
 * kinds 5 TAG, 6 ARGS and 7 TIME (each payload its whole 29-bit key); its events
 * are read through pt_events_from_v1. */
#define PT_EVENTS_VERSION 2

/* Tracer flags. */
#define PT_FLAG_C_CALLS 1   /* record built-in calls */
#define PT_FLAG_NOOP 2      /* hooks installed, nothing recorded: the benchmark floor */
#define PT_FLAG_TSC 4       /* ticks are the CPU's invariant TSC (x86-64), else nanoseconds */
#define PT_FLAG_UNWRAP_METHODS 8    /* sys.monitoring: a bound method whose function is a
                                       built-in is a call of that built-in, as this
                                       interpreter's sys.setprofile reports it (Python
                                       decides: 3.12.5+ and 3.13) */

/* Backends. */
#define PT_BACKEND_PROFILE 1    /* PyEval_SetProfile, per thread (3.9-3.11) */
#define PT_BACKEND_MONITOR 2    /* sys.monitoring, interpreter-wide (3.12+) */

typedef struct pt_tracer pt_tracer;

typedef struct {
    uint32_t delta;         /* ticks since this thread's previous event */
    uint32_t key_kind;      /* key << PT_KEY_SHIFT | PT_EV_*; key 0 = unknown */
} pt_event;

/* Lifecycle. pt_tracer_new returns NULL only when out of memory. */
pt_tracer *pt_tracer_new(int flags, int backend);
void pt_tracer_free(pt_tracer *tracer);
/* Frees the chunks dropped traces left for reuse (at most 16 MiB). */
void pt_release_pool(void);
const char *pt_last_error(pt_tracer *tracer);

/* Start: seeds the active frames of every thread (up to 128 deep) and installs
 * the hook. For PT_BACKEND_MONITOR the caller has claimed tool_id and registered
 * the callbacks from pt_monitor_callbacks; this enables event_mask on tool_id.
 * The innermost own_frames frames of the calling thread (the caller's start
 * machinery, which traces leave out) are not seeded and do not count toward the
 * 128; they return while tracing, so they still enter the max_depth count.
 * py_thread_objects: the dict the thread hook fills, tstate id ->
 * threading.Thread (a strong reference is kept), or NULL. */
int pt_start(pt_tracer *tracer, int tool_id, long long event_mask, int own_frames,
             void *py_thread_objects);
/* The hook for threading.setprofile, appended to py_list: one C function for every
 * tracer, run by each new thread as its first profile event. It attaches the
 * thread to the tracer running then (seeding its frames; 3.9-3.11: installing the
 * profile hook, then looking at every attached thread's hook as pt_check_hooks
 * does; 3.12+: removing itself, sys.monitoring sees every thread) and notes its
 * threading.Thread (pt_start's py_thread_objects); with no tracer running it removes
 * itself. No Python frame of its own, no lock, the GIL never released: a thread
 * that read the hook while one tracer ran and runs it after that tracer stopped
 * follows the next one, or nothing. */
int pt_thread_hook(void *py_list);
/* The calling thread is one of pytrace_cffi's own (pt_own.c): no trace records
 * it, from now on and until pt_own_thread_end. PT_ERR_NOMEM when 16 are already. */
int pt_own_thread_begin(void);
void pt_own_thread_end(void);
/* Stop: removes the hook from every thread; the buffers stay for reading. */
int pt_stop(pt_tracer *tracer);
/* Another profiler taking the hook (PT_BACKEND_PROFILE; the sys.monitoring
 * backend is checked in Python): compares the profile hook of each thread we
 * attached (or of the calling thread only, when current_only) with ours, and
 * notes each thread found without it once. The thread hook (pt_thread_hook) on a
 * thread that has not run it yet counts as ours: that thread attaches at its
 * first event. pt_stop does the same check and
 * leaves another profiler's hook in place. Returns how many of the checked
 * threads lack our hook. */
int pt_check_hooks(pt_tracer *tracer, int current_only);
/* Appends the losses noted so far to py_list, as (thread index, clock ticks of
 * that thread's last event, ticks when noticed, the profile object found in place
 * of ours or None). */
int pt_hooks_lost(pt_tracer *tracer, void *py_list);
/* The latest event's clock ticks over all threads (the start when none). */
int64_t pt_last_event_ticks(pt_tracer *tracer);
/* After pt_stop on PT_BACKEND_PROFILE: 1 when the thread's state was still there
 * at stop, 0 when the thread had ended (or on sys.monitoring), a status < 0 for a
 * bad index or a running tracer; *last_ticks gets the clock of its last event.
 * A thread that ended with calls still open (pt_open_at_stop) had lost our hook
 * before its frames returned. */
int pt_thread_at_stop(pt_tracer *tracer, int index, int64_t *last_ticks);
/* Sticky error raised by the hot path, or PT_OK. */
int pt_hot_error(pt_tracer *tracer);

/* Bounded memory: past max_events held, the oldest chunks go to spill_path
 * (when not NULL: a "PTEVENTS" file of per-thread blocks, see docs/FORMAT.md) or
 * are dropped and counted. Call before pt_start. pt_spill_rest writes what is
 * still held after stop and closes the file. */
int pt_set_bounds(pt_tracer *tracer, uint64_t max_events, const char *spill_path);
/* Filters, before pt_start: record calls only while fewer than max_depth (0: no
 * limit) recorded calls are open on the thread; leave out the code objects for
 * which py_skip(code) (id of a callable, or NULL) is true, with the built-ins they
 * call. On 3.12+ left-out code is switched off with sys.monitoring.DISABLE. */
int pt_set_filters(pt_tracer *tracer, uint32_t max_depth, void *py_skip);
/* Before pt_start: calls of this code object (a borrowed PyObject *) never count
 * toward max_depth. For code whose frames traces leave out (pytrace_cffi's own,
 * a launcher's below the program): running when tracing starts, they would use
 * up the depth budget of calls that are shown. */
int pt_set_uncounted(pt_tracer *tracer, void *py_code);
/* Before pt_start and after pt_set_filters (skip_imports): calls of this code
 * object (a borrowed PyObject *, the import machinery's entry point) are left
 * out with everything they call, on their thread, until they return. */
int pt_set_import_entry(pt_tracer *tracer, void *py_code);
int pt_spill_rest(pt_tracer *tracer);
/* A block that fails to go into the spill file (a full disk) is cut off again, so
 * the file always ends with a whole block. With a spill hook, the hook runs once
 * more, pt_spill_errno saying why (an errno), and may move the file elsewhere
 * (pt_spill_move); the block is then tried again. When it fails for good (or
 * without a hook) the tracer stops recording: a sticky error says so, and the
 * file keeps everything before it. */
int pt_spill_errno(pt_tracer *tracer);
/* The spill file's descriptor (-1 when there is none) and its length in whole
 * blocks: what it holds even when its directory was removed while it was open. */
int pt_spill_fd(pt_tracer *tracer);
uint64_t pt_spill_bytes(pt_tracer *tracer);
/* Copies the spill file to path (a new file) and goes on spilling there; the old
 * file is closed (its removal is the caller's). On failure (PT_ERR_ARG: the
 * message says why, pt_spill_errno the errno) nothing changes and the new file is
 * removed. */
int pt_spill_move(pt_tracer *tracer, const char *path);
/* After pt_set_bounds with a spill file, before pt_start: every chunk is spilled
 * as soon as it is full (each thread holds one chunk), and py_hook (id of a
 * callable taking no arguments) runs just before each spill, so that what the
 * file's events need (key names) can be written first. Not run while the hook
 * itself runs on another thread, nor while pt_start walks the threads. */
int pt_set_spill_hook(pt_tracer *tracer, void *py_hook);
/* on: wraps the SIGTERM handler Python installed (signal.signal) with a relay that
 * runs it and then re-sends SIGTERM every 200 ms until the process ends (Linux;
 * elsewhere nothing); off: stops the re-sending. PT_ERR_STATE if no Python
 * handler is installed. */
int pt_sigterm_guard(int on);
/* The relay's patience: a SIGTERM whose Python handler has not run after 2 s
 * of re-sending (the main thread in C code that does not return: a deadlock, a
 * wait that signals do not end) ends the process as SIGTERM does untraced,
 * unsaved, after writing last_words (its length: n, at most 1023 bytes) to
 * stderr. pt_sigterm_heard: the Python handler ran (the count starts again);
 * pt_sigterm_hold(1): a save is under way, the relay waits for it whatever
 * its length; 0: patience again. */
int pt_sigterm_last_words(const char *last_words, size_t n);
void pt_sigterm_heard(void);
void pt_sigterm_hold(int on);
/* Writes last_words to stderr (async-signal-safe): also where the flight
 * recorder ends the process by SIGTERM unsaved (pt_flight.c, exits.py). */
void pt_sigterm_say_last_words(void);
/* The process dies of sig as without a handler (SIG_DFL, unblocked in the calling
 * thread, sent to the process): from any thread. */
int pt_die_of_signal(int sig);
/* Calls py_callable(event, args) (a borrowed PyObject *, kept) from a C audit hook
 * for the audit events "os.exec", "subprocess.Popen", "os.posix_spawn" and
 * "os.spawn" only; no Python code runs for the others (pt_signals.c says why).
 * The hook is added once per process; a second call replaces the callable.
 * PT_ERR_STATE if an existing audit hook refused it. */
int pt_audit_guard(void *py_callable);

/* Watching: py_tuple is (names, classify, tag). When a code object whose co_name is
 * in the set `names` is first seen, classify(code) returns nonzero if its calls
 * are to be tagged; each such call then runs tag(frame), whose int result
 * (0 < tag < 2^26, a TAG aux event's payload) is recorded with the call (0: none; a
 * larger one is a sticky error, the call left untagged). Call before pt_start. */
int pt_set_watch(pt_tracer *tracer, void *py_tuple);

/* Exceptions (pt_exceptions.c), before pt_start: each exception event is told to
 * py_hook(event, place, offset, detail, thread index, chained) (a callable, kept),
 * whose (name, args dict) result becomes an instant on that thread at the
 * event's time (None: nothing). 3.12+ (sys.monitoring, with the RAISE, RERAISE and
 * EXCEPTION_HANDLED callbacks registered): place the code object, offset its
 * instruction's, detail the exception. 3.9-3.11 (the profile hook, which sees no
 * exception object): place the frame, offset -1, detail None for a frame left by
 * an exception (PT_EXC_UNWIND) or the built-in that raised (PT_EXC_C_RAISE);
 * chained 1 when nothing was recorded on the thread since its last report. */
#define PT_EXC_RAISE 1
#define PT_EXC_RERAISE 2
#define PT_EXC_HANDLED 3
#define PT_EXC_UNWIND 4
#define PT_EXC_C_RAISE 5
int pt_set_exception_hook(pt_tracer *tracer, void *py_hook);
/* Logged calls (pt_logargs.c), before pt_start: py_tuple is (match, on_call,
 * on_return). match(code) is asked once per code object; the calls of code it
 * accepts run on_call(frame, first_entry) (first_entry 1, 0 for a resumed
 * generator, -1 when the hook cannot tell) for a dict recorded as the call's args
 * (or None), and at their return on_return(that dict, value, raised) (value None
 * when not known), which may add to the dict. */
int pt_set_arg_logging(pt_tracer *tracer, void *py_tuple);

/* Appends the monitoring callbacks to py_list as (event name, callable) pairs. */
int pt_monitor_callbacks(pt_tracer *tracer, void *py_list);

/* Clock. Ticks are nanoseconds, or TSC cycles under PT_FLAG_TSC; Python maps them
 * to nanoseconds with pairs of readings taken by pt_clock_pair. */
int pt_tsc_supported(void);
void pt_clock_pair(int use_tsc, int64_t *ticks, int64_t *ns);
int64_t pt_start_ns(pt_tracer *tracer);
int64_t pt_stop_ns(pt_tracer *tracer);
int64_t pt_start_ticks(pt_tracer *tracer);
int64_t pt_stop_ticks(pt_tracer *tracer);
/* The CLOCK_MONOTONIC / CLOCK_REALTIME pairs read at start (at_stop 0) and at
 * stop (1): a monotonic and a realtime reading of one moment, and the
 * uncertainty of their pairing, in ns. PT_ERR_STATE before that moment. */
int pt_realtime_anchor(pt_tracer *tracer, int at_stop, int64_t *monotonic_ns,
                       int64_t *realtime_ns, int64_t *spread_ns);

/* Annotations (pt_annotate.c). pt_annotation_api fills py_dict with the
 * RecordFunction and CapturedStack types and the instant, counter, capture_stack
 * and symbolize functions. pt_annotation_data appends a stopped tracer's
 * record_function args dicts and its (kind, ticks, thread index, name, payload)
 * marks to the two lists. */
int pt_annotation_api(void *py_dict);
int pt_annotation_data(pt_tracer *tracer, void *py_args_list, void *py_marks_list);

/* What the interpreter does besides calls (pt_runtime.c). pt_runtime_api fills
 * py_dict with gc_callback, the gc.callbacks callable that records each
 * collection as a region "gc (generation N)" on the thread that ran it, with
 * args generation, collected and uncollectable; and TaskLane, the type whose
 * objects record an asyncio task's steps on a thread of their own (see
 * pytrace_cffi/_tasks.py); and counter_sample and resident_bytes, what a thread
 * of ours samples memory with (pytrace_cffi/_memory.py). */
int pt_runtime_api(void *py_dict);

/* The flight recorder (pt_flight.c): dumps of the ring (max_events, no spill
 * file) while tracing goes on, written by a clone of the process into dir:
 * events.bin, threads.json, keys.jsonl and process.json copied from
 * journal_dir, dump_json as dump.json when not NULL, done.json last.
 * pt_flight_dump returns the clone's pid (> 0), PT_ERR_STATE when 16 dumps are
 * still being written, or -errno. pt_flight_arm starts the C thread that
 * serves a signal (signum, 0: none) and a watchdog (no pt_flight_step for
 * watchdog_ns, 0: none) and a request file (pt_flight_watch_requests, before
 * arm: looked for every 250 ms at most, its content the dump directory's
 * name, removed when seen): it wakes the recorder's Python thread, waiting in
 * pt_flight_wait_python (no descriptor: a program that closes every one, as a
 * daemon does, cannot take it), and dumps itself into dumps_dir when no
 * pt_flight_claim came within grace_ns. pt_flight_wait_python: 1 once woken
 * (by the C thread, or pt_flight_wake_python), 0 after timeout_ns. */
#define PT_FLIGHT_SIGNAL 1
#define PT_FLIGHT_WATCHDOG 2
#define PT_FLIGHT_REQUEST 3
#define PT_FLIGHT_SIGTERM 4       /* pt_flight_watch_sigterm: SIGTERM's relay told it */
int pt_set_max_age(pt_tracer *tracer, int64_t ticks);  /* ring by seconds, in ticks */
int pt_set_note_sources(pt_tracer *tracer);     /* code keys' file:line for C's dumps */
int pt_set_progress_region(pt_tracer *tracer, void *py_name);  /* its end is a step */
/* until_ticks: stacks.tsv holds the calls open then (pt_flight_frames' ticks:
 * the frames' instant), 0: at the clone. */
int pt_flight_dump(pt_tracer *tracer, const char *dir, const char *journal_dir,
                   const char *dump_json, int64_t until_ticks);
/* The threads' frames and the ring at one instant: calls py_frames (the
 * callable sys._current_frames) with the GIL held, appends its result to the
 * list py_out, and puts the event clock's reading taken with it (that same
 * hold: no traced thread records an event meanwhile) in *ticks: the ring's
 * events up to *ticks are the ones the frames saw. PT_ERR_STATE when the call
 * failed. */
int pt_flight_frames(pt_tracer *tracer, void *py_frames, void *py_out, int64_t *ticks);
int pt_flight_reap(void);
int pt_flight_status(int pid);      /* -1 running, 0 whole, an errno, -2/-3 */
int pt_flight_wait(int64_t timeout_ns);
int pt_flight_arm(pt_tracer *tracer, int signum, int64_t watchdog_ns,
                  int64_t grace_ns, const char *dumps_dir, const char *journal_dir,
                  const char *dump_json);
int pt_flight_wait_python(int64_t timeout_ns);
void pt_flight_wake_python(void);
void pt_flight_disarm(void);
void pt_flight_step(void);
void pt_flight_ask(void);
int pt_flight_claim(uint64_t seq);
uint64_t pt_flight_request(void);
int pt_flight_reason(uint64_t seq);
int pt_flight_watch_requests(const char *path);
const char *pt_flight_request_name(uint64_t seq);
int pt_flight_signal_ours(void);  /* 0 once the program handles the dump signal */
void pt_flight_watch_sigterm(int on);
uint64_t pt_flight_c_dump_count(void);
int64_t *pt_flight_progress_cell(void);  /* a counter Python bumps: progress */
int pt_flight_unserved(void);     /* after disarm: the request left unserved */
/* How the clones write the ring (pt_flight_files.c): compress (events.bin
 * deflated; PT_ERR_NOMEM when its buffers cannot be made: then not), and
 * window_ticks (> 0: only the chunks ending within the last window_ticks). */
int pt_flight_set_dump_options(int compress, int64_t window_ticks);

#endif /* PT_RECORD_H */

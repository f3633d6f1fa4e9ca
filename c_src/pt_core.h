/* pt_core.h - the plain-C interface of pytrace_cffi's core.
 *
 * This is what Python sees through cffi (build_ffi.py repeats these declarations
 * in its cdef): integers, pointers, caller-owned buffers and status codes. No
 * Python object crosses it except where a function says "py_list": there Python
 * passes id(list) of a list it owns, and the C side appends to it with the GIL held.
 *
 * Every entry point takes the GIL itself (cffi releases it around calls).
 */
#ifndef PT_CORE_H
#define PT_CORE_H

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
#define PT_EV_TAG 5         /* no call: Python tagged the call just made with `key` */
#define PT_EV_ARGS 6        /* no call: the open annotation's args are annotation_args[key] */
#define PT_TAG_ARGS_BIT 0x80000000   /* in pt_slice.tag: the rest indexes annotation args */
#define PT_EV_TIME 7        /* no call: the clock moved delta + (key << 32) ticks */
#define PT_KEY_SHIFT 3
#define PT_KIND_MASK 7
#define PT_MAX_KEYS 536870912   /* 2^29: keys fit beside the 3-bit kind */

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

typedef struct {
    uint64_t tstate_id;     /* PyThreadState_GetID: unique for the process's life */
    uint64_t ident;         /* threading.get_ident() */
    uint64_t native_id;     /* OS thread id */
    uint64_t n_events;      /* events held */
    uint64_t n_calls;       /* 0: counting them reads every event (pt_thread_count_calls) */
    uint64_t dropped;       /* events lost (allocation failure) */
    int64_t base_ticks;     /* the clock reading the first delta counts from */
    uint64_t spilled;       /* events written to the spill file */
} pt_thread_info;

/* One call after replay: a call paired with its return. */
typedef struct {
    int64_t start;          /* ns */
    int64_t end;            /* ns */
    uint32_t key;
    uint32_t flags;         /* PT_SLICE_* */
    int64_t parent;         /* index of the enclosing slice on the same thread, or -1 */
    uint32_t tag;           /* what the watcher said of this call, 0 = nothing */
    uint32_t depth;         /* emitted ancestors on this thread: 0 for a root */
} pt_slice;

#define PT_SLICE_C 1            /* a built-in call (else Python) */
#define PT_SLICE_SEEDED 2       /* began before tracing: started at attach time */
#define PT_SLICE_OPEN_AT_STOP 4 /* still running at stop: ended at stop time */

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
/* Attach the calling thread (a thread born during tracing), seeding its frames
 * except the innermost skip_frames (the attaching hook's own). */
int pt_attach_current_thread(pt_tracer *tracer, int skip_frames);
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
/* How many slices replay closed at stop time (PT_SLICE_OPEN_AT_STOP). */
uint64_t pt_open_at_stop(const pt_slice *slices, uint64_t n);
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
uint64_t pt_spilled_events(pt_tracer *tracer);
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

/* Watching: py_tuple is (names, classify, tag). When a code object whose co_name is
 * in the set `names` is first seen, classify(code) returns nonzero if its calls
 * are to be tagged; each such call then runs tag(frame), whose int result
 * (0 < tag < 2^29) is recorded with the call. Call before pt_start. */
int pt_set_watch(pt_tracer *tracer, void *py_tuple);

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

/* Reading. */
uint64_t pt_current_tstate_id(void);
int pt_thread_count(pt_tracer *tracer);
/* O(chunks): stop() reads every thread's info, so no event is read here. */
int pt_thread_get_info(pt_tracer *tracer, int index, pt_thread_info *out);
/* pt_thread_get_info of threads 0 .. n-1 into out[0 .. n-1], in one call. */
int pt_thread_infos(pt_tracer *tracer, pt_thread_info *out, int n);
/* What stop() needs of a stopped tracer, in one call (each call through cffi
 * costs ~0.5 us, and an empty stop() made a dozen): its clock readings at start
 * and stop, the realtime anchors (as pt_realtime_anchor gives them), its thread
 * count and sticky error, and a clock pair read now (pt_clock_pair: the ticks ->
 * ns slope). PT_ERR_STATE unless stopped. */
typedef struct {
    int64_t start_ns;
    int64_t start_ticks;
    int64_t stop_ticks;
    int64_t now_ticks;
    int64_t now_ns;
    int64_t anchor[6];      /* at start, then at stop: monotonic ns, realtime ns, spread */
    int32_t n_threads;
    int32_t hot_error;
} pt_stop_facts;
int pt_get_stop_facts(pt_tracer *tracer, int use_tsc, pt_stop_facts *out);
/* The thread's events that open a slice (calls and seeds); 0 for a bad index. */
uint64_t pt_thread_count_calls(pt_tracer *tracer, int index);
/* Whether the thread's calls, paired with their returns as replay pairs them (a
 * return closes the innermost open call of its key and kind, and the calls open
 * inside it; one that matches none is ignored), leave any call open at its last
 * event: 1 yes, 0 no, a status < 0 for a bad index or a running tracer. Reads
 * each event once and nothing else (no key table): a thread that ended with its
 * calls closed is told apart at memory speed. */
int pt_thread_ends_open(pt_tracer *tracer, int index);
/* Copies a thread's raw events into out (cap entries). */
int pt_thread_copy_events(pt_tracer *tracer, int index, pt_event *out, uint64_t cap);
/* Pairs a thread's calls and returns into slices, with times in nanoseconds
 * ns0 + (ticks - tick0) * ns_per_tick. Calls whose key has hidden[key] ==
 * PT_HIDE_SUBTREE are dropped with everything they call, except seeded frames;
 * those and PT_HIDE_ALONE keys are dropped alone (their callees are the user's).
 * PT_HIDE_SEEDED keys are dropped alone when seeded and kept when called during
 * the trace: a launcher's frames below the program (runpy under python -m) are
 * not the program's, but the program may call the same code itself. */
#define PT_HIDE_SUBTREE 1
#define PT_HIDE_ALONE 2
#define PT_HIDE_SEEDED 3
/* Kept by replay, for what it carries (a torch region's __enter__/__exit__, an
 * optimizer step's hook: code the filters leave out but whose calls the watcher
 * names); pt_drop_keys removes what still has the key once names are given. */
#define PT_HIDE_CARRIER 4
int pt_thread_replay(pt_tracer *tracer, int index, const uint8_t *hidden,
                     uint32_t n_hidden, int64_t tick0, int64_t ns0,
                     double ns_per_tick, pt_slice *out, uint64_t cap,
                     uint64_t *n_out);
/* Replay of events read back from a spill file (one thread's blocks, in order). */
int pt_replay_buffer(const pt_event *events, uint64_t n, int64_t base_ticks, int64_t stop_ticks,
                     const uint8_t *hidden, uint32_t n_hidden, int64_t tick0, int64_t ns0,
                     double ns_per_tick, pt_slice *out, uint64_t cap, uint64_t *n_out);
uint64_t pt_count_calls(const pt_event *events, uint64_t n);
uint32_t pt_max_depth(const pt_slice *slices, uint64_t n);
/* A process's slices in a trace joined from several (processes.joined_trace):
 * copies in[0..n) to out with each key k replaced by key_map[k] (the union key
 * table's), start and end moved by shift_ns (another host's clock onto the first
 * process's) and tag cleared (it indexes the process's own tag table, which the
 * joined trace does not carry). Parents, depths and flags stay. PT_ERR_ARG when a
 * key is n_map or more or a time would overflow: out then holds the slices
 * before it. */
int pt_remap_slices(const pt_slice *in, uint64_t n, const uint32_t *key_map, uint32_t n_map,
                    int64_t shift_ns, pt_slice *out);
/* Removes the slices whose key has drop[key] set (keys below n_drop), each alone:
 * its children go to its nearest kept ancestor. In place, renumbering parents
 * and depths; new_index is caller scratch of n entries. Returns how many remain. */
uint64_t pt_drop_keys(pt_slice *slices, uint64_t n, const uint8_t *drop, uint32_t n_drop,
                      int64_t *new_index);
/* HTML reduction (pt_reduce.c): the slices kept when they last at least min_ns or
 * sit above depth top_levels, and their parent is kept. Writes the first cap kept
 * indices to kept and their self time over all slices (duration less every direct
 * callee's) to self_ns; cap 0 only counts. Returns how many are kept, -1 when out
 * of memory. */
int64_t pt_reduce_slices(const pt_slice *slices, uint64_t n, int64_t min_ns, uint32_t top_levels,
                         uint64_t *kept, int64_t *self_ns, uint64_t cap);
/* The same rule streamed: a thread's slices fed in batches (start order, parents
 * numbered over the thread; first_index numbers the batch's first). A reducer made
 * with pt_reducer_new(base, levels) counts (pt_reducer_count): per top_levels t in
 * 0..levels, buckets[t * PT_REDUCE_BUCKETS + b] counts the calls whose path
 * minimum (the shortest duration among it and its ancestors at depth >= t) falls
 * in bucket b: 0 under base, 1 + k in [base << k, base << (k + 1)) (the last
 * finite bucket open above), PT_REDUCE_BUCKETS - 1 kept at any threshold; so the
 * calls kept at min_ns = base << k are those of buckets 1 + k and up. Made with
 * pt_reducer_new(min_ns, top_levels) it keeps (pt_reducer_keep) the calls
 * pt_reduce_slices keeps, with the same self times. pt_reducer_end_thread after a
 * thread's last batch; then pt_reducer_take hands out its kept calls (valid until
 * the next feed). PT_ERR_NOMEM; PT_ERR_ARG: a parent that is no open call. */
#define PT_REDUCE_BUCKETS 66
typedef struct {
    int64_t start;
    int64_t end;
    uint64_t index;         /* in the thread's slices */
    int64_t self_ns;        /* duration less every direct callee's, kept or not */
    uint32_t key;
    uint32_t depth;
} pt_reduced;
typedef struct pt_reducer pt_reducer;
pt_reducer *pt_reducer_new(int64_t min_ns, uint32_t top_levels);
void pt_reducer_free(pt_reducer *r);
int pt_reducer_count(pt_reducer *r, const pt_slice *slices, uint64_t n, uint64_t first_index,
                     uint64_t *buckets);
int pt_reducer_keep(pt_reducer *r, const pt_slice *slices, uint64_t n, uint64_t first_index);
void pt_reducer_end_thread(pt_reducer *r);
uint64_t pt_reducer_take(pt_reducer *r, const pt_reduced **kept);
/* Reading our Chrome JSON back (pt_jsonlines.c). pt_line_keys maps a call line's
 * function text - from "cat": to the name's closing quote, and the extra args
 * after "Python thread" - to its key and slice flags. pt_read_call_lines takes
 * the call lines of thread from text[*pos..len) (each ending ",\n", exactly as
 * pt_format_slices writes them, of a known function, its id the next of the
 * thread's and its parent an open call of it that encloses it) and stops at the
 * first other line, a line without its newline yet, when the batch is full or
 * when limit calls are taken; moves *pos past the lines taken and returns how
 * many. pt_line_thread_push takes one call (PT_ERR_ARG: its parent is not an
 * earlier call of the thread; PT_ERR_STATE: the parent is no open call or does
 * not enclose it). A thread reads in bounded memory: the calls enclosing the next
 * (a stack as deep as the calls nest) and, when slices is not NULL, the batch of
 * cap slices filled so far (count; the caller empties it). digest sums up every
 * call taken, so a second read can tell it met the same calls. */
typedef struct pt_line_keys pt_line_keys;
typedef struct pt_line_open pt_line_open;
typedef struct {
    pt_slice *slices;       /* the batch being filled (caller's), or NULL: keep none */
    uint64_t count;         /* in slices */
    uint64_t cap;
    uint64_t n;             /* calls taken: the thread index of the next one */
    uint64_t limit;         /* take at most this many calls */
    int64_t start_ns;       /* the trace's start: "ts" counts from it */
    uint64_t first_id;      /* "Python id" of the thread's first call */
    uint64_t tid;
    uint32_t thread_index;  /* "Python thread" */
    uint32_t max_depth;
    uint64_t pid;           /* of the last call taken */
    uint64_t digest;
    pt_line_open *open;     /* the enclosing calls, innermost last */
    uint64_t n_open;
    uint64_t open_cap;
} pt_line_thread;
pt_line_keys *pt_line_keys_new(void);
void pt_line_keys_free(pt_line_keys *keys);
int pt_line_keys_add(pt_line_keys *keys, const char *ident, uint32_t ident_len, const char *extra,
                     uint32_t extra_len, uint32_t key, uint32_t flags);
uint64_t pt_read_call_lines(const pt_line_keys *keys, pt_line_thread *thread, const char *text,
                            uint64_t len, uint64_t *pos);
int pt_line_thread_push(pt_line_thread *thread, int64_t start, int64_t end, uint32_t key,
                        uint32_t flags, int64_t parent);
/* A zeroed thread (limit: no limit), or NULL when out of memory; free with
 * pt_line_thread_free (its stack; the batch is the caller's). */
pt_line_thread *pt_line_thread_new(void);
void pt_line_thread_free(pt_line_thread *thread);
/* Summary (pt_summary.c): adds one thread's slices to per-name calls, total_ns
 * (recursion counted once) and self_ns (less direct callees), n_names entries
 * each; name_of_key maps each of n_keys keys to its name. times_open is scratch
 * of n_names zeros, left zeroed. PT_ERR_ARG: a key or name out of range. */
int pt_summarize_slices(const pt_slice *slices, uint64_t n, const uint32_t *name_of_key,
                        uint32_t n_keys, uint32_t n_names, uint64_t *calls, int64_t *total_ns,
                        int64_t *self_ns, uint32_t *times_open);
/* The same streamed: a summarizer (name_of_key copied) takes a thread's slices
 * in batches (start order, parents numbered over the thread, first_index the
 * batch's first), adding to the tables given; pt_summarizer_end_thread after each
 * thread's last batch. NULL / PT_ERR_NOMEM when out of memory; PT_ERR_ARG: a key
 * or name out of range, or a parent that is no open call. */
typedef struct pt_summarizer pt_summarizer;
pt_summarizer *pt_summarizer_new(const uint32_t *name_of_key, uint32_t n_keys, uint32_t n_names);
void pt_summarizer_free(pt_summarizer *s);
int pt_summarizer_feed(pt_summarizer *s, const pt_slice *slices, uint64_t n, uint64_t first_index,
                       uint64_t *calls, int64_t *total_ns, int64_t *self_ns);
void pt_summarizer_end_thread(pt_summarizer *s);
/* Removes slices shorter than min_ns (with their callees) in place, renumbering
 * parents; new_index is caller scratch of n entries. Returns how many remain. */
uint64_t pt_drop_short_slices(pt_slice *slices, uint64_t n, int64_t min_ns, int64_t *new_index);
/* Checks events read from a file: call, return and seed keys below n_keys, tag
 * indexes below n_tags, annotation-args indexes below n_args. -1 if all hold,
 * else the index of the first event that breaks one. */
int64_t pt_validate_events(const pt_event *events, uint64_t n, uint32_t n_keys, uint32_t n_tags,
                           uint32_t n_args);
/* The ticks a run of events advances its thread's clock by (mod 2^64): where
 * the next spilled block of the thread must start. */
uint64_t pt_events_ticks(const pt_event *events, uint64_t n);
/* Raises needed[0] to one past the largest key a call, return or seed names,
 * needed[1] past the largest tag index, needed[2] past the largest annotation
 * args index: what a process killed before writing meta.json must have had. */
void pt_events_extent(const pt_event *events, uint64_t n, uint64_t needed[3]);

/* Indices of the slices that carry a tag (up to cap); returns how many there are. */
uint64_t pt_tagged_slices(const pt_slice *slices, uint64_t n, uint64_t *out, uint64_t cap);
/* torch's record_function regions made explicit. region_keys[tag] (tags below
 * n_tags) is the key of the region a tagged call (record_function.__enter__)
 * opens, PT_REGION_EXIT for a call (__exit__) that closes the innermost region
 * opened beside it, else 0. Copies in[0..n) to out with a region slice before
 * each opening call: from its start to the closing call's end (or, unclosed,
 * the enclosing call's end), enclosing the opening call, the calls made between
 * and the closing call. cap: n + the number of regions; scratch: n + 2 * that
 * number of entries. Returns the count written (UINT64_MAX if cap is short);
 * with out NULL, only the number of regions. */
#define PT_REGION_EXIT 0xFFFFFFFF
uint64_t pt_insert_regions(const pt_slice *in, uint64_t n, const uint32_t *region_keys,
                           uint32_t n_tags, pt_slice *out, uint64_t cap, int64_t *scratch);
/* Checks slices read from a file: keys below n_keys, known flags, parents
 * earlier in the thread and enclosing their children. -1 if all hold, else the
 * index of the first slice that breaks one. */
int64_t pt_validate_slices(const pt_slice *slices, uint64_t n, uint32_t n_keys);
/* The same checks on a thread's slices fed in batches (load() of slices.bin),
 * holding only the open ancestors; a parent must also be one of them (a thread's
 * calls come parent first, each subtree whole). pt_slice_check_feed returns -1
 * when all hold, the thread-wide index of the first slice that breaks one, or -2
 * when out of memory; pt_slice_check_stats: slices checked, those open at stop
 * and the deepest depth. */
typedef struct pt_slice_check pt_slice_check;
pt_slice_check *pt_slice_check_new(void);
void pt_slice_check_free(pt_slice_check *check);
int64_t pt_slice_check_feed(pt_slice_check *check, const pt_slice *slices, uint64_t n,
                            uint32_t n_keys);
void pt_slice_check_stats(const pt_slice_check *check, uint64_t *count,
                          uint64_t *open_at_stop, uint32_t *max_depth);
uint32_t pt_key_count(pt_tracer *tracer);
/* Copies the first n keys' flags into out (PT_KEY_SKIPPED: left out by the
 * include/exclude filters). */
#define PT_KEY_SKIPPED 2
#define PT_KEY_NAMED 16     /* left out by the filters but kept: the watcher names its calls */
int pt_key_flags(pt_tracer *tracer, uint8_t *out, uint32_t n);

/* Chrome JSON export: formats slices[*next..n) as complete events into out until it
 * is nearly full, advancing *next. Each event is prefix (",\n{...\"name\":"),
 * names[key] (already JSON-escaped), ts/dur in microseconds with three decimals
 * relative to base_ns, and args {"Python id", "Python parent id", "Python thread"}
 * followed by extras[key] (",\"k\":v" or ""). */
/* The same for slices numbered from index_base (a streaming walk's batch): the
 * slice at i has "Python id" first_id + index_base + i; parents are absolute. */
int pt_format_slices_from(const pt_slice *slices, uint64_t n, uint64_t *next,
                          const char *const *names, const uint32_t *name_lens,
                          const char *const *extras, const uint32_t *extra_lens, uint32_t n_keys,
                          const char *prefix, uint32_t prefix_len, int64_t base_ns,
                          uint64_t first_id, uint64_t index_base, uint32_t thread_index,
                          char *out, uint64_t cap, uint64_t *written);
int pt_format_slices(const pt_slice *slices, uint64_t n, uint64_t *next,
                     const char *const *names, const uint32_t *name_lens,
                     const char *const *extras, const uint32_t *extra_lens, uint32_t n_keys,
                     const char *prefix, uint32_t prefix_len, int64_t base_ns,
                     uint64_t first_id, uint32_t thread_index, char *out, uint64_t cap,
                     uint64_t *written);
/* merge_torch: moves slice times (in place) from CLOCK_MONOTONIC ns onto
 * CLOCK_REALTIME ns as _clock.monotonic_to_realtime does, from the clocks' offsets
 * off0 at mono0 (start) and off1 at mono1 (stop): linear in between, held outside.
 * *first_start and *last_end get the earliest start and the latest end
 * (INT64_MAX and INT64_MIN when n is 0). */
void pt_slices_to_realtime(pt_slice *slices, uint64_t n, int64_t mono0, int64_t off0,
                           int64_t mono1, int64_t off1, int64_t *first_start,
                           int64_t *last_end);
/* Perfetto export (pt_perfetto.c): encodes a thread's slices as SLICE_BEGIN /
 * SLICE_END TrackEvent packets (each a Trace.packet entry) into out until it is
 * nearly full, resuming from *cursor (zeroed, last_ns = the sequence clock's
 * value, before the thread's first call). Timestamps are deltas from the previous
 * packet of the sequence. A begin carries key's bytes of events (TrackEvent
 * fields: name iid, category iids, debug annotations), open_mark too when the
 * slice was open at stop, and key's bytes of interned (InternedData fields) the
 * first time key is seen while interned_done[key] is 0. Key k's bytes are
 * blob[offsets[k]..offsets[k + 1]); both blobs end with PT_PF_BLOB_PADDING spare
 * bytes. A thread's slices may come in batches (first_index: the thread-wide
 * index of slices[0], which parents count in; cursor->next restarts at 0 for
 * each batch while the rest of the cursor carries on); the open slices' indices
 * and ends wait on stack and stack_end (stack_cap entries: the thread's deepest
 * depth + 1) and are ended after the last batch (last_batch). A batch is done
 * when cursor->next == n, the thread when also cursor->open == 0 after the last.
 * PT_ERR_ARG: slices out of time order, a key >= n_keys or too deep. */
#define PT_PF_BLOB_PADDING 16
typedef struct {
    uint64_t next;          /* the next slice to begin */
    uint32_t open;          /* slices begun and not yet ended, on the stack */
    int64_t last_ns;        /* timestamp of the sequence's previous packet */
} pt_pf_cursor;
int pt_pftrace_slices(const pt_slice *slices, uint64_t n, uint64_t first_index,
                      int last_batch, pt_pf_cursor *cursor, int64_t *stack,
                      int64_t *stack_end, uint32_t stack_cap,
                      const char *events, const uint32_t *event_offsets,
                      const char *interned, const uint32_t *interned_offsets,
                      uint8_t *interned_done, uint32_t n_keys,
                      const char *open_mark, uint32_t open_mark_len,
                      uint32_t sequence_id, char *out, uint64_t cap, uint64_t *written);
/* Streaming walk (pt_walk.c): one thread's calls from its events, fed a run at a
 * time, with everything the slice pipeline does (hiding, torch regions,
 * min_duration, tagged names, carriers), without a slice table. The tables are
 * the caller's and must outlive the walk. Per tag (below n_tags): region_key as
 * for pt_insert_regions; tag_key, a module call's key (else 0); step_key, the key
 * an optimizer step gives its parent (else 0), unless the parent's key has
 * annotation_name[key] (n_keys entries, 0 for no annotation) equal to
 * step_name[tag]. Per args index (below n_args): args_key, the key of a region
 * with those args (0: keep its key; the scan only needs nonzero for "has args").
 * Walk a thread twice: first a scan (pt_walk_new with scan NULL; no output; its
 * stats are the trace's counts), then an emitting walk given that scan, whose
 * records (begin and end, in time order) pt_walk_ready hands out once final.
 * Feeding after pt_walk_finish: PT_ERR_STATE. */
typedef struct {
    const uint8_t *hidden;
    uint32_t n_hidden;
    uint32_t n_tags;
    const uint32_t *region_key;
    const uint32_t *tag_key;
    const uint32_t *step_key;
    const uint32_t *step_name;
    const uint32_t *annotation_name;
    uint32_t n_keys;
    uint32_t n_args;
    const uint32_t *args_key;
    int64_t min_ns;
    int64_t tick0;
    int64_t ns0;
    double ns_per_tick;
    int64_t stop_ticks;
} pt_walk_tables;
typedef struct {
    uint64_t slices;        /* calls (and regions) the trace shows */
    uint64_t open_at_stop;  /* of them, still running at stop */
    uint32_t max_depth;     /* deepest depth of a shown call */
    uint32_t reserved;
    uint64_t calls_begun;   /* calls and regions begun so far (where a walk failed) */
} pt_walk_stats;
typedef struct {
    int64_t ts;             /* ns */
    uint32_t key;
    uint32_t flags;         /* PT_RECORD_* */
} pt_walk_record;
#define PT_RECORD_END 1             /* else a begin */
#define PT_RECORD_OPEN_AT_STOP 2    /* a begin of a call still running at stop */
typedef struct pt_walk pt_walk;
/* Returns a new walk (pt_walk_free it), NULL when out of memory or given a scan
 * not finished. The scan must outlive the emitting walk; several emitting walks
 * may share it. base_ticks: the clock the first event's delta counts from. */
pt_walk *pt_walk_new(const pt_walk_tables *tables, const pt_walk *scan, int64_t base_ticks);
void pt_walk_free(pt_walk *walk);
int pt_walk_feed(pt_walk *walk, const pt_event *events, uint64_t n);
/* Closes the calls open at stop (and the top-level regions). */
int pt_walk_finish(pt_walk *walk);
int pt_walk_get_stats(const pt_walk *walk, pt_walk_stats *out);
/* A finished scan: per args index, the key of the call the args were recorded
 * on (0xFFFFFFFF: none). */
int pt_walk_args_keys(const pt_walk *walk, uint32_t *out, uint32_t n);
/* The records that are final, and how many; pt_walk_consume drops the first n. */
uint64_t pt_walk_ready(const pt_walk *walk, const pt_walk_record **records);
void pt_walk_consume(pt_walk *walk, uint64_t n);
/* Slices mode, for exports that want each call whole and in start order (JSON):
 * a scan told to keep durations (before it is fed; 4 bytes a call, room made for
 * `expected` calls: a first scan's calls_begun) gives an
 * emitting walk that writes pt_slices instead of records, numbered (parent,
 * depth) as the slice table numbers them, each final at once. pt_walk_ready_slices
 * hands them out with the index of the first; pt_walk_consume_slices drops them. */
int pt_walk_keep_durations(pt_walk *walk, uint64_t expected);
uint64_t pt_walk_ready_slices(const pt_walk *walk, const pt_slice **slices,
                              uint64_t *first_index);
void pt_walk_consume_slices(pt_walk *walk);
/* A view of a thread's held events from event `first` on (up to the end of the
 * chunk holding it; *n 0 past the end), and the clock the first held one counts from. */
int pt_thread_events_at(pt_tracer *tracer, int index, uint64_t first, const pt_event **events,
                        uint64_t *n, int64_t *base_ticks);
/* .pftrace packets of walk records (see pt_pftrace_slices): encodes records[*next..n)
 * into out until it is nearly full, advancing *next and *last_ns. PT_ERR_ARG:
 * out of time order or a key >= n_keys. */
int pt_pftrace_records(const pt_walk_record *records, uint64_t n, uint64_t *next, int64_t *last_ns,
                       const char *events, const uint32_t *event_offsets,
                       const char *interned, const uint32_t *interned_offsets,
                       uint8_t *interned_done, uint32_t n_keys,
                       const char *open_mark, uint32_t open_mark_len,
                       uint32_t sequence_id, char *out, uint64_t cap, uint64_t *written);
/* Appends, for keys first..count-1, what names each key to py_list: a code
 * object, or a (owner, name) tuple for a built-in (owner a module, a type or None). */
int pt_key_sources(pt_tracer *tracer, uint32_t first, void *py_list);

#endif /* PT_CORE_H */

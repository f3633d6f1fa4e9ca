/* pt_record_internal.h - what the recording units share (the hooks and
 * everything they call or that feeds them: pt_hooks.c, pt_core.c, pt_buffers.c,
 * pt_keys.c, pt_clock.c, pt_signals.c, pt_own.c, pt_runtime.c, pt_annotate.c,
 * pt_exceptions.c, pt_logargs.c, pt_flight.c, pt_flight_files.c): the tracer,
 * its threads and their chunks of events, the key table, the clock, and the
 * inline pieces of the hot path. Apart from the export units' header
 * (pt_export_internal.h), which never sees these structures: they change with
 * the recorder alone.
 *
 * Threading model: all mutation happens with the GIL held (the hooks run with it;
 * every public entry point takes it). Each OS thread appends only to its own
 * pt_thread buffer, found through a thread-local cache, so the hot path shares no
 * mutable memory between threads. The tracer's key table and thread list are
 * shared and change only on cold paths, under the GIL.
 */
#ifndef PT_RECORD_INTERNAL_H
#define PT_RECORD_INTERNAL_H

#include "pt_cpython.h"
#include "pt_internal.h"

#define PT_FIRST_CHUNK_BYTES (64u << 10)  /* a thread's first chunk: small threads stay small */
#define PT_CHUNK_BYTES (2u << 20)         /* later chunks: one transparent huge page */
#define PT_SEED_DEPTH 128                 /* frames seeded per thread at attach */

typedef struct pt_chunk {
    struct pt_chunk *next;
    uint64_t used;                /* events written (kept current for non-tail chunks) */
    uint64_t capacity;
    uint64_t seq;                 /* allocation order across threads: oldest goes first */
    int64_t base_ticks;           /* the thread's clock before this chunk's first event */
    pt_event events[];
} pt_chunk;

typedef struct pt_thread {
    struct pt_thread *next;       /* tracer->threads list, newest first */
    pt_event *cursor;             /* next free slot in tail chunk */
    pt_event *limit;              /* end of tail chunk */
    pt_chunk *head;
    pt_chunk *tail;
    int64_t last_ticks;           /* clock at this thread's previous event */
    int64_t base_ticks;           /* clock the first delta counts from */
    uint64_t dropped;
    uint64_t spilled;
    /* The latest C-level call seen and its key (0: not a built-in). Its return
     * names the same objects, alive from call to return, so it reuses the key; a
     * call in between leaves a pair whose objects cannot share those addresses
     * unless they are the same objects (and so the same key). */
    const void *c_callable;
    const void *c_arg0;
    uint32_t c_key;
    uint32_t open_calls;          /* recorded calls open, counted under max_depth */
    uint32_t suppressed;          /* calls open beyond max_depth */
    uint64_t tstate_id;
    uint64_t ident;
    uint64_t native_id;
    int index;                    /* position in creation order */
    int hook_lost;                /* another profiler was found in place of our hook */
    int alive_at_stop;            /* its thread state was still there at pt_stop */
    int ended_unhooked;           /* ran or ended before start() set its hook (pt_profile_plan) */
    /* log_args (pt_logargs.c): the logged calls open on this thread, innermost
     * last, as (key, annotation_args index) pairs */
    uint32_t *logged;
    uint32_t n_logged, cap_logged;
    /* log_exceptions on 3.9-3.11 (pt_exceptions.c): the cursor after the last
     * exception reported, so that the next report knows nothing was recorded
     * in between (the same exception, unwinding further) */
    const pt_event *exception_mark;
} pt_thread;

typedef struct {
    const void *a;                /* code object, or built-in implementation */
    const void *b;                /* NULL, or the built-in's owner */
    uint32_t id;
} pt_key_slot;

struct pt_tracer {
    uint64_t generation;          /* unique per tracer; validates TLS caches */
    int flags;
    int backend;
    int state;                    /* PT_STATE_* */
    int hot_error;                /* sticky: first failure seen on a hook */
    int64_t start_ns;
    int64_t stop_ns;
    int64_t start_ticks;
    int64_t stop_ticks;
    int64_t anchor[2][3];         /* at start, at stop: monotonic ns, realtime ns, spread */
    PyObject *handle;             /* the object our hooks receive; points back here */
    PyObject *monitoring_missing; /* sys.monitoring.MISSING (3.12+) */
    PyObject *monitoring_disable; /* sys.monitoring.DISABLE (3.12+) */
    PyObject *code_filter;        /* skip(code) -> bool, or NULL: record all code */
    uint32_t max_depth;           /* 0: no limit, and no import check (skip_imports
                                     sets UINT32_MAX: calls are then counted) */
    uint32_t classify_from;       /* while nonzero, new code keys from here wait to be
                                     classified (pt_start runs no Python code) */
    PyTypeObject *plain_types[4]; /* static types seen not to be built-in functions
                                     (never PyMethod_Type under PT_FLAG_UNWRAP_METHODS) */
    unsigned plain_types_next;
    pt_thread *threads;
    int n_threads;
    /* key table: open addressing, power-of-two capacity */
    pt_key_slot *slots;
    uint32_t slot_mask;
    uint32_t n_keys;              /* ids handed out, including the reserved 0 */
    uint32_t slots_used;          /* keys and marks: the table stays half empty */
    PyObject **sources;           /* id -> strong ref naming the key */
    uint8_t *key_flags;           /* id -> PT_KEYF_*, sources_cap entries */
    /* The flight recorder's: each code key's file, first line and name as it is
     * first seen ("id\tfile\tline\tname\n" lines), for a dump C writes alone. */
    int note_sources;
    char *source_text;
    size_t source_len, source_cap;
    uint32_t sources_cap;
    PyObject *watch_names;        /* set of co_names worth classifying, or NULL */
    PyObject *watch_classify;     /* classify(code) -> int */
    PyObject *watch_tag;          /* tag(frame) -> int */
    PyObject *annotation_args;    /* list: args dicts of record_function calls, of
                                     logged calls (log_args) and of collections (log_gc) */
    PyObject *exception_hook;     /* log_exceptions: describe(...) -> (name, args) or None */
    PyObject *args_match;         /* log_args: match(code) -> bool, asked once per code */
    PyObject *args_call;          /* log_args: on_call(frame, first_entry) -> dict or None */
    PyObject *args_return;        /* log_args: on_return(args dict, value, raised) */
    /* bounded memory (max_events): past it the oldest chunks are spilled to
     * `spill` when set, else dropped and counted */
    uint64_t max_events;
    uint64_t held_events;         /* capacity of the chunks held */
    uint64_t chunk_seq;
    uint64_t bounded_chunk_events;
    int64_t max_age_ticks;        /* flight recorder by seconds: older chunks dropped (0: none) */
    FILE *spill;                  /* opened for reading too: pt_spill_move copies it */
    char *spill_path;             /* where it is, to open it again (pt_spill_ours) */
    pt_file_id spill_id;          /* the file it is (pt_internal.h) */
    uint64_t spilled_events;
    uint64_t spill_bytes;         /* the spill file's length in whole blocks */
    int spill_errno;              /* why the last block failed to go in (0: it did) */
    int spill_held;               /* recording stopped, chunks kept for pt_spill_rest */
    /* pt_set_spill_hook: each full chunk goes to the spill file at once (a killed
     * process loses at most one chunk per thread), after spill_hook() has run */
    PyObject *spill_hook;
    PyObject *progress_region;    /* the flight recorder's watchdog: this region's end is progress */
    int spill_hook_busy;
    PyObject *marks;              /* list: instants and counters */
    /* 3.9-3.11: sys.getprofile, checked at start to be the built-in (it reads the
     * current thread state's profile object), and the threads found to have lost
     * our hook: a list of (thread index, last event ticks, ticks when noticed, the
     * profile object found instead). */
    PyObject *getprofile;
    PyObject *hooks_lost;
    PyObject *thread_objects;     /* dict: tstate id -> threading.Thread, filled by the
                                     thread hook (pt_start's py_thread_objects), or NULL */
    /* hooks inside Python code they called (pt_python_enter), and whether the
     * trace was dropped meanwhile: the last of them frees the tracer */
    uint32_t in_python;
    int free_pending;
    char error[256];
    /* log_gc, memory_interval_ms, log_async (pt_runtime.c): last, so that they
     * leave every other field where it was */
    PyObject *gc_args;            /* dict: the args dicts of collections, each distinct
                                     one once (pt_runtime.c), or NULL */
    int start_thread;             /* index of the thread that called pt_start, or -1 */
    int n_lanes;                  /* task lanes made */
};

enum { PT_STATE_NEW = 0, PT_STATE_RUNNING = 1, PT_STATE_STOPPED = 2 };

#define PT_KEYF_TAG 1                 /* calls of this key ask the watcher for a tag */
#define PT_KEYF_SKIP PT_KEY_SKIPPED   /* code left out by the include/exclude filters */
#define PT_KEYF_UNCOUNTED 4           /* calls of this key never count toward max_depth */
#define PT_KEYF_IMPORT 8              /* the import machinery's entry (skip_imports): its
                                         calls and all they call are suppressed */
#define PT_KEYF_NAMED PT_KEY_NAMED    /* code the filters leave out, kept because the
                                         watcher names its calls; the built-ins it calls
                                         stay out */
#define PT_KEYF_LOG_ARGS 32           /* log_args matched this code: its calls record
                                         their arguments and return values */
#define PT_KEYF_UNRECORDED 64         /* a built-in whose calls are never recorded: a
                                         region's __enter__, which 3.14's `with` calls
                                         through CALL (its return would close the
                                         region it opens) */

/* Whether the built-ins called by code of this key are left out with it. */
static inline int
pt_callees_skipped(const pt_tracer *tracer, uint32_t key)
{
    return tracer->key_flags[key] & (PT_KEYF_SKIP | PT_KEYF_NAMED);
}

#include <stdio.h>
#include <time.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define PT_HAVE_TSC 1
#else
#define PT_HAVE_TSC 0
#endif

/* Monotonic nanoseconds. CLOCK_MONOTONIC is a vDSO read on Linux (~24 ns here). */
static inline int64_t
pt_clock(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* The event clock: the invariant TSC (~10 ns) when Python found the kernel itself
 * uses it as clocksource, else CLOCK_MONOTONIC nanoseconds. */
static inline int64_t
pt_ticks(const pt_tracer *tracer)
{
#if PT_HAVE_TSC
    if (tracer->flags & PT_FLAG_TSC)
        return (int64_t)__rdtsc();
#endif
    (void)tracer;
    return pt_clock();
}

/* pt_core.c */
pt_thread *pt_thread_find(pt_tracer *tracer, uint64_t tstate_id);
/* A thread of pytrace_cffi's own, never recorded (pt_own.c). */
int pt_is_own_tstate(uint64_t tstate_id);
pt_thread *pt_thread_for_reading(pt_tracer *tracer, int index);
pt_thread *pt_thread_new(pt_tracer *tracer, uint64_t tstate_id, uint64_t ident,
                         uint64_t native_id, int64_t base_ticks);
void pt_set_error(pt_tracer *tracer, const char *fmt, ...);
void pt_set_error_from_python(pt_tracer *tracer, const char *what);

/* A hook that runs Python code (the watcher's, a filter's, a property naming a
 * built-in, the spill hook) lets other threads run: one may stop tracing and drop
 * the trace. pt_tracer_free then only marks the tracer (free_pending), and the
 * last such hook to come back frees it in pt_python_leave, which returns 1: that
 * hook must then return at once, touching neither the tracer nor its threads.
 * Between enter and leave the tracer stays valid (it may be stopped). All under
 * the GIL. */
static inline void
pt_python_enter(pt_tracer *tracer)
{
    tracer->in_python++;
}

int pt_python_leave(pt_tracer *tracer);

/* pt_hooks.c: attach the calling thread (a thread born during tracing), seeding
 * its frames except the innermost skip_frames (the attaching hook's own). */
int pt_attach_current_thread(pt_tracer *tracer, int skip_frames);

/* pt_buffers.c */
void pt_buffers_init_once(void);     /* registers the pool's fork handler */
int pt_thread_grow(pt_tracer *tracer, pt_thread *thread);
void pt_chunk_free(pt_chunk *chunk);
/* Closes the spill file when its descriptor is still ours (a program that
 * closed it may have its own file under that number now); 0, or fclose's. */
int pt_spill_close(pt_tracer *tracer);

/* Events written to chunk: the tail chunk is filled up to the thread's cursor. */
static inline uint64_t
pt_chunk_used(const pt_thread *thread, const pt_chunk *chunk)
{
    return chunk == thread->tail ? (uint64_t)(thread->cursor - chunk->events)
                                 : chunk->used;
}

/* pt_signals.c */
/* One block of spilled events: which thread, how many, the clock before them
 * (events.bin's format: pt_buffers.c writes it, pt_flight.c's dumps too). */
typedef struct {
    uint32_t thread_index;
    uint32_t reserved;
    uint64_t n_events;
    int64_t base_ticks;
} pt_spill_block;

void pt_flight_after_fork(void);    /* a forked child starts with no flight thread */
void pt_sigterm_after_fork(void);    /* a forked child makes its own relay timer */
void pt_flight_on_sigterm(void);     /* SIGTERM's relay: the flight thread serves it too */
void pt_hooks_after_fork(void);      /* a forked child records nothing with its parent's tracer */

/* pt_keys.c */
uint32_t pt_key_for_new_code(pt_tracer *tracer, PyObject *code);
uint32_t pt_key_find(pt_tracer *tracer, const void *a, const void *b);
/* While pt_start walks the threads, Python callbacks about new code keys wait:
 * Python code could let other threads run and change the thread list. */
void pt_defer_questions(pt_tracer *tracer);
void pt_ask_deferred_questions(pt_tracer *tracer);
/* Takes ownership of source (a new reference naming the key). */
uint32_t pt_key_add(pt_tracer *tracer, const void *a, const void *b, PyObject *source);
/* 0 when the tracer stopped while Python code named the built-in. */
/* Whether a built-in's implementation (a method descriptor, or the method
 * definition of a bound one) is record_function's __enter__ (pt_annotate.c). */
int pt_is_region_enter(const void *implementation);
uint32_t pt_key_for_builtin_slow(pt_tracer *tracer, PyObject *callable, int is_function,
                                 const void *a, PyObject *self);

/* Appends one raw record: 1. On allocation failure counts it as dropped: 0.
 * When tracing stopped while the spill hook ran (the tracer may be gone: see
 * pt_python_enter): -1, and the caller touches neither tracer nor thread. */
static inline int
pt_append(pt_tracer *tracer, pt_thread *thread, uint32_t delta, uint32_t key_kind)
{
    if (thread->cursor == thread->limit) {
        int rc = pt_thread_grow(tracer, thread);
        if (rc != PT_OK) {
            if (rc == PT_ERR_STATE)    /* after stop: no loss */
                return -1;
            thread->dropped++;
            return 0;
        }
    }
    pt_event *ev = thread->cursor++;
    ev->delta = delta;
    ev->key_kind = key_kind;
    return 1;
}

int pt_append_time(pt_tracer *tracer, pt_thread *thread, uint64_t delta);
/* Whether index (a tag, an annotation args slot) fits a TAG or ARGS aux event's
 * payload. When it does not, a sticky error says so (as a full key table does)
 * and the caller records no aux event: a call is left without its tag or args, never
 * given a wrong one. */
int pt_aux_fits(pt_tracer *tracer, uint32_t sub_kind, long long index);
/* events.bin's header (docs/FORMAT.md): magic, version, record size */
#define PT_EVENTS_HEADER "PTEVENTS\2\0\0\0\x08\0\0\0"
_Static_assert(PT_EVENTS_VERSION == 2, "PT_EVENTS_HEADER spells the version");

/* ======================================================================== */
/* Key table lookups, inlined into the hooks                                */
/* ======================================================================== */

static inline uint32_t
pt_key_hash(const void *a, const void *b)
{
    /* one multiply; the table takes the low bits of the product's high half */
    uint64_t h = ((uint64_t)(uintptr_t)a >> 4) ^ ((uint64_t)(uintptr_t)b * 0x9E3779B97F4A7C15ull);
    return (uint32_t)((h * 0xBF58476D1CE4E5B9ull) >> 32);
}

/* The id of (a, b), or 0 when absent. The table is never full (pt_keys.c keeps
 * it at most half used), so the probe ends. */
static inline uint32_t
pt_key_lookup(const pt_tracer *tracer, const void *a, const void *b)
{
    uint32_t j = pt_key_hash(a, b) & tracer->slot_mask;
    for (;;) {
        const pt_key_slot *slot = &tracer->slots[j];
        if (slot->a == a && slot->b == b)
            return slot->id;    /* an empty slot matches only a == b == NULL: id 0 */
        if (!slot->id)
            return 0;
        j = (j + 1) & tracer->slot_mask;
    }
}

/* The key of a code object: one probe on the hot path, the insert (and the
 * watcher's and filter's questions about new code) out of line. 0 when out of
 * memory, or when the tracer stopped while Python code answered those questions
 * (a hook then records nothing: its checks of 0 fold into this miss branch). */
static inline uint32_t
pt_key_for_code(pt_tracer *tracer, PyObject *code)
{
    uint32_t id = pt_key_lookup(tracer, code, NULL);
    return id ? id : pt_key_for_new_code(tracer, code);
}

/* Built-in keys pair an implementation with what tells its calls apart, in
 * namespaces that must never meet (a type can be both an owner itself and the
 * type of an owner):
 *   - a function whose self is a module or NULL: the function object itself
 *     (held by the key's source, so its address never aliases) with
 *     PT_CALLABLE_KEY; C modules may define several functions on one C function,
 *     so the implementation alone would merge them (but a method of the module's
 *     type, bound anew on each access, is keyed like a function record below);
 *   - a module or a type owning the call (a classmethod): the owner's address;
 *   - the type of an ordinary object (a bound method): the type's address plus 2;
 *   - a "function record" self (pybind11 makes every function share one C
 *     dispatcher, each bound to its own record object): the self object itself,
 *     held by the source; (implementation, type) pairs keyed by self carry a
 *     record mark under the type's address plus 3 (pt_keys.c);
 *   - owner-is-self marks (pt_keys.c) under the type's address plus 1.
 * No object lives at an odd or 2-mod-4 address (objects are 8-aligned), and none
 * at PT_CALLABLE_KEY. */
static inline const void *
pt_instance_owner(PyTypeObject *type)
{
    return (const char *)type + 2;
}

static inline const void *
pt_owner_mark(PyTypeObject *type)
{
    return (const char *)type + 1;
}

static inline const void *
pt_record_mark(PyTypeObject *type)
{
    return (const char *)type + 3;
}

#define PT_CALLABLE_KEY ((const void *)(uintptr_t)8)

/* The ids of marks: never read as keys, but no key's id either. */
#define PT_OWNER_IS_SELF 0x80000000u
#define PT_SELF_IS_RECORD 0x80000001u

/* The key of a built-in: a PyCFunction (is_function, self_arg unused), or a
 * method descriptor called on self_arg. It is named the way sys.setprofile's
 * bound method would be (pytrace_cffi/_names.py states the rule). The usual
 * cases, a module function or a built-in seen before on a plain object or a
 * type, are one probe here; everything else goes to pt_key_for_builtin_slow. */
static PT_ALWAYS_INLINE uint32_t
pt_key_for_builtin(pt_tracer *tracer, PyObject *callable, int is_function,
                   PyObject *self_arg)
{
    const void *a;
    const void *b;
    PyObject *self;
    if (is_function) {
        self = PyCFunction_GetSelf(callable);
        if (!self || Py_TYPE(self) == &PyModule_Type) {
            a = callable;
            b = PT_CALLABLE_KEY;
            goto probe;
        }
        a = pt_cfunction_def(callable);       /* not its C function: see pt_cpython.h */
    } else {
        a = callable;
        self = self_arg;
    }
    PyTypeObject *self_type = Py_TYPE(self);
    b = self_type == &PyModule_Type || self_type == &PyType_Type ? (const void *)self
                                                                 : pt_instance_owner(self_type);
probe:;
    uint32_t id = pt_key_lookup(tracer, a, b);
    return id ? id : pt_key_for_builtin_slow(tracer, callable, is_function, a, self);
}

/* Appends one event at `ticks` (never before the thread's previous event). The
 * thread's clock advances only by what was stored, so a chunk started by this
 * append takes the clock before it as its base. Returns pt_append's answer. */
static inline int
pt_record_at(pt_tracer *tracer, pt_thread *thread, uint32_t kind, uint32_t key,
             int64_t ticks)
{
    uint64_t delta = ticks > thread->last_ticks ? (uint64_t)(ticks - thread->last_ticks) : 0;
    if (delta > UINT32_MAX) {           /* a long pause: carry it in a TIME record */
        if (pt_append_time(tracer, thread, delta) < 0)
            return -1;
        delta = 0;
    }
    int rc = pt_append(tracer, thread, (uint32_t)delta, key << PT_KEY_SHIFT | kind);
    if (rc > 0)
        thread->last_ticks += (int64_t)delta;
    return rc;
}

static inline int
pt_record(pt_tracer *tracer, pt_thread *thread, uint32_t kind, uint32_t key)
{
    return pt_record_at(tracer, thread, kind, key, pt_ticks(tracer));
}

void pt_tag_call(pt_tracer *tracer, pt_thread *thread, PyFrameObject *frame);

/* After a Python call was recorded: let the watcher tag it when its key asks. */
static inline void
pt_maybe_tag(pt_tracer *tracer, pt_thread *thread, uint32_t key, PyFrameObject *frame)
{
    if (tracer->key_flags[key] & PT_KEYF_TAG)
        pt_tag_call(tracer, thread, frame);
}

/* pt_logargs.c: asked once per new code object, whether log_args matches it
 * (sets PT_KEYF_LOG_ARGS); after a call of such a key was recorded (frame: the
 * new frame; first_entry 1, 0 for a generator resumed, -1 unknown: Python asks
 * the frame), and after its return was recorded (value NULL when unknown:
 * raised says whether an exception left the frame). The last two run Python
 * code: the hook returns right after pt_log_call, and after pt_log_return when
 * it returns 1 (the tracer may be gone, see pt_python_enter). */
void pt_match_logged_code(pt_tracer *tracer, PyObject *code, uint32_t id);
void pt_log_call(pt_tracer *tracer, pt_thread *thread, uint32_t key, PyFrameObject *frame,
                 int first_entry);
int pt_log_return(pt_tracer *tracer, pt_thread *thread, uint32_t key, PyObject *value,
                  int raised);

/* pt_exceptions.c: one exception event (PT_EXC_*) for the exception hook, at
 * ticks, on thread: place is the code object (3.12+, offset its instruction) or
 * the frame (3.9-3.11), detail the exception (3.12+) or the built-in that raised
 * (PT_EXC_C_RAISE), else None; chained: nothing was recorded on the thread since
 * its last report. Runs Python code: the hook returns right after. */
void pt_report_exception(pt_tracer *tracer, pt_thread *thread, int event, PyObject *place,
                         int offset, PyObject *detail, int chained, int64_t ticks);

/* pt_annotate.c: appends (kind, ticks, thread index, name, payload) to tracer->marks. */
void pt_mark_at(pt_tracer *tracer, const pt_thread *thread, const char *kind, int64_t ticks,
                PyObject *name, PyObject *payload);

/* pt_clock.c: a CLOCK_MONOTONIC / CLOCK_REALTIME pair (monotonic, realtime, spread ns). */
void pt_take_anchor(int64_t out[3]);

/* pt_hooks.c */
PyObject *pt_handle_new(pt_tracer *tracer);   /* new reference */
void pt_handle_detach(PyObject *handle);
void pt_plain_dealloc(PyObject *self);     /* a heap type's object holding no references */
void pt_handle_sync(pt_tracer *tracer);        /* after a change of state or NOOP */
pt_thread *pt_thread_of_caller(pt_tracer *tracer);
/* Task lanes (pt_runtime.c): from enter to leave, the calling OS thread's events
 * go to `lane`, another pt_thread of the tracer. enter returns the thread's own
 * buffer (NULL: a thread no trace records, nothing changed); leave (the
 * tracer's generation at enter, as the tracer may be gone) puts it back. */
pt_thread *pt_thread_enter_lane(pt_tracer *tracer, pt_thread *lane);
void pt_thread_leave_lane(uint64_t generation, pt_thread *lane, pt_thread *own);
extern pt_tracer *pt_active_tracer;

/* The recording tracer, or NULL when not tracing (or in noop mode): what the
 * recorders called by Python code (pt_annotate.c, pt_runtime.c) record into. */
static inline pt_tracer *
pt_annotating_tracer(void)
{
    pt_tracer *tracer = pt_active_tracer;
    if (!tracer || tracer->state != PT_STATE_RUNNING || (tracer->flags & PT_FLAG_NOOP))
        return NULL;
    return tracer;
}

/* pt_annotate.c */
uint32_t pt_key_for_annotation(pt_tracer *tracer, PyObject *name);
/* Appends (kind, ticks, thread index, name, payload) to the tracer's marks (pt_mark_at:
 * the index of that thread). */
void pt_add_mark_at(pt_tracer *tracer, const char *kind, int64_t ticks, int thread_index,
                    PyObject *name, PyObject *payload);

#endif /* PT_RECORD_INTERNAL_H */

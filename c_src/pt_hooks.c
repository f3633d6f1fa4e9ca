/* pt_hooks.c - the hot path: the PyEval_SetProfile callback (3.9-3.11), the
 * sys.monitoring callbacks (3.12+), and installing/removing them with the active
 * frames of every thread seeded at start.
 *
 * The hooks never raise and never allocate Python objects, except on the cold
 * path that interns a function seen for the first time. Failures there set the
 * tracer's sticky error, which Python raises at stop.
 */
#include "pt_record_internal.h"

#include <string.h>

/* ======================================================================== */
/* The handle: the object every hook receives, pointing back to the tracer  */
/* ======================================================================== */

typedef struct {
    PyObject_HEAD
    pt_tracer *tracer;            /* NULL once the tracer is freed */
    pt_tracer *recording;         /* tracer while it records (pt_handle_sync), else NULL */
} pt_handle;

/* The dealloc of a heap type's object that holds no references (the handle,
 * pt_runtime.c's lanes): freed, and its type's reference dropped. */
void
pt_plain_dealloc(PyObject *self)
{
    PyTypeObject *type = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(self);
    Py_DECREF(type);
}

static pt_tracefunc pt_profile_func(const pt_tracer *tracer);

/* sys.getprofile() gives the handle on 3.9-3.11 (PyEval_SetProfile's object), so
 * a program that saves and restores the profile function (old =
 * sys.getprofile(); sys.setprofile(None); ...; sys.setprofile(old)) installs it
 * as a Python profile function. Called so, it puts the C hook back on its thread
 * and hands it this event: the trace goes on, as the program meant. Once the
 * tracer is gone it takes itself off (untraced, old would have been None). */
static PyObject *
pt_handle_call(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static const char *const events[] = {"call", "return", "c_call", "c_return",
                                         "c_exception"};
    static const int whats[] = {PT_TRACE_CALL, PT_TRACE_RETURN, PT_TRACE_C_CALL,
                                PT_TRACE_C_RETURN, PT_TRACE_C_EXCEPTION};
    PyObject *frame, *event, *arg;
    if (kwargs || !PyArg_UnpackTuple(args, "Handle", 3, 3, &frame, &event, &arg))
        return kwargs ? (PyErr_SetString(PyExc_TypeError, "no keyword arguments"), NULL)
                      : NULL;
    pt_tracer *tracer = ((pt_handle *)self)->tracer;
    if (!tracer || tracer->backend != PT_BACKEND_PROFILE || tracer->handle != self ||
        tracer->state != PT_STATE_RUNNING) {
        PyEval_SetProfile(NULL, NULL);
        Py_RETURN_NONE;
    }
    PyEval_SetProfile(pt_profile_func(tracer), self);
    if (Py_TYPE(frame) == &PyFrame_Type && PyUnicode_Check(event)) {
        for (size_t i = 0; i < sizeof whats / sizeof whats[0]; i++)
            if (PyUnicode_CompareWithASCIIString(event, events[i]) == 0) {
                pt_profile_func(tracer)(self, (PyFrameObject *)frame, whats[i], arg);
                break;
            }
    }
    Py_RETURN_NONE;
}

static PyType_Slot pt_handle_slots[] = {
    {Py_tp_dealloc, (void *)pt_plain_dealloc},
    {Py_tp_call, (void *)pt_handle_call},
    {Py_tp_doc, (void *)"pytrace_cffi tracer handle (internal)"},
    {0, NULL},
};

static PyType_Spec pt_handle_spec = {
    "pytrace_cffi._core.Handle", sizeof(pt_handle), 0, Py_TPFLAGS_DEFAULT,
    pt_handle_slots,
};

/* Created once, on first use, with the GIL held; never changes afterwards. */
static PyObject *pt_handle_type;

/* Returns a new reference, or NULL with an exception set. */
PyObject *
pt_handle_new(pt_tracer *tracer)
{
    if (!pt_handle_type) {
        pt_handle_type = PyType_FromSpec(&pt_handle_spec);
        if (!pt_handle_type)
            return NULL;
    }
    allocfunc tp_alloc =
        (allocfunc)PyType_GetSlot((PyTypeObject *)pt_handle_type, Py_tp_alloc);
    PyObject *handle = tp_alloc((PyTypeObject *)pt_handle_type, 0);
    if (handle)
        ((pt_handle *)handle)->tracer = tracer;
    return handle;
}

void
pt_handle_detach(PyObject *handle)
{
    if (handle) {
        ((pt_handle *)handle)->tracer = NULL;
        ((pt_handle *)handle)->recording = NULL;
    }
}

/* The hooks' one test, "record or not" (one load), follows the tracer's state and
 * its NOOP flag: called after each change of either. */
void
pt_handle_sync(pt_tracer *tracer)
{
    pt_handle *handle = (pt_handle *)tracer->handle;
    if (handle && handle->tracer == tracer)
        handle->recording = tracer->state == PT_STATE_RUNNING &&
                            !(tracer->flags & PT_FLAG_NOOP) ? tracer : NULL;
}

/* threading's hook (pt_thread_hook): one for every tracer, made once. */
static PyObject *pt_thread_hook_object;

/* ======================================================================== */
/* Finding the calling thread's buffer                                      */
/* ======================================================================== */

/* Per OS thread: the buffer it appends to, valid while the generation matches
 * the running tracer's. Nothing here is shared between threads.
 *
 * initial-exec: read straight off the thread pointer. The default model for a
 * shared object calls __tls_get_addr on every event; these 16 bytes fit easily
 * in the static TLS glibc keeps spare for libraries loaded later with dlopen. */
#if defined(__GNUC__) || defined(__clang__)
#define PT_TLS __thread __attribute__((tls_model("initial-exec")))
#else
#define PT_TLS __thread
#endif
static PT_TLS pt_thread *pt_tls_thread;
static PT_TLS uint64_t pt_tls_generation;

static pt_thread *
pt_thread_lookup_cold(pt_tracer *tracer)
{
    PyThreadState *tstate = PyThreadState_Get();
    uint64_t tstate_id = PyThreadState_GetID(tstate);
    if (pt_is_own_tstate(tstate_id)) {
        /* ours: "no buffer" cached, so its events record nothing (pt_own.c) */
        pt_tls_thread = NULL;
        pt_tls_generation = tracer->generation;
        return NULL;
    }
    pt_thread *thread = pt_thread_find(tracer, tstate_id);
    if (!thread)
        thread = pt_thread_new(tracer, tstate_id, PyThread_get_thread_ident(), 0,
                               pt_ticks(tracer));
    if (!thread) {
        if (!tracer->hot_error) {
            tracer->hot_error = PT_ERR_NOMEM;
            pt_set_error(tracer, "out of memory for a thread buffer");
        }
        return NULL;
    }
    if (!thread->native_id)
        thread->native_id = PyThread_get_thread_native_id();
    if (!thread->ident)
        thread->ident = PyThread_get_thread_ident();
    pt_tls_thread = thread;
    pt_tls_generation = tracer->generation;
    return thread;
}

static inline pt_thread *
pt_thread_current(pt_tracer *tracer)
{
    if (pt_tls_generation == tracer->generation)
        return pt_tls_thread;
    return pt_thread_lookup_cold(tracer);
}

pt_thread *
pt_thread_of_caller(pt_tracer *tracer)
{
    return pt_thread_current(tracer);
}

/* The running tracer, for the user-facing recorders of pt_annotate.c (the hooks
 * reach theirs through their handle). Written only with the GIL held, at start and
 * stop: the one process-wide pointer, as there is one profile hook per process. */
pt_tracer *pt_active_tracer;

/* A forked child records nothing with the tracer it inherits: its Python stops
 * that tracer in an after-fork hook, but handlers registered before ours (as
 * threading's are) run first, and a spill of theirs would go into the parent's
 * file at the offset both share (or cut it back on a failed write). Called from
 * the pthread_atfork child handler, before any Python code runs in the child. */
void
pt_hooks_after_fork(void)
{
    pt_tracer *tracer = pt_active_tracer;
    if (tracer) {
        tracer->flags |= PT_FLAG_NOOP;
        pt_handle_sync(tracer);
    }
}

/* The tracer a hook should record into, or NULL to do nothing. */
static inline pt_tracer *
pt_recording_tracer(PyObject *handle)
{
    return ((pt_handle *)handle)->recording;
}

/* ======================================================================== */
/* Filters: skipped code and max_depth                                      */
/* ======================================================================== */

static inline int
pt_skipped(const pt_tracer *tracer, uint32_t key)
{
    return tracer->key_flags[key] & PT_KEYF_SKIP;
}

/* A call is recorded only while fewer than max_depth recorded calls are open on
 * its thread; deeper ones (and their returns) are counted as suppressed. Calls of
 * uncounted keys (frames traces leave out) are recorded without counting while
 * nothing is suppressed; inside a suppressed call they are suppressed too, so that
 * returns pair with calls (last in, first out) either way. */
static inline int
pt_depth_enter(const pt_tracer *tracer, pt_thread *thread, uint32_t key)
{
    if (!tracer->max_depth)
        return 1;
    int uncounted = tracer->key_flags[key] & PT_KEYF_UNCOUNTED;
    /* skip_imports: a call of the import machinery's entry opens a suppressed
     * stretch like a call beyond max_depth, closed by its return. */
    if (thread->suppressed || (thread->open_calls >= tracer->max_depth && !uncounted) ||
        (tracer->key_flags[key] & PT_KEYF_IMPORT)) {
        thread->suppressed++;
        return 0;
    }
    if (!uncounted)
        thread->open_calls++;
    return 1;
}

static inline int
pt_depth_leave(const pt_tracer *tracer, pt_thread *thread, uint32_t key)
{
    if (!tracer->max_depth)
        return 1;
    if (thread->suppressed) {
        thread->suppressed--;
        return 0;
    }
    if (thread->open_calls && !(tracer->key_flags[key] & PT_KEYF_UNCOUNTED))
        thread->open_calls--;
    return 1;
}

static inline void
pt_record_call(pt_tracer *tracer, pt_thread *thread, uint32_t kind, uint32_t key)
{
    if (pt_depth_enter(tracer, thread, key))
        pt_record(tracer, thread, kind, key);
}

/* pt_record's answer, or 1 when the return was suppressed (max_depth). */
static inline int
pt_record_return(pt_tracer *tracer, pt_thread *thread, uint32_t kind, uint32_t key)
{
    return pt_depth_leave(tracer, thread, key) ? pt_record(tracer, thread, kind, key) : 1;
}

/* ======================================================================== */
/* Fast paths                                                               */
/* ======================================================================== */

/* The usual event, recorded without a call: with none on the way the compiler
 * keeps everything in scratch registers, so the hook saves and restores none
 * (that prologue and epilogue were a fifth of our own cost per event). The
 * usual event: the thread's buffer is cached and has room, the key is known and
 * has no flag, max_depth (if any) not reached, the TSC clock, and a delta that fits. Anything
 * else goes, with nothing written yet, to the full path as a tail call. */
static PT_ALWAYS_INLINE int
pt_fast_thread(pt_tracer *tracer, pt_thread **thread)
{
#if PT_HAVE_TSC
    if (PT_UNLIKELY(!tracer || pt_tls_generation != tracer->generation ||
                    !(tracer->flags & PT_FLAG_TSC)))
        return 0;
    *thread = pt_tls_thread;
    return *thread != NULL;
#else
    (void)tracer;
    (void)thread;
    return 0;
#endif
}

/* Appends (key, kind) now, or returns 0 having written nothing. Under max_depth
 * it takes only what pt_depth_enter and pt_depth_leave would record for a key
 * without flags (the caller checked): nothing suppressed, and a call only while
 * fewer than max_depth are open; the count moves once the event is stored. */
static PT_ALWAYS_INLINE int
pt_fast_record(const pt_tracer *tracer, pt_thread *thread, uint32_t kind, uint32_t key)
{
#if PT_HAVE_TSC
    int is_call = kind == PT_EV_PY_CALL || kind == PT_EV_C_CALL;
    /* read once: the stores below may alias. C events under max_depth never come
     * here (pt_fast_c_thread): their fast paths stay as lean as without it. */
    uint32_t max_depth = kind == PT_EV_PY_CALL || kind == PT_EV_PY_RETURN ? tracer->max_depth : 0;
    if (PT_UNLIKELY(max_depth) &&
        (thread->suppressed || (is_call && thread->open_calls >= max_depth)))
        return 0;
    int64_t ticks = (int64_t)__rdtsc();
    int64_t last = thread->last_ticks;
    pt_event *ev = thread->cursor;
    if (PT_UNLIKELY(ticks <= last || (uint64_t)(ticks - last) > UINT32_MAX ||
                    ev == thread->limit))
        return 0;
    ev->delta = (uint32_t)(ticks - last);
    ev->key_kind = key << PT_KEY_SHIFT | kind;
    thread->cursor = ev + 1;
    thread->last_ticks = ticks;
    if (PT_UNLIKELY(max_depth)) {
        if (is_call)
            thread->open_calls++;
        else if (thread->open_calls)
            thread->open_calls--;
    }
    return 1;
#else
    (void)tracer;
    (void)thread;
    (void)kind;
    (void)key;
    return 0;
#endif
}

/* ======================================================================== */
/* Backend 1: PyEval_SetProfile (3.9-3.11)                                  */
/* ======================================================================== */

/* Whether the built-in called from `frame` is left out with its caller's code. */
static int
pt_caller_skipped(pt_tracer *tracer, PyFrameObject *frame)
{
    PyObject *code = (PyObject *)PyFrame_GetCode(frame);
    uint32_t key = pt_key_for_code(tracer, code);
    Py_DECREF(code);
    return !key || pt_callees_skipped(tracer, key);     /* 0: stopped meanwhile */
}

/* Whether the profile hook's C-call argument is a built-in function (the only
 * C calls sys.setprofile reports; 3.9-3.11 bind method descriptors first). */
static inline int
pt_is_builtin_function(PyObject *arg)
{
    return Py_TYPE(arg) == &PyCFunction_Type || PyCFunction_Check(arg);
}

/* A Python return under the logging callback (log_args, log_exceptions), arg the
 * value returned, NULL when an exception left the frame. */
static void
pt_profile_logged_return(pt_tracer *tracer, pt_thread *thread, uint32_t key,
                         PyFrameObject *frame, PyObject *arg)
{
    if (!pt_depth_leave(tracer, thread, key))
        return;
    int chained = thread->cursor == thread->exception_mark;
    if (pt_record(tracer, thread, PT_EV_PY_RETURN, key) < 0)
        return;                                 /* stopped (maybe gone) meanwhile */
    if ((tracer->key_flags[key] & PT_KEYF_LOG_ARGS) &&
        pt_log_return(tracer, thread, key, arg, arg == NULL))
        return;
    if (!arg && tracer->exception_hook)
        pt_report_exception(tracer, thread, PT_EXC_UNWIND, (PyObject *)frame, -1, NULL,
                            chained, thread->last_ticks);
}

/* A built-in that raised, under the logging callback with log_exceptions: told
 * once its return is recorded (when it is), so that a frame it then unwinds
 * counts as the same exception. */
static void
pt_profile_c_raised(pt_tracer *tracer, pt_thread *thread, PyFrameObject *frame, PyObject *arg,
                    int chained)
{
    if (tracer->exception_hook && !thread->suppressed && tracer->state == PT_STATE_RUNNING &&
        !(tracer->code_filter && pt_caller_skipped(tracer, frame)))
        pt_report_exception(tracer, thread, PT_EXC_C_RAISE, (PyObject *)frame, -1, arg,
                            chained, pt_ticks(tracer));
}

/* The profile hook's every event (logging: the callback of a tracer that logs
 * arguments or exceptions, which passes arg along). */
static PT_ALWAYS_INLINE int
pt_profile_event(PyObject *handle, PyFrameObject *frame, int what, PyObject *arg, int logging)
{
    pt_tracer *tracer = pt_recording_tracer(handle);
    if (!tracer)
        return 0;
    pt_thread *thread = pt_thread_current(tracer);
    if (!thread)
        return 0;
    int chained = thread->cursor == thread->exception_mark;
    switch (what) {
    case PT_TRACE_CALL:
    case PT_TRACE_RETURN: {
        PyObject *code = (PyObject *)PyFrame_GetCode(frame);
        uint32_t key = pt_key_for_code(tracer, code);
        Py_DECREF(code);
        if (!key || pt_skipped(tracer, key))
            break;
        if (logging && what == PT_TRACE_RETURN) {
            pt_profile_logged_return(tracer, thread, key, frame, arg);
        } else if (what == PT_TRACE_RETURN) {
            pt_record_return(tracer, thread, PT_EV_PY_RETURN, key);
        } else if (pt_depth_enter(tracer, thread, key)) {
            if (pt_record(tracer, thread, PT_EV_PY_CALL, key) < 0)   /* stopped */
                break;
            if (logging && (tracer->key_flags[key] & PT_KEYF_LOG_ARGS)) {
                pt_log_call(tracer, thread, key, frame, -1);
                break;                  /* the tracer may be gone: no tag (no key is both) */
            }
            pt_maybe_tag(tracer, thread, key, frame);
        }
        break;
    }
    case PT_TRACE_C_CALL:
        if ((tracer->flags & PT_FLAG_C_CALLS) &&
            pt_is_builtin_function(arg) &&
            !(tracer->code_filter && pt_caller_skipped(tracer, frame))) {
            uint32_t key = pt_key_for_builtin(tracer, arg, 1, NULL);
            if (key) {          /* 0: out of memory, or stopped (maybe gone) meanwhile */
                thread->c_callable = arg;
                if (tracer->key_flags[key] & PT_KEYF_UNRECORDED) {
                    thread->c_key = 0;          /* its return records nothing either */
                    break;
                }
                thread->c_key = key;
                pt_record_call(tracer, thread, PT_EV_C_CALL, key);
            }
        }
        break;
    case PT_TRACE_C_RETURN:
    case PT_TRACE_C_EXCEPTION: {
        int recorded = 1;               /* < 0: stopped (maybe gone) meanwhile */
        if ((tracer->flags & PT_FLAG_C_CALLS) &&
            !(tracer->code_filter && pt_caller_skipped(tracer, frame))) {
            uint32_t key = 0;
            if (arg == thread->c_callable)
                key = thread->c_key;
            else if (pt_is_builtin_function(arg) &&
                     !(key = pt_key_for_builtin(tracer, arg, 1, NULL)))
                recorded = -1;          /* out of memory, or stopped while naming it */
            if (key && !(tracer->key_flags[key] & PT_KEYF_UNRECORDED))
                recorded = pt_record_return(tracer, thread, PT_EV_C_RETURN, key);
        }
        if (logging && what == PT_TRACE_C_EXCEPTION && recorded >= 0)
            pt_profile_c_raised(tracer, thread, frame, arg, chained);
        break;
    }
    default:
        break;
    }
    return 0;
}

static PT_NOINLINE int
pt_profile_callback_full(PyObject *handle, PyFrameObject *frame, int what, PyObject *arg)
{
    return pt_profile_event(handle, frame, what, arg, 0);
}

static PT_NOINLINE int
pt_profile_logging_full(PyObject *handle, PyFrameObject *frame, int what, PyObject *arg)
{
    return pt_profile_event(handle, frame, what, arg, 1);
}

/* The profile hook's usual events, recorded with as little saved and restored
 * as possible; everything else goes, with nothing written yet, to the full path
 * above (see pt_fast_thread). A Python call or return asks for its code object
 * first (the one call here), so that only the hook's own arguments live across
 * it; a C call or return makes none. */
static PT_ALWAYS_INLINE int
pt_profile_py_fast_body(PyObject *handle, PyFrameObject *frame, int what, PyObject *arg,
                        int logging)
{
    PyObject *code = (PyObject *)PyFrame_GetCode(frame);
    Py_DECREF(code);                    /* the frame holds it: only its address is used */
    pt_tracer *tracer = pt_recording_tracer(handle);
    pt_thread *thread;
    if (PT_UNLIKELY(!pt_fast_thread(tracer, &thread)))
        goto full;
    uint32_t key = pt_key_lookup(tracer, code, NULL);
    if (PT_UNLIKELY(!key || tracer->key_flags[key] ||
                    !pt_fast_record(tracer, thread, what == PT_TRACE_CALL ? PT_EV_PY_CALL
                                                                  : PT_EV_PY_RETURN, key)))
        goto full;
    return 0;
full:
    return logging ? pt_profile_logging_full(handle, frame, what, arg)
                   : pt_profile_callback_full(handle, frame, what, NULL);
}

static PT_NOINLINE int
pt_profile_py_fast(PyObject *handle, PyFrameObject *frame, int what)
{
    return pt_profile_py_fast_body(handle, frame, what, NULL, 0);
}

/* The logging callback's: the return value (arg) goes along to the full path. */
static PT_NOINLINE int
pt_profile_py_fast_logging(PyObject *handle, PyFrameObject *frame, int what, PyObject *arg)
{
    return pt_profile_py_fast_body(handle, frame, what, arg, 1);
}

/* The profile hook; logging: pt_profile_callback_logging's copy (log_args,
 * log_exceptions), which alone looks for a frame left by an exception (a return
 * without a value) and a built-in that raised, so that without those options the
 * hook is what it was. */
static PT_ALWAYS_INLINE int
pt_profile_dispatch(PyObject *handle, PyFrameObject *frame, int what, PyObject *arg,
                    int logging)
{
    pt_tracer *tracer = pt_recording_tracer(handle);
    if (PT_UNLIKELY(!tracer))
        return 0;                       /* not recording (noop, stopped): the full path agrees */
    if (logging && PT_UNLIKELY((what == PT_TRACE_RETURN && !arg) ||
                               what == PT_TRACE_C_EXCEPTION))
        return pt_profile_logging_full(handle, frame, what, arg);
    if (what == PT_TRACE_CALL || what == PT_TRACE_RETURN)
        return logging ? pt_profile_py_fast_logging(handle, frame, what, arg)
                       : pt_profile_py_fast(handle, frame, what);
    pt_thread *thread;
    if (PT_UNLIKELY(!pt_fast_thread(tracer, &thread) || tracer->code_filter ||
                    tracer->max_depth || !(tracer->flags & PT_FLAG_C_CALLS)))
        goto full;
    uint32_t key, kind;
    if (what == PT_TRACE_C_CALL) {
        /* a module function seen before (see pt_monitor_call) */
        key = Py_TYPE(arg) == &PyCFunction_Type ? pt_key_lookup(tracer, arg, PT_CALLABLE_KEY) : 0;
        if (PT_UNLIKELY(!key || tracer->key_flags[key]))
            goto full;
        thread->c_callable = arg;
        thread->c_key = key;
        kind = PT_EV_C_CALL;
    } else if ((what == PT_TRACE_C_RETURN || what == PT_TRACE_C_EXCEPTION) &&
               arg == thread->c_callable && thread->c_key) {
        key = thread->c_key;
        kind = PT_EV_C_RETURN;
    } else {
        goto full;
    }
    if (PT_UNLIKELY(!pt_fast_record(tracer, thread, kind, key)))
        goto full;
    return 0;
full:
    return logging ? pt_profile_logging_full(handle, frame, what, arg)
                   : pt_profile_callback_full(handle, frame, what, arg);
}

static int
pt_profile_callback(PyObject *handle, PyFrameObject *frame, int what, PyObject *arg)
{
    return pt_profile_dispatch(handle, frame, what, arg, 0);
}

static int
pt_profile_callback_logging(PyObject *handle, PyFrameObject *frame, int what, PyObject *arg)
{
    return pt_profile_dispatch(handle, frame, what, arg, 1);
}

/* The profile hook a tracer installs. */
static pt_tracefunc
pt_profile_func(const pt_tracer *tracer)
{
    return tracer->exception_hook || tracer->args_call ? pt_profile_callback_logging
                                                       : pt_profile_callback;
}

/* ======================================================================== */
/* Backend 2: sys.monitoring (3.12+), METH_FASTCALL callables                */
/* ======================================================================== */

/* What a callback returns: sys.monitoring.DISABLE switches the event off at this
 * code location for good (until restart_events), which makes skipped code cost
 * nothing; only "local" events (start, resume, return, yield, call) accept it. */
static inline PyObject *
pt_monitor_result(pt_tracer *tracer, int disable)
{
    if (!(disable && tracer->monitoring_disable))
        PT_MONITOR_RETURN_NONE;
    Py_INCREF(tracer->monitoring_disable);
    return tracer->monitoring_disable;
}

/* Python frame events: (code, offset, ...). `kind` is a call or a return; a
 * logged call (log_args) is told whether it is a frame's start (entry_or_raised
 * 1) or a resumption (0), a logged return the value (args[2]) and whether an
 * exception left the frame (entry_or_raised 1: args[2] is that exception). */
static PT_ALWAYS_INLINE PyObject *
pt_monitor_py_event(PyObject *handle, PyObject *const *args, Py_ssize_t nargs,
                    uint32_t kind, int may_disable, int may_tag, int entry_or_raised)
{
    pt_tracer *tracer = pt_recording_tracer(handle);
    if (!tracer || nargs < 1)
        PT_MONITOR_RETURN_NONE;
    pt_thread *thread = pt_thread_current(tracer);
    if (!thread)
        PT_MONITOR_RETURN_NONE;
    uint32_t key = pt_key_for_code(tracer, args[0]);
    if (!key)
        PT_MONITOR_RETURN_NONE;
    if (pt_skipped(tracer, key))
        return pt_monitor_result(tracer, may_disable);
    if (kind == PT_EV_PY_RETURN) {
        if (pt_depth_leave(tracer, thread, key) && pt_record(tracer, thread, kind, key) >= 0 &&
            (tracer->key_flags[key] & PT_KEYF_LOG_ARGS))
            (void)pt_log_return(tracer, thread, key, nargs >= 3 ? args[2] : NULL,
                                entry_or_raised);
    } else if (pt_depth_enter(tracer, thread, key)) {
        if (pt_record(tracer, thread, kind, key) < 0)       /* stopped */
            PT_MONITOR_RETURN_NONE;
        if (tracer->key_flags[key] & PT_KEYF_LOG_ARGS)      /* (no key is both) */
            pt_log_call(tracer, thread, key, PyEval_GetFrame(), entry_or_raised);
        else if (may_tag)
            pt_maybe_tag(tracer, thread, key,
                         tracer->key_flags[key] & PT_KEYF_TAG ? PyEval_GetFrame() : NULL);
    }
    PT_MONITOR_RETURN_NONE;
}

/* The full paths, out of line: every event the fast paths below do not take. */
static PT_NOINLINE PyObject *
pt_monitor_py_start_full(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_py_event(handle, args, nargs, PT_EV_PY_CALL, 1, 1, 1);
}

static PT_NOINLINE PyObject *
pt_monitor_py_resume_full(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_py_event(handle, args, nargs, PT_EV_PY_CALL, 1, 0, 0);
}

static PT_NOINLINE PyObject *
pt_monitor_py_return_full(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_py_event(handle, args, nargs, PT_EV_PY_RETURN, 1, 0, 0);
}

typedef PyObject *(*pt_monitor_func)(PyObject *, PyObject *const *, Py_ssize_t);

static PT_ALWAYS_INLINE PyObject *
pt_monitor_py_fast(PyObject *handle, PyObject *const *args, Py_ssize_t nargs, uint32_t kind,
                   pt_monitor_func full)
{
    pt_tracer *tracer = pt_recording_tracer(handle);
    pt_thread *thread;
    if (PT_UNLIKELY(!tracer))
        PT_MONITOR_RETURN_NONE;                 /* not recording (noop, stopped): the full path agrees */
    if (PT_UNLIKELY(nargs < 1 || !pt_fast_thread(tracer, &thread)))
        return full(handle, args, nargs);
    uint32_t key = pt_key_lookup(tracer, args[0], NULL);
    if (PT_UNLIKELY(!key || tracer->key_flags[key] || !pt_fast_record(tracer, thread, kind, key)))
        return full(handle, args, nargs);
    PT_MONITOR_RETURN_NONE;
}

/* PY_START: a call, which the watcher may tag (the new frame is current). */
static PyObject *
pt_monitor_py_start(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_py_fast(handle, args, nargs, PT_EV_PY_CALL, pt_monitor_py_start_full);
}

/* PY_RESUME: a generator or coroutine resumed is a call, as sys.setprofile. */
static PyObject *
pt_monitor_py_resume(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_py_fast(handle, args, nargs, PT_EV_PY_CALL, pt_monitor_py_resume_full);
}

/* PY_THROW: resumed by throw(), a call too; not a local event. */
static PyObject *
pt_monitor_py_throw(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_py_event(handle, args, nargs, PT_EV_PY_CALL, 0, 0, 0);
}

/* PY_RETURN, PY_YIELD: a return. */
static PyObject *
pt_monitor_py_return(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_py_fast(handle, args, nargs, PT_EV_PY_RETURN, pt_monitor_py_return_full);
}

/* PY_UNWIND: an exception leaving the frame is a return; not a local event. */
static PyObject *
pt_monitor_py_unwind(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_py_event(handle, args, nargs, PT_EV_PY_RETURN, 0, 0, 1);
}

/* RAISE, RERAISE, EXCEPTION_HANDLED (code, offset, exception): registered only
 * under log_exceptions (pytrace_cffi/_tracer.py), so that without it an exception
 * costs nothing. Exceptions in code the filters leave out, or inside calls
 * max_depth or skip_imports suppress, are left out with them. */
static PT_ALWAYS_INLINE PyObject *
pt_monitor_exception(PyObject *handle, PyObject *const *args, Py_ssize_t nargs, int event)
{
    pt_tracer *tracer = pt_recording_tracer(handle);
    if (!tracer || nargs < 3 || !tracer->exception_hook)
        PT_MONITOR_RETURN_NONE;
    pt_thread *thread = pt_thread_current(tracer);
    if (!thread || thread->suppressed)
        PT_MONITOR_RETURN_NONE;
    int64_t ticks = pt_ticks(tracer);
    uint32_t key = pt_key_for_code(tracer, args[0]);
    if (!key || pt_skipped(tracer, key))
        PT_MONITOR_RETURN_NONE;
    long offset = PyLong_AsLong(args[1]);
    if (offset == -1 && PyErr_Occurred())
        PyErr_Clear();
    pt_report_exception(tracer, thread, event, args[0], (int)offset, args[2], 0, ticks);
    PT_MONITOR_RETURN_NONE;
}

static PyObject *
pt_monitor_raise(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_exception(handle, args, nargs, PT_EXC_RAISE);
}

static PyObject *
pt_monitor_reraise(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_exception(handle, args, nargs, PT_EXC_RERAISE);
}

static PyObject *
pt_monitor_handled(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_exception(handle, args, nargs, PT_EXC_HANDLED);
}

/* A bound method under PT_FLAG_UNWRAP_METHODS. sys.setprofile on 3.12.5+ and 3.13
 * (CPython gh-122029) reports calling a bound method whose function is a
 * PyCFunction as a c_call of that function (3.12.0-3.12.4 report only its return;
 * 3.14 has CALL see the function itself). So: the function's key, as if called
 * directly. CALL then unpacks the method, holding its function and self until the
 * C_RETURN, which names those two: on a call (caller set) the thread's pair is
 * re-pointed at them, so that the return finds this key. Out of line: bound
 * Python methods pass here too. */
static PT_NOINLINE uint32_t
pt_monitor_method_key(pt_tracer *tracer, PyObject *method, pt_thread *caller)
{
    PyObject *function = PyMethod_Function(method);      /* borrowed */
    if (!function)
        return 0;
    PyTypeObject *type = Py_TYPE(function);
    if (type != &PyCFunction_Type) {
        /* a bound Python method: its function's type is cached as plain */
        for (int i = 0; i < 4; i++)
            if (tracer->plain_types[i] == type)
                return 0;
        if (!PyCFunction_Check(function))
            return 0;
    }
    if (caller) {
        caller->c_callable = function;
        caller->c_arg0 = PyMethod_Self(method);
    }
    return pt_key_for_builtin(tracer, function, 1, NULL);
}

/* The key of a built-in call as sys.setprofile reports it: a PyCFunction, or a
 * method descriptor with its self argument (3.12 passes `list.append` and the
 * list), or (see pt_monitor_method_key) a bound method of a PyCFunction. Every
 * other callable is not a C call: 0. callable is args[2] (args holds 4 items:
 * args[3] is read only when needed); caller is the thread whose (callable, arg0)
 * pair a CALL just stored, NULL for a return. */
static PT_ALWAYS_INLINE uint32_t
pt_monitor_builtin_key(pt_tracer *tracer, PyObject *callable, PyObject *const *args,
                       pt_thread *caller)
{
    PyTypeObject *type = Py_TYPE(callable);
    int is_function = 1;
    if (type == &PyMethodDescr_Type) {
        if (args[3] == tracer->monitoring_missing)
            return 0;
        is_function = 0;
    } else if (type != &PyCFunction_Type) {
        /* CALL fires for every call: answer "not a built-in" fast for Python
         * functions, bound methods and classes. */
        for (int i = 0; i < 4; i++)
            if (tracer->plain_types[i] == type)
                return 0;
        /* past the cache, so Python functions never pay for this test; laid
         * out of line, so built-in calls and returns do not either */
        if (PT_UNLIKELY(type == &PyMethod_Type) && (tracer->flags & PT_FLAG_UNWRAP_METHODS))
            return pt_monitor_method_key(tracer, callable, caller);
        if (!PyCFunction_Check(callable)) {
            if (!(PyType_GetFlags(type) & Py_TPFLAGS_HEAPTYPE))   /* static: never freed */
                tracer->plain_types[tracer->plain_types_next++ & 3] = type;
            return 0;
        }
    }
    /* one inlined copy of the key lookup, for both kinds */
    return pt_key_for_builtin(tracer, callable, is_function, args[3]);
}

/* CALL, C_RETURN, C_RAISE: (code, offset, callable, arg0). */
static PT_ALWAYS_INLINE PyObject *
pt_monitor_c_event(PyObject *handle, PyObject *const *args, Py_ssize_t nargs, int is_call)
{
    pt_tracer *tracer = pt_recording_tracer(handle);
    if (!tracer)
        PT_MONITOR_RETURN_NONE;
    if (tracer->code_filter && nargs >= 1) {
        uint32_t caller = pt_key_for_code(tracer, args[0]);
        if (!caller)
            PT_MONITOR_RETURN_NONE;
        if (pt_callees_skipped(tracer, caller))
            return pt_monitor_result(tracer, is_call);
    }
    if (nargs < 4 || !(tracer->flags & PT_FLAG_C_CALLS))
        PT_MONITOR_RETURN_NONE;
    pt_thread *thread = pt_thread_current(tracer);
    if (!thread)
        PT_MONITOR_RETURN_NONE;
    if (is_call) {
        /* Every call, built-in or not, replaces the pair: a return can then meet
         * only its own call's objects (alive) or a later call's, never objects
         * freed since and their addresses reused by what is returning now. */
        PyObject *callable = args[2];   /* read once: the stores may alias args */
        thread->c_callable = callable;
        thread->c_arg0 = args[3];
        thread->c_key = 0;
        uint32_t key = pt_monitor_builtin_key(tracer, callable, args, thread);
        if (key && (tracer->key_flags[key] & PT_KEYF_UNRECORDED))
            key = 0;            /* recorded as no built-in: its return finds key 0 */
        if (key) {              /* 0: not a built-in, or stopped (maybe gone) meanwhile */
            thread->c_key = key;
            pt_record_call(tracer, thread, PT_EV_C_CALL, key);
        }
    } else {
        uint32_t key = args[2] == thread->c_callable && args[3] == thread->c_arg0
            ? thread->c_key : pt_monitor_builtin_key(tracer, args[2], args, NULL);
        if (key && !(tracer->key_flags[key] & PT_KEYF_UNRECORDED))
            pt_record_return(tracer, thread, PT_EV_C_RETURN, key);
    }
    PT_MONITOR_RETURN_NONE;
}

static PT_NOINLINE PyObject *
pt_monitor_call_full(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_c_event(handle, args, nargs, 1);
}

static PT_NOINLINE PyObject *
pt_monitor_c_return_full(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    return pt_monitor_c_event(handle, args, nargs, 0);
}

/* CALL and C_RETURN: whether the fast path may take the event (pt_fast_thread,
 * no filters: the full path asks about the caller's code then, and no max_depth). */
static PT_ALWAYS_INLINE int
pt_fast_c_thread(pt_tracer *tracer, Py_ssize_t nargs, pt_thread **thread)
{
    return nargs >= 4 && pt_fast_thread(tracer, thread) && !tracer->code_filter &&
           !tracer->max_depth && (tracer->flags & PT_FLAG_C_CALLS);
}

/* CALL's fast path. A call of a type the cache knows is no built-in (a Python
 * function, a bound method, a class) only replaces the thread's pair, as the
 * full path does (pt_monitor_c_event says why). A built-in seen before is one
 * probe: a method descriptor keyed as pt_key_for_builtin keys it, a PyCFunction
 * by (itself, PT_CALLABLE_KEY), the key of one whose self is NULL or a module:
 * a PyCFunction's self never changes and the key holds the function, so a hit
 * is that key without asking for its self (a function call here). */
static PyObject *
pt_monitor_call(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    pt_tracer *tracer = pt_recording_tracer(handle);
    pt_thread *thread;
    if (PT_UNLIKELY(!tracer))
        PT_MONITOR_RETURN_NONE;                 /* not recording: the full path agrees */
    if (PT_UNLIKELY(!pt_fast_c_thread(tracer, nargs, &thread)))
        return pt_monitor_call_full(handle, args, nargs);
    PyObject *callable = args[2], *arg0 = args[3];
    PyTypeObject *type = Py_TYPE(callable);
    uint32_t key = 0;
    if (type == &PyCFunction_Type) {
        key = pt_key_lookup(tracer, callable, PT_CALLABLE_KEY);
    } else if (type == &PyMethodDescr_Type && arg0 != tracer->monitoring_missing) {
        PyTypeObject *self_type = Py_TYPE(arg0);
        key = pt_key_lookup(tracer, callable,
                            self_type == &PyModule_Type || self_type == &PyType_Type
                                ? (const void *)arg0 : pt_instance_owner(self_type));
    } else if (type != tracer->plain_types[0] && type != tracer->plain_types[1] &&
               type != tracer->plain_types[2] && type != tracer->plain_types[3]) {
        return pt_monitor_call_full(handle, args, nargs);
    } else {
        goto store;                     /* no built-in: key 0 */
    }
    if (PT_UNLIKELY(!key || tracer->key_flags[key]))
        return pt_monitor_call_full(handle, args, nargs);      /* not seen yet, or flagged */
store:
    thread->c_callable = callable;
    thread->c_arg0 = arg0;
    thread->c_key = key;
    if (key && PT_UNLIKELY(!pt_fast_record(tracer, thread, PT_EV_C_CALL, key)))
        return pt_monitor_call_full(handle, args, nargs);      /* it stores the pair again */
    PT_MONITOR_RETURN_NONE;
}

/* C_RETURN's fast path: the return of the built-in whose call the thread's pair
 * holds. */
static PyObject *
pt_monitor_c_return(PyObject *handle, PyObject *const *args, Py_ssize_t nargs)
{
    pt_tracer *tracer = pt_recording_tracer(handle);
    pt_thread *thread;
    if (PT_UNLIKELY(!tracer))
        PT_MONITOR_RETURN_NONE;                 /* not recording: the full path agrees */
    if (PT_UNLIKELY(!pt_fast_c_thread(tracer, nargs, &thread)))
        return pt_monitor_c_return_full(handle, args, nargs);
    uint32_t key = thread->c_key;
    if (PT_UNLIKELY(args[2] != thread->c_callable || args[3] != thread->c_arg0))
        return pt_monitor_c_return_full(handle, args, nargs);
    if (key && PT_UNLIKELY(!pt_fast_record(tracer, thread, PT_EV_C_RETURN, key)))
        return pt_monitor_c_return_full(handle, args, nargs);
    PT_MONITOR_RETURN_NONE;     /* key 0: the pair's call was no built-in (the full path agrees) */
}

static PyMethodDef pt_monitor_methods[] = {
    {"PY_START", (PyCFunction)(void (*)(void))pt_monitor_py_start, METH_FASTCALL, NULL},
    {"PY_RESUME", (PyCFunction)(void (*)(void))pt_monitor_py_resume, METH_FASTCALL, NULL},
    {"PY_THROW", (PyCFunction)(void (*)(void))pt_monitor_py_throw, METH_FASTCALL, NULL},
    {"PY_RETURN", (PyCFunction)(void (*)(void))pt_monitor_py_return, METH_FASTCALL, NULL},
    {"PY_YIELD", (PyCFunction)(void (*)(void))pt_monitor_py_return, METH_FASTCALL, NULL},
    {"PY_UNWIND", (PyCFunction)(void (*)(void))pt_monitor_py_unwind, METH_FASTCALL, NULL},
    {"CALL", (PyCFunction)(void (*)(void))pt_monitor_call, METH_FASTCALL, NULL},
    {"C_RETURN", (PyCFunction)(void (*)(void))pt_monitor_c_return, METH_FASTCALL, NULL},
    {"C_RAISE", (PyCFunction)(void (*)(void))pt_monitor_c_return_full, METH_FASTCALL, NULL},
    {"RAISE", (PyCFunction)(void (*)(void))pt_monitor_raise, METH_FASTCALL, NULL},
    {"RERAISE", (PyCFunction)(void (*)(void))pt_monitor_reraise, METH_FASTCALL, NULL},
    {"EXCEPTION_HANDLED", (PyCFunction)(void (*)(void))pt_monitor_handled, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

#define PT_MONITOR_EVENTS (sizeof pt_monitor_methods / sizeof pt_monitor_methods[0] - 1)

/* What every tracer's callbacks share, made once (with the GIL held):
 * sys.monitoring.MISSING and DISABLE, and the events' names. */
static PyObject *pt_monitoring_missing, *pt_monitoring_disable;
static PyObject *pt_monitor_names[PT_MONITOR_EVENTS];

static int
pt_monitor_shared(void)
{
    if (pt_monitoring_missing)
        return 0;
    PyObject *monitoring = PySys_GetObject("monitoring");   /* borrowed */
    PyObject *missing = monitoring ? PyObject_GetAttrString(monitoring, "MISSING") : NULL;
    PyObject *disable = monitoring ? PyObject_GetAttrString(monitoring, "DISABLE") : NULL;
    PyObject *names[PT_MONITOR_EVENTS] = {NULL};
    int ok = missing && disable;
    for (size_t i = 0; ok && i < PT_MONITOR_EVENTS; i++)
        ok = (names[i] = PyUnicode_InternFromString(pt_monitor_methods[i].ml_name)) != NULL;
    if (!ok) {
        Py_XDECREF(missing);
        Py_XDECREF(disable);
        for (size_t i = 0; i < PT_MONITOR_EVENTS; i++)
            Py_XDECREF(names[i]);
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is not available");
        return -1;
    }
    memcpy(pt_monitor_names, names, sizeof names);
    pt_monitoring_disable = disable;
    pt_monitoring_missing = missing;
    return 0;
}

int
pt_monitor_callbacks(pt_tracer *tracer, void *py_list)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *list = (PyObject *)py_list;
    if (!PyList_Check(list)) {
        pt_set_error(tracer, "pt_monitor_callbacks needs a list");
        rc = PT_ERR_ARG;
        goto done;
    }
    if (!tracer->monitoring_missing) {
        if (pt_monitor_shared() < 0) {
            pt_set_error_from_python(tracer, "sys.monitoring.MISSING");
            rc = PT_ERR_PYTHON;
            goto done;
        }
        Py_INCREF(pt_monitoring_missing);
        tracer->monitoring_missing = pt_monitoring_missing;
        Py_INCREF(pt_monitoring_disable);
        tracer->monitoring_disable = pt_monitoring_disable;
    }
    for (size_t i = 0; i < PT_MONITOR_EVENTS; i++) {
        PyObject *callback = PyCFunction_NewEx(&pt_monitor_methods[i], tracer->handle, NULL);
        PyObject *pair = callback ? PyTuple_Pack(2, pt_monitor_names[i], callback) : NULL;
        Py_XDECREF(callback);
        if (!pair || PyList_Append(list, pair) < 0) {
            Py_XDECREF(pair);
            pt_set_error_from_python(tracer, "creating monitoring callbacks");
            rc = PT_ERR_PYTHON;
            goto done;
        }
        Py_DECREF(pair);
    }
done:
    PyGILState_Release(gil);
    return rc;
}

/* ======================================================================== */
/* Seeding frames that were already running                                 */
/* ======================================================================== */

/* Records the frames from `top` (a new reference, consumed) outwards as calls at
 * time ts, outermost first, skipping the innermost `skip` frames and keeping at
 * most PT_SEED_DEPTH of the rest. Skipped frames are recorded nowhere. When
 * their returns will be seen (skipped_return: pt_start's caller, whose frames
 * return while tracing, unlike an attaching hook's, which runs untraced), they
 * still enter the max_depth count after the seeded ones, as seeded frames would:
 * their returns leave it, and must find it as it would have been. */
static void
pt_seed_frames(pt_tracer *tracer, pt_thread *thread, PyFrameObject *top, int skip,
               int skipped_return, int64_t ts)
{
    PyFrameObject *frames[PT_SEED_DEPTH];
    uint32_t skipped_keys[PT_SEED_DEPTH];
    int depth = 0;
    int n_skipped = 0;
    PyFrameObject *frame = top;
    if (skip > PT_SEED_DEPTH)   /* the rest are seeded: entered and left alike */
        skip = PT_SEED_DEPTH;
    while (frame && n_skipped < skip) {
        if (skipped_return) {
            PyObject *code = (PyObject *)PyFrame_GetCode(frame);
            skipped_keys[n_skipped] = pt_key_for_code(tracer, code);
            Py_DECREF(code);
        }
        n_skipped++;
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    while (frame && depth < PT_SEED_DEPTH) {
        frames[depth++] = frame;
        frame = PyFrame_GetBack(frame);
    }
    Py_XDECREF(frame);
    for (int i = depth - 1; i >= 0; i--) {
        PyObject *code = (PyObject *)PyFrame_GetCode(frames[i]);
        uint32_t key = pt_key_for_code(tracer, code);
        if (!pt_skipped(tracer, key) && pt_depth_enter(tracer, thread, key))
            pt_record_at(tracer, thread, PT_EV_PY_SEED, key, ts);
        Py_DECREF(code);
        Py_DECREF(frames[i]);
    }
    if (skipped_return)
        for (int i = n_skipped - 1; i >= 0; i--)
            if (!pt_skipped(tracer, skipped_keys[i]))
                (void)pt_depth_enter(tracer, thread, skipped_keys[i]);
}

/* Looks up the Python thread ident owning `frame` in sys._current_frames(), a
 * dict {ident: top frame}; 0 when not found. */
static uint64_t
pt_ident_for_frame(PyObject *current_frames, PyFrameObject *frame)
{
    if (!current_frames || !frame)
        return 0;
    PyObject *ident, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(current_frames, &pos, &ident, &value))
        if (value == (PyObject *)frame)
            return (uint64_t)PyLong_AsUnsignedLongLong(ident);
    return 0;
}

/* ======================================================================== */
/* Start, attach, stop                                                      */
/* ======================================================================== */

/* ------------------------------------------------------------------------ */
/* 3.9-3.11: noticing another profiler that replaced our hook on a thread    */
/* ------------------------------------------------------------------------ */

/* Sets another thread's profile function (3.9-3.11), raising the audit event in
 * this thread (see _PyEval_SetProfile in pt_cpython.h). An audit hook's refusal is
 * reported as unraisable, as PyEval_SetProfile reports it. */
static void
pt_set_profile_of(PyThreadState *ts, pt_tracefunc func, PyObject *obj)
{
    if (_PyEval_SetProfile) {
        if (_PyEval_SetProfile(ts, func, obj) < 0)
            PyErr_WriteUnraisable(NULL);
        return;
    }
    PyThreadState *saved = PyThreadState_Swap(ts);
    PyEval_SetProfile(func, obj);
    PyThreadState_Swap(saved);
}

/* Thread states whose profile function a walk of the interpreter's threads will
 * set once it is over. The audit event each setting raises may run Python code,
 * which lets other threads run, start and end: the walk itself must run none (an
 * ended thread's state is freed, and the walk would follow it), and each state
 * is looked up again, by address and id, just before its setting. */
typedef struct {
    PyThreadState **states;
    uint64_t *ids;
    const void **tops;      /* start(): each thread's top frame when seeded (identity) */
    int n, cap;
} pt_profile_plan;

/* Notes ts for pt_profile_plan_apply; without memory, sets it at once. */
static void
pt_profile_plan_add(pt_profile_plan *plan, PyThreadState *ts, const void *top,
                    pt_tracefunc func, PyObject *obj)
{
    if (plan->n == plan->cap) {
        int cap = plan->cap ? 2 * plan->cap : 16;
        PyThreadState **states = realloc(plan->states, cap * sizeof *states);
        if (states)
            plan->states = states;
        uint64_t *ids = realloc(plan->ids, cap * sizeof *ids);
        if (ids)
            plan->ids = ids;
        const void **tops = realloc(plan->tops, cap * sizeof *tops);
        if (tops)
            plan->tops = tops;
        if (!states || !ids || !tops) {
            pt_set_profile_of(ts, func, obj);
            return;
        }
        plan->cap = cap;
    }
    plan->states[plan->n] = ts;
    plan->tops[plan->n] = top;
    plan->ids[plan->n++] = PyThreadState_GetID(ts);
}

/* Sets the profile function of each noted thread that still exists, and frees
 * the plan. */
static void
pt_profile_plan_apply(pt_profile_plan *plan, PyInterpreterState *interp,
                      pt_tracefunc func, PyObject *obj, pt_tracer *starting)
{
    for (int i = 0; i < plan->n; i++) {
        PyThreadState *ts = PyInterpreterState_ThreadHead(interp);
        while (ts && !(ts == plan->states[i] && PyThreadState_GetID(ts) == plan->ids[i]))
            ts = PyThreadState_Next(ts);
        int ran = !ts;      /* ended before its hook went live */
        if (ts) {
            pt_set_profile_of(ts, func, obj);
            if (starting) {
                /* ran meanwhile, out of its seeded frames (its top frame is
                 * another one): their returns were not recorded */
                PyFrameObject *top = PyThreadState_GetFrame(ts);
                ran = (const void *)top != plan->tops[i];
                Py_XDECREF(top);
            }
        }
        if (ran && starting) {
            /* its seeded frames will never return: no hook lost (pt_thread_ends_open) */
            pt_thread *thread = pt_thread_find(starting, plan->ids[i]);
            if (thread)
                thread->ended_unhooked = 1;
        }
    }
    free(plan->states);
    free(plan->ids);
    free(plan->tops);
    plan->states = NULL;
    plan->ids = NULL;
    plan->tops = NULL;
    plan->n = plan->cap = 0;
}

/* Returns a new reference to sys.getprofile when it is the sys module's own
 * built-in (METH_NOARGS), else NULL (no exception set). Only that function may
 * run under another thread's state: it reads the current thread state's profile
 * object, runs no Python code, cannot fail and never releases the GIL. There is
 * no public getter for another thread's profile function on 3.9-3.11, hence
 * the swap. A replacement (a mock, a Python function) could do anything there,
 * so hooks are then not checked. */
static PyObject *
pt_builtin_getprofile(void)
{
    /* the one found genuine before: once per process, not per start */
    static PyObject *genuine_seen;
    PyObject *getprofile = PySys_GetObject("getprofile");    /* borrowed */
    if (getprofile && getprofile == genuine_seen) {
        Py_INCREF(getprofile);
        return getprofile;
    }
    PyObject *sys_module = PyImport_AddModule("sys");        /* borrowed */
    PyObject *name = getprofile && PyCFunction_Check(getprofile)
        ? PyObject_GetAttrString(getprofile, "__name__") : NULL;
    int genuine = name && PyUnicode_Check(name) && sys_module &&
                  PyCFunction_GetSelf(getprofile) == sys_module &&
                  PyCFunction_GetFlags(getprofile) == METH_NOARGS &&
                  PyUnicode_CompareWithASCIIString(name, "getprofile") == 0;
    Py_XDECREF(name);
    PyErr_Clear();
    if (!genuine)
        return NULL;
    Py_INCREF(getprofile);
    PyObject *old = genuine_seen;
    genuine_seen = getprofile;
    Py_INCREF(getprofile);
    Py_XDECREF(old);
    return getprofile;
}

/* Whether thread state ts still has our profile hook: 1 yes, -1 unknown, 0 no,
 * and then *found is a new reference to the profile object in its place (None
 * when there is no hook). The GIL is held; ts's pending exception is kept. */
static int
pt_hook_is_ours(pt_tracer *tracer, PyThreadState *ts, PyObject **found)
{
    /* Its C function is called directly, as a METH_NOARGS call would: no
     * recursion counting on ts, no call event for any profiler. */
    PyCFunction getprofile = PyCFunction_GetFunction(tracer->getprofile);
    PyObject *sys_module = PyCFunction_GetSelf(tracer->getprofile);
    PyObject *type, *value, *tb;
    PyThreadState *saved = PyThreadState_Swap(ts);
    PyErr_Fetch(&type, &value, &tb);
    PyObject *current = getprofile(sys_module, NULL);
    if (!current)
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
    PyThreadState_Swap(saved);
    if (!current)
        return -1;
    /* ours, or threading's hook not yet run there (the thread attaches at its
     * first event: see pt_thread_hook) */
    if (current == tracer->handle || (current == pt_thread_hook_object && current)) {
        Py_DECREF(current);
        return 1;
    }
    *found = current;
    return 0;
}

/* Marks the thread as having lost the hook and appends (index, ticks of its
 * last event, ticks now, found) to tracer->hooks_lost: no event of it was
 * recorded after the loss, so the loss came after that last event. Out of
 * memory here becomes the sticky error stop() raises, not a silent omission. */
static void
pt_note_hook_lost(pt_tracer *tracer, pt_thread *thread, PyObject *found)
{
    thread->hook_lost = 1;
    if (!tracer->hooks_lost)
        tracer->hooks_lost = PyList_New(0);
    PyObject *item = tracer->hooks_lost
        ? Py_BuildValue("(iLLO)", thread->index, (long long)thread->last_ticks,
                        (long long)pt_ticks(tracer), found)
        : NULL;
    if ((!item || PyList_Append(tracer->hooks_lost, item) < 0) && !tracer->hot_error) {
        tracer->hot_error = PT_ERR_NOMEM;
        pt_set_error(tracer, "out of memory noting a lost hook");
    }
    PyErr_Clear();
    Py_XDECREF(item);
}

/* 1 when ts is one of our threads and its hook is no longer ours. */
static int
pt_check_thread_hook(pt_tracer *tracer, PyThreadState *ts)
{
    PyObject *found = NULL;
    if (pt_hook_is_ours(tracer, ts, &found) != 0)
        return 0;
    /* Only threads that lack the hook are looked up: the thread list is walked
     * once per such thread, not once per live thread. */
    pt_thread *thread = pt_thread_find(tracer, PyThreadState_GetID(ts));
    if (thread && !thread->hook_lost)
        pt_note_hook_lost(tracer, thread, found);
    Py_DECREF(found);
    return thread != NULL;
}

/* pt_check_hooks with the GIL held: runs no Python code, so nothing else runs
 * meanwhile. */
static int
pt_check_hooks_held(pt_tracer *tracer, int current_only)
{
    int lost = 0;
    if (tracer->backend == PT_BACKEND_PROFILE && tracer->state == PT_STATE_RUNNING &&
        tracer->getprofile) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyThreadState *self_tstate = PyThreadState_Get();
        if (current_only) {
            lost = pt_check_thread_hook(tracer, self_tstate);
        } else {
            PyInterpreterState *interp = PyThreadState_GetInterpreter(self_tstate);
            for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
                 ts = PyThreadState_Next(ts))
                lost += pt_check_thread_hook(tracer, ts);
        }
        PyErr_Restore(type, value, tb);
    }
    return lost;
}

int
pt_check_hooks(pt_tracer *tracer, int current_only)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    int lost = pt_check_hooks_held(tracer, current_only);
    PyGILState_Release(gil);
    return lost;
}

int
pt_hooks_lost(pt_tracer *tracer, void *py_list)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *list = (PyObject *)py_list;
    if (!PyList_Check(list)) {
        pt_set_error(tracer, "pt_hooks_lost needs a list");
        rc = PT_ERR_ARG;
    } else if (tracer->hooks_lost) {
        Py_ssize_t n = PyList_Size(tracer->hooks_lost);
        for (Py_ssize_t i = 0; i < n && rc == PT_OK; i++)
            if (PyList_Append(list, PyList_GetItem(tracer->hooks_lost, i)) < 0) {
                pt_set_error_from_python(tracer, "listing lost hooks");
                rc = PT_ERR_PYTHON;
            }
    }
    PyGILState_Release(gil);
    return rc;
}

int
pt_thread_at_stop(pt_tracer *tracer, int index, int64_t *last_ticks)
{
    pt_thread *thread = pt_thread_for_reading(tracer, index);
    if (!thread)
        return tracer->state != PT_STATE_STOPPED ? PT_ERR_STATE : PT_ERR_ARG;
    *last_ticks = thread->last_ticks;
    return thread->alive_at_stop;
}

int64_t
pt_last_event_ticks(pt_tracer *tracer)
{
    PyGILState_STATE gil = PyGILState_Ensure();     /* the hooks write last_ticks */
    int64_t last = tracer->start_ticks;
    for (pt_thread *t = tracer->threads; t; t = t->next)
        if (t->last_ticks > last)
            last = t->last_ticks;
    PyGILState_Release(gil);
    return last;
}

static int
pt_enable_monitoring(pt_tracer *tracer, int tool_id, long long event_mask)
{
    PyObject *monitoring = PySys_GetObject("monitoring");   /* borrowed */
    PyObject *result = monitoring
        ? PyObject_CallMethod(monitoring, "set_events", "iL", tool_id, event_mask)
        : NULL;
    if (!result) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "sys.monitoring is not available");
        pt_set_error_from_python(tracer, "sys.monitoring.set_events");
        return PT_ERR_PYTHON;
    }
    Py_DECREF(result);
    return PT_OK;
}

int
pt_start(pt_tracer *tracer, int tool_id, long long event_mask, int own_frames,
         void *py_thread_objects)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    pt_check_cfunction_layout();
    if (tracer->state != PT_STATE_NEW) {
        pt_set_error(tracer, "this tracer was already started");
        rc = PT_ERR_STATE;
        goto done;
    }
    if (py_thread_objects && PyDict_Check((PyObject *)py_thread_objects)) {
        PyObject *old = tracer->thread_objects;
        Py_INCREF((PyObject *)py_thread_objects);
        tracer->thread_objects = (PyObject *)py_thread_objects;
        Py_XDECREF(old);
    }
    /* From here to the end the GIL is not released (unless a Python audit hook,
     * run by the hooks' settings at the end of the walk, lets it go): no thread
     * moves between the snapshot of its frames and the moment its hook is live. */
    PyThreadState *self_tstate = PyThreadState_Get();
    PyInterpreterState *interp = PyThreadState_GetInterpreter(self_tstate);
    /* Other threads' idents come from their frames in sys._current_frames(): with
     * this thread alone, the dict is not needed. */
    PyObject *current_frames = NULL;
    PyThreadState *head = PyInterpreterState_ThreadHead(interp);
    PyObject *getter = head && (head != self_tstate || PyThreadState_Next(head))
        ? PySys_GetObject("_current_frames") : NULL;    /* borrowed */
    if (getter)
        current_frames = PyObject_CallObject(getter, NULL);
    if (!current_frames || !PyDict_Check(current_frames)) {
        Py_CLEAR(current_frames);
        PyErr_Clear();
    }

    if (tracer->backend == PT_BACKEND_PROFILE && !tracer->getprofile)
        tracer->getprofile = pt_builtin_getprofile();
    pt_defer_questions(tracer);
    pt_take_anchor(tracer->anchor[0]);
    /* The tick reading is the midpoint of two around the nanosecond one, so that
     * start_ns is the moment of start_ticks (a reading after it would put every
     * mapped time late by one clock read: past the stop anchor's reading). */
    int64_t before = pt_ticks(tracer);
    tracer->start_ns = pt_clock();
    int64_t now = before + (pt_ticks(tracer) - before) / 2;
    tracer->start_ticks = now;
    tracer->state = PT_STATE_RUNNING;
    pt_handle_sync(tracer);
    pt_profile_plan hooks = {0};
    for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
         ts = PyThreadState_Next(ts)) {
        if (pt_is_own_tstate(PyThreadState_GetID(ts)))
            continue;                           /* ours: never traced (pt_own.c) */
        PyFrameObject *top = PyThreadState_GetFrame(ts);   /* new reference */
        const void *top_seen = top;                         /* (identity only) */
        uint64_t ident = ts == self_tstate ? PyThread_get_thread_ident()
                                           : pt_ident_for_frame(current_frames, top);
        pt_thread *thread = pt_thread_new(tracer, PyThreadState_GetID(ts), ident,
                                          ts == self_tstate ? PyThread_get_thread_native_id() : 0,
                                          now);
        if (!thread) {
            Py_XDECREF(top);
            pt_set_error(tracer, "out of memory for a thread buffer");
            rc = PT_ERR_NOMEM;
            break;
        }
        if (ts == self_tstate)
            tracer->start_thread = thread->index;
        if (!(tracer->flags & PT_FLAG_NOOP))
            pt_seed_frames(tracer, thread, top, ts == self_tstate ? own_frames : 0, 1, now);
        else
            Py_XDECREF(top);
        if (tracer->backend == PT_BACKEND_PROFILE)
            pt_profile_plan_add(&hooks, ts, top_seen, pt_profile_func(tracer), tracer->handle);
    }
    Py_XDECREF(current_frames);
    /* The hooks go live once the walk is over (see pt_profile_plan): with Python
     * audit hooks, other threads may run between two settings. */
    pt_profile_plan_apply(&hooks, interp, pt_profile_func(tracer), tracer->handle, tracer);
    /* Running from here: the questions below run Python code, which lets other
     * threads run, and a thread that starts then attaches through the thread
     * hook (which finds no tracer before this, and would unhook itself). */
    if (rc == PT_OK)
        pt_active_tracer = tracer;
    /* The thread walk is over: the watcher and filters may now see the code
     * objects it met (before any event, as the hooks are not live yet on 3.12+;
     * on 3.9-3.11 their first events wait for the GIL this thread holds). */
    pt_ask_deferred_questions(tracer);
    if (rc == PT_OK && tracer->backend == PT_BACKEND_MONITOR)
        rc = pt_enable_monitoring(tracer, tool_id, event_mask);
    if (rc != PT_OK) {
        if (pt_active_tracer == tracer)
            pt_active_tracer = NULL;
        tracer->state = PT_STATE_STOPPED;
        pt_handle_sync(tracer);
        tracer->stop_ticks = pt_ticks(tracer);
        tracer->stop_ns = pt_clock();
        pt_take_anchor(tracer->anchor[1]);
        if (tracer->backend == PT_BACKEND_PROFILE) {
            pt_profile_plan unhooks = {0};
            for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
                 ts = PyThreadState_Next(ts))
                pt_profile_plan_add(&unhooks, ts, NULL, NULL, NULL);
            pt_profile_plan_apply(&unhooks, interp, NULL, NULL, NULL);
        }
    }
done:
    PyGILState_Release(gil);
    return rc;
}

/* Attaches the calling thread to a running tracer, with the GIL held. The hook
 * goes in first: the watcher's questions about the frames seeded run Python code,
 * which lets other threads run (one may check our hooks, or stop the tracer). */
static void
pt_attach_held(pt_tracer *tracer, int skip_frames)
{
    if (pt_is_own_tstate(PyThreadState_GetID(PyThreadState_Get())))
        return;                         /* one of pytrace_cffi's own (pt_own.c) */
    if (tracer->backend == PT_BACKEND_PROFILE)
        PyEval_SetProfile(pt_profile_func(tracer), tracer->handle);
    PyThreadState *tstate = PyThreadState_Get();
    uint64_t tstate_id = PyThreadState_GetID(tstate);
    if (!pt_thread_find(tracer, tstate_id)) {
        int64_t now = pt_ticks(tracer);
        pt_thread *thread = pt_thread_new(tracer, tstate_id, PyThread_get_thread_ident(),
                                          PyThread_get_thread_native_id(), now);
        if (thread && !(tracer->flags & PT_FLAG_NOOP)) {
            /* as in pt_start: the questions come after the seeds are written */
            pt_defer_questions(tracer);
            pt_seed_frames(tracer, thread, PyThreadState_GetFrame(tstate), skip_frames, 0, now);
            pt_ask_deferred_questions(tracer);
        }
    }
}

int
pt_attach_current_thread(pt_tracer *tracer, int skip_frames)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    if (tracer->state == PT_STATE_RUNNING)
        pt_attach_held(tracer, skip_frames);
    PyGILState_Release(gil);
    return PT_OK;
}

/* ------------------------------------------------------------------------ */
/* threading's hook: a thread born while tracing                             */
/* ------------------------------------------------------------------------ */

static PyObject *pt_active_threads;     /* threading._active: ident -> Thread */

/* Notes the calling thread's threading.Thread (the names of threads that end
 * before stop): threading registers it in _active before it runs the hook. A
 * dict lookup by int, so no Python code runs (current_thread() would, and let
 * other threads run in the middle of attaching). */
static void
pt_note_thread_object(pt_tracer *tracer)
{
    if (!tracer->thread_objects || !pt_active_threads || !PyDict_Check(pt_active_threads))
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *ident = PyLong_FromUnsignedLong(PyThread_get_thread_ident());
    PyObject *thread = ident ? PyDict_GetItem(pt_active_threads, ident) : NULL;  /* borrowed */
    PyObject *key = thread ? PyLong_FromUnsignedLongLong(
                                 PyThreadState_GetID(PyThreadState_Get())) : NULL;
    if (key && PyDict_SetItem(tracer->thread_objects, key, thread) < 0)
        PyErr_Clear();
    Py_XDECREF(key);
    Py_XDECREF(ident);
    PyErr_Restore(type, value, tb);
}

/* threading.setprofile's hook (METH_FASTCALL, called as frame, event, arg): its
 * first event in a new thread. No Python frame of its own, so nothing to skip
 * when seeding. */
static PyObject *
pt_thread_hook_call(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self; (void)args; (void)nargs;
    pt_tracer *tracer = pt_active_tracer;
    PyEval_SetProfile(NULL, NULL);      /* runs once; 3.12+ then leave it off */
    if (tracer && tracer->state == PT_STATE_RUNNING) {
        /* the attach asks the watcher and filters about the frames it seeds */
        pt_python_enter(tracer);
        pt_note_thread_object(tracer);
        pt_attach_held(tracer, 0);
        /* A new thread is a cheap moment to look (3.9-3.11: stop() cannot see
         * a thread that lost its hook and ended before it). The tracer may have
         * stopped while the attach asked its questions. */
        if (pt_active_tracer == tracer && tracer->backend == PT_BACKEND_PROFILE)
            (void)pt_check_hooks_held(tracer, 0);
        (void)pt_python_leave(tracer);
    }
    PT_RETURN_NONE;             /* (runs on 3.9-3.11 too) */
}

static PyMethodDef pt_thread_hook_def = {
    "pytrace_cffi_thread_hook", (PyCFunction)(void (*)(void))pt_thread_hook_call,
    METH_FASTCALL, "pytrace_cffi: attaches a thread born while tracing (internal)",
};

int
pt_thread_hook(void *py_list)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *list = (PyObject *)py_list;
    if (!pt_active_threads) {
        PyObject *threading = PyImport_ImportModule("threading");
        pt_active_threads = threading ? PyObject_GetAttrString(threading, "_active") : NULL;
        Py_XDECREF(threading);
        PyErr_Clear();          /* without it, threads keep the names seen at stop */
    }
    if (!pt_thread_hook_object)
        pt_thread_hook_object = PyCFunction_NewEx(&pt_thread_hook_def, NULL, NULL);
    if (!PyList_Check(list) || !pt_thread_hook_object ||
        PyList_Append(list, pt_thread_hook_object) < 0) {
        PyErr_Clear();
        rc = PT_ERR_PYTHON;
    }
    PyGILState_Release(gil);
    return rc;
}

int
pt_stop(pt_tracer *tracer)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    if (tracer->state != PT_STATE_RUNNING) {
        pt_set_error(tracer, "this tracer is not running");
        rc = PT_ERR_STATE;
        goto done;
    }
    tracer->stop_ticks = pt_ticks(tracer);
    tracer->stop_ns = pt_clock();
    pt_take_anchor(tracer->anchor[1]);
    tracer->state = PT_STATE_STOPPED;
    pt_handle_sync(tracer);
    if (pt_active_tracer == tracer)
        pt_active_tracer = NULL;
    if (tracer->backend == PT_BACKEND_PROFILE) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        PyThreadState *self_tstate = PyThreadState_Get();
        PyInterpreterState *interp = PyThreadState_GetInterpreter(self_tstate);
        pt_profile_plan unhooks = {0};
        for (PyThreadState *ts = PyInterpreterState_ThreadHead(interp); ts;
             ts = PyThreadState_Next(ts)) {
            pt_thread *thread = pt_thread_find(tracer, PyThreadState_GetID(ts));
            if (!thread)
                continue;
            thread->alive_at_stop = 1;
            /* Another profiler's hook found in place of ours stays: removing
             * it would break that profiler. When sys.getprofile cannot tell
             * (-1), the hook is removed as it always was. */
            PyObject *found = NULL;
            if (tracer->getprofile && pt_hook_is_ours(tracer, ts, &found) == 0) {
                if (!thread->hook_lost)
                    pt_note_hook_lost(tracer, thread, found);
                Py_DECREF(found);
                continue;
            }
            pt_profile_plan_add(&unhooks, ts, NULL, NULL, NULL);
        }
        pt_profile_plan_apply(&unhooks, interp, NULL, NULL, NULL);
        PyErr_Restore(type, value, tb);
    }
done:
    PyGILState_Release(gil);
    return rc;
}

/* Task lanes (log_async, pt_runtime.c): here, after the hooks, so that the hot
 * code keeps its place (and alignment) in the object file. */
pt_thread *
pt_thread_enter_lane(pt_tracer *tracer, pt_thread *lane)
{
    pt_thread *own = pt_thread_current(tracer);
    if (own)
        pt_tls_thread = lane;
    return own;
}

void
pt_thread_leave_lane(uint64_t generation, pt_thread *lane, pt_thread *own)
{
    /* the lane only if it is still what this thread records into: the tracer
     * may have stopped (and a new one started) meanwhile */
    if (pt_tls_generation == generation && pt_tls_thread == lane)
        pt_tls_thread = own;
}


/* pt_cpython.h's pt_cfunction_def: is m_ml where we read it? builtins.len's
 * definition must name "len" and hold its C function. Once, with the GIL. */
int pt_cfunction_def_ok = 0;

void
pt_check_cfunction_layout(void)
{
    static int checked = 0;
    if (checked)
        return;
    checked = 1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *builtins = PyImport_ImportModule("builtins");
    PyObject *len = builtins ? PyObject_GetAttrString(builtins, "len") : NULL;
    if (len && PyCFunction_Check(len)) {
        const PyMethodDef *def = pt_cfunction_m_ml(len);
        pt_cfunction_def_ok = def && def->ml_name && strcmp(def->ml_name, "len") == 0 &&
                              def->ml_meth == PyCFunction_GetFunction(len);
    }
    Py_XDECREF(len);
    Py_XDECREF(builtins);
    PyErr_Restore(type, value, tb);
}

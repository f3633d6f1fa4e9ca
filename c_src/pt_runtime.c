/* pt_runtime.c - what the interpreter does besides calls, recorded on request:
 * garbage collections (a gc.callbacks callable), counters sampled by a thread of
 * ours (pytrace_cffi/_memory.py), and lanes for asyncio tasks (_tasks.py).
 *
 * The gc callback is a C function: the collector calls it from C, so no hook sees
 * it and no frame of ours shows in the trace. Each collection becomes a region
 * named after its generation, begun at the "start" phase and ended at "stop", its
 * args (generation, collected, uncollectable) attached at stop. Launches
 * (subprocess.Popen, os.system) become instants, seen by a C audit hook.
 */
#include "pt_record_internal.h"

#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* ======================================================================== */
/* Garbage collections                                                      */
/* ======================================================================== */

static PyObject *pt_gc_names[3];        /* "gc (generation N)", made once */
static PyObject *pt_gc_phase_start;     /* "start" */

/* The collection whose region is open: one at a time per process (the
 * collector never runs inside itself), under the GIL. generation 0: none. */
static struct {
    uint64_t generation;                /* the tracer's */
    pt_thread *thread;
    uint32_t key;
    Py_ssize_t args_index;              /* its slot in annotation_args, or -1 */
    pt_event *args_event;               /* the event naming that slot */
} pt_gc_open;

/* tracer->gc_args holds, under a generation, the args dict of a collection of
 * that generation not ended yet; under (generation, collected, uncollectable),
 * the index in annotation_args of a collection's args: each distinct one is
 * stored once (a program makes millions of young collections, most alike). */
static PyObject *
pt_gc_cached(pt_tracer *tracer, PyObject *identity)
{
    if (!identity || (!tracer->gc_args && !(tracer->gc_args = PyDict_New())))
        return NULL;
    return PyDict_GetItem(tracer->gc_args, identity);          /* borrowed */
}

/* Stores value under identity; returns value (borrowed: the cache holds it). */
static PyObject *
pt_gc_cache(pt_tracer *tracer, PyObject *identity, PyObject *value)
{
    int rc = value ? PyDict_SetItem(tracer->gc_args, identity, value) : -1;
    Py_XDECREF(value);
    return rc < 0 ? NULL : value;
}

/* The shared index in annotation_args of a collection's final args, -1 on failure. */
static Py_ssize_t
pt_gc_final_index(pt_tracer *tracer, PyObject *generation, PyObject *collected,
                  PyObject *uncollectable)
{
    PyObject *identity = PyTuple_Pack(3, generation, collected, uncollectable);
    PyObject *found = pt_gc_cached(tracer, identity);
    if (!found && identity && tracer->gc_args) {
        Py_ssize_t index = PyList_Size(tracer->annotation_args);
        PyObject *args = Py_BuildValue("{sOsOsO}", "generation", generation,
                                       "collected", collected, "uncollectable", uncollectable);
        if (args && pt_aux_fits(tracer, PT_AUX_ARGS, index) &&
            PyList_Append(tracer->annotation_args, args) == 0)
            found = pt_gc_cache(tracer, identity, PyLong_FromSsize_t(index));
        Py_XDECREF(args);
    }
    Py_XDECREF(identity);
    return found ? PyLong_AsSsize_t(found) : -1;
}

/* A collection begins: its region opens. Its args must follow the region's own
 * event, before any callee such as a finalizer (pt_walk.c), but what it collected
 * is known at its end: a slot of annotation_args is taken now, saying the
 * generation, and filled at the end (pt_gc_end). */
static void
pt_gc_begin(pt_tracer *tracer, PyObject *info)
{
    /* Not while a hook of ours runs Python code (the spill hook, a filter's
     * question): a collection there would append to a buffer mid-append. */
    if (tracer->in_python || tracer->spill_hook_busy)
        return;
    pt_thread *thread = pt_thread_of_caller(tracer);
    PyObject *generation = PyDict_GetItemString(info, "generation");      /* borrowed */
    long number = generation ? PyLong_AsLong(generation) : -1;
    if (!thread || number < 0 || number > 2)
        return;
    uint32_t key = pt_key_for_annotation(tracer, pt_gc_names[number]);
    if (!key || pt_record(tracer, thread, PT_EV_PY_CALL, key) < 0)
        return;
    pt_gc_open.generation = tracer->generation;
    pt_gc_open.thread = thread;
    pt_gc_open.key = key;
    pt_gc_open.args_index = -1;
    if (!tracer->annotation_args && !(tracer->annotation_args = PyList_New(0)))
        return;
    PyObject *args = pt_gc_cached(tracer, generation);
    if (!args && tracer->gc_args)
        args = pt_gc_cache(tracer, generation, Py_BuildValue("{sO}", "generation", generation));
    Py_ssize_t index = PyList_Size(tracer->annotation_args);
    if (args && pt_aux_fits(tracer, PT_AUX_ARGS, index) &&
        PyList_Append(tracer->annotation_args, args) == 0 &&
        pt_append(tracer, thread, 0, pt_aux_word(PT_AUX_ARGS, (uint32_t)index)) > 0) {
        pt_gc_open.args_index = index;
        pt_gc_open.args_event = thread->cursor - 1;
    }
}

/* The collection ends: its args say what it collected, and its region closes.
 * When it ran no Python code (no event since its args: the usual young
 * collection), its slot goes back and its args event names the shared args, so
 * that annotation_args does not grow with collections (a flight recorder runs
 * for days); otherwise the slot keeps them. */
static void
pt_gc_end(pt_tracer *tracer, PyObject *info)
{
    uint64_t opened_in = pt_gc_open.generation;
    pt_gc_open.generation = 0;
    pt_thread *thread = pt_gc_open.thread;
    if (tracer->generation != opened_in || pt_thread_of_caller(tracer) != thread)
        return;                 /* stopped meanwhile: the region closes at stop */
    PyObject *generation = PyDict_GetItemString(info, "generation");     /* borrowed */
    PyObject *collected = PyDict_GetItemString(info, "collected");
    PyObject *uncollectable = PyDict_GetItemString(info, "uncollectable");
    Py_ssize_t slot = pt_gc_open.args_index;
    if (slot >= 0 && generation && collected && uncollectable) {
        int alone = thread->cursor == pt_gc_open.args_event + 1 &&
                    slot == PyList_Size(tracer->annotation_args) - 1;
        if (alone)
            PyList_SetSlice(tracer->annotation_args, slot, slot + 1, NULL);
        Py_ssize_t index = pt_gc_final_index(tracer, generation, collected, uncollectable);
        if (alone) {
            /* no index: the region keeps no args (its slot went back), and
             * its args event becomes a TIME aux event of no time (its delta is 0) */
            pt_gc_open.args_event->key_kind = index >= 0
                ? pt_aux_word(PT_AUX_ARGS, (uint32_t)index) : pt_aux_word(PT_AUX_TIME, 0);
        } else if (index >= 0) {
            PyObject *args = PyList_GetItem(tracer->annotation_args, index);   /* borrowed */
            Py_INCREF(args);
            PyList_SetItem(tracer->annotation_args, slot, args);       /* steals */
        }
    }
    pt_record(tracer, thread, PT_EV_PY_RETURN, pt_gc_open.key);
}

static PyObject *
pt_gc_callback(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyDict_Check(args[1]))
        PT_RETURN_NONE;
    pt_tracer *tracer = pt_annotating_tracer();
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);     /* nothing here raises to the collector */
    if (PyUnicode_Compare(args[0], pt_gc_phase_start) == 0) {
        pt_gc_open.generation = 0;
        if (tracer)
            pt_gc_begin(tracer, args[1]);
    } else if (pt_gc_open.generation) {
        if (tracer)
            pt_gc_end(tracer, args[1]);
        pt_gc_open.generation = 0;
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    PT_RETURN_NONE;
}

/* ======================================================================== */
/* Counters sampled by a thread of ours                                     */
/* ======================================================================== */

/* counter_sample(name, value): a counter sample {name: value} now, as
 * counter(name, value) records it, on the lane of the thread that started
 * tracing: for a thread of ours, which no trace records (pt_own.c) and so has
 * no lane of its own (counter() drops what it records). True when recorded,
 * False when not tracing (yet). A Python call keeps the GIL, where a cffi call
 * lets it go and waits for it again (a switch interval, 5 ms, while the
 * program runs), once a counter. */
static PyObject *
pt_counter_sample(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "counter_sample(name: str, value: int)");
        return NULL;
    }
    pt_tracer *tracer = pt_annotating_tracer();
    if (!tracer || tracer->start_thread < 0)
        return PyBool_FromLong(0);
    int64_t ticks = pt_ticks(tracer);
    PyObject *payload = PyDict_New();
    if (!payload || PyDict_SetItem(payload, args[0], args[1]) < 0) {
        Py_XDECREF(payload);
        return NULL;
    }
    pt_add_mark_at(tracer, "C", ticks, tracer->start_thread, args[0], payload);
    Py_DECREF(payload);
    return PyBool_FromLong(1);
}

/* resident_bytes(): the process's resident set from /proc/self/statm, in bytes,
 * or None where there is none (not Linux). Read with the GIL held: a few
 * microseconds, where letting it go would wait for it again. */
static PyObject *
pt_resident_bytes(PyObject *module, PyObject *unused)
{
    char text[128];
    ssize_t n = -1;
    int fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        n = read(fd, text, sizeof text - 1);
        close(fd);
    }
    unsigned long long size, resident;
    long page = sysconf(_SC_PAGESIZE);
    if (n <= 0 || page <= 0)
        PT_RETURN_NONE;
    text[n] = '\0';
    if (sscanf(text, "%llu %llu", &size, &resident) != 2)
        PT_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(resident * (unsigned long long)page);
}

/* ======================================================================== */
/* Task lanes                                                               */
/* ======================================================================== */

/* An asyncio task's steps go to a lane of its own (pytrace_cffi/_tasks.py): a
 * pt_thread with no thread state, which exports show as one more thread. */
#define PT_MAX_LANES 1024
/* A lane's thread id: past any OS thread id (Linux's stay below 2^22), within
 * the 31 bits a Perfetto thread descriptor's tid holds. */
#define PT_LANE_TID_BASE 0x40000000u

typedef struct {
    PyObject_HEAD
    uint64_t generation;          /* the tracer its thread belongs to (0: none yet) */
    pt_thread *thread;            /* NULL: none in that tracer (past PT_MAX_LANES) */
    uint64_t native_id;           /* its thread id, 0 before its first step */
} pt_lane;

static PyObject *pt_lane_type;

/* The lane's thread in the running tracer, made at its first step. */
static pt_thread *
pt_lane_thread(pt_tracer *tracer, pt_lane *lane)
{
    if (lane->generation == tracer->generation)
        return lane->thread;
    lane->generation = tracer->generation;
    lane->thread = NULL;
    lane->native_id = 0;
    if (tracer->n_lanes >= PT_MAX_LANES)
        return NULL;
    uint64_t native_id = PT_LANE_TID_BASE + (uint64_t)tracer->n_lanes;
    pt_thread *thread = pt_thread_new(tracer, 0, 0, native_id, pt_ticks(tracer));
    if (!thread)
        return NULL;
    tracer->n_lanes++;
    /* never "ended": calls open at stop are no sign of a hook lost (pt_thread_ends_open) */
    thread->alive_at_stop = 1;
    lane->thread = thread;
    lane->native_id = native_id;
    return thread;
}

static PyObject *
pt_lane_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (PyTuple_Size(args) || (kwds && PyDict_Size(kwds))) {
        PyErr_SetString(PyExc_TypeError, "TaskLane() takes no arguments");
        return NULL;
    }
    allocfunc tp_alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    pt_lane *lane = (pt_lane *)tp_alloc(type, 0);
    if (lane) {
        lane->generation = lane->native_id = 0;
        lane->thread = NULL;
    }
    return (PyObject *)lane;
}

/* lane(callable, *args): callable(*args), the calling thread's events recorded
 * on the lane meanwhile (and nothing of the call itself: the lane swaps the
 * buffer the hooks find, no event is written for it). */
static PyObject *
pt_lane_call(PyObject *op, PyObject *args, PyObject *kwds)
{
    Py_ssize_t n = PyTuple_Size(args);
    if (n < 1 || (kwds && PyDict_Size(kwds))) {
        PyErr_SetString(PyExc_TypeError, "lane(callable, *args)");
        return NULL;
    }
    PyObject *rest = PyTuple_GetSlice(args, 1, n);
    if (!rest)
        return NULL;
    pt_tracer *tracer = pt_annotating_tracer();
    pt_thread *lane = tracer ? pt_lane_thread(tracer, (pt_lane *)op) : NULL;
    uint64_t generation = tracer ? tracer->generation : 0;
    pt_thread *own = lane ? pt_thread_enter_lane(tracer, lane) : NULL;
    PyObject *result = PyObject_Call(PyTuple_GetItem(args, 0), rest, NULL);
    if (own)
        pt_thread_leave_lane(generation, lane, own);
    Py_DECREF(rest);
    return result;
}

static PyObject *
pt_lane_get_native_id(PyObject *op, void *closure)
{
    return PyLong_FromUnsignedLongLong(((pt_lane *)op)->native_id);
}

static PyGetSetDef pt_lane_getset[] = {
    {"native_id", pt_lane_get_native_id, NULL,
     "the lane's thread id in the trace (0 before its first step while tracing)", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pt_lane_slots[] = {
    {Py_tp_new, (void *)pt_lane_new},
    {Py_tp_dealloc, (void *)pt_plain_dealloc},
    {Py_tp_call, (void *)pt_lane_call},
    {Py_tp_getset, pt_lane_getset},
    {Py_tp_doc, (void *)"TaskLane(): lane(callable, *args) runs callable(*args) with the "
                        "calling thread's events recorded on a lane of their own."},
    {0, NULL},
};

static PyType_Spec pt_lane_spec = {
    "pytrace_cffi.TaskLane", sizeof(pt_lane), 0, Py_TPFLAGS_DEFAULT, pt_lane_slots,
};

/* ======================================================================== */
/* Launches (log_launches)                                                  */
/* ======================================================================== */

/* Each command the program launches, an instant "launch" on the thread that
 * launched it, args {"via": the audit event, "command": its command line, at
 * most 1000 characters}. A C audit hook (a Python one would run Python code for
 * every audit event: pt_signals.c says why that breaks threads on 3.10/3.11),
 * added at the first watch_launches(True): audit hooks cannot be removed, so
 * unwatching only turns it off, and a process that never asks has none. */
static int pt_launches_on;
static int pt_launch_hook_added;
/* PySys_AddAuditHook succeeds without adding the hook when an audit hook of the
 * program refuses it with an Exception: our hook notes the event
 * "pytrace_cffi.audit_probe" that _runtime.watch_launches raises, to know. */
static int pt_launch_hook_seen;

/* One word of a command line: bytes decoded as file names are (os.system's
 * command is bytes by the time it is audited), anything else as str() makes it. */
static PyObject *
pt_launch_word(PyObject *word)
{
    if (PyBytes_Check(word))
        return PyUnicode_DecodeFSDefault(PyBytes_AsString(word));
    return PyObject_Str(word);
}

/* The command line of subprocess.Popen's args or os.system's command: a
 * sequence joined with spaces, one word as pt_launch_word makes it. */
static PyObject *
pt_launch_command(PyObject *command)
{
    PyObject *text;
    if (PyList_Check(command) || PyTuple_Check(command)) {
        PyObject *parts = PySequence_List(command);
        Py_ssize_t n = parts ? PyList_Size(parts) : 0;
        for (Py_ssize_t i = 0; i < n; i++) {
            PyObject *part = pt_launch_word(PyList_GetItem(parts, i));
            if (!part || PyList_SetItem(parts, i, part) < 0) {  /* steals part */
                Py_CLEAR(parts);
                break;
            }
        }
        PyObject *space = parts ? PyUnicode_FromString(" ") : NULL;
        text = space ? PyUnicode_Join(space, parts) : NULL;
        Py_XDECREF(space);
        Py_XDECREF(parts);
    } else {
        text = pt_launch_word(command);
    }
    if (text && PyUnicode_GetLength(text) > 1000) {
        PyObject *cut = PyUnicode_Substring(text, 0, 1000);
        Py_DECREF(text);
        text = cut;
    }
    return text;
}

static int
pt_launch_audit(const char *event, PyObject *args, void *data)
{
    (void)data;
    if (event[0] == 'p' && strcmp(event, "pytrace_cffi.audit_probe") == 0)
        pt_launch_hook_seen = 1;
    if (!pt_launches_on || (event[0] != 's' && event[0] != 'o'))
        return 0;       /* the common case, decided at once */
    int popen = strcmp(event, "subprocess.Popen") == 0;
    if (!popen && strcmp(event, "os.system") != 0)
        return 0;
    pt_tracer *tracer = pt_annotating_tracer();
    pt_thread *thread = tracer ? pt_thread_of_caller(tracer) : NULL;
    if (!thread || !PyTuple_Check(args) || PyTuple_Size(args) < (popen ? 2 : 1))
        return 0;
    int64_t ticks = pt_ticks(tracer);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);     /* nothing here fails the launch */
    PyObject *command = pt_launch_command(PyTuple_GetItem(args, popen ? 1 : 0));
    PyObject *payload = command ? Py_BuildValue("{sssO}", "via", event, "command", command)
                                : NULL;
    PyObject *name = PyUnicode_FromString("launch");
    if (payload && name)
        pt_mark_at(tracer, thread, "i", ticks, name, payload);
    Py_XDECREF(name);
    Py_XDECREF(payload);
    Py_XDECREF(command);
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return 0;
}

/* watch_launches(on): records launches from now on (on) or no more; returns
 * whether it was on and our hook in place (it saw the probe). */
static PyObject *
pt_watch_launches(PyObject *module, PyObject *on)
{
    int was_on = pt_launches_on;
    if (PyObject_IsTrue(on) && !pt_launch_hook_added) {
        if (PySys_AddAuditHook(pt_launch_audit, NULL) < 0)
            PyErr_Clear();              /* another audit hook refused ours */
        else
            pt_launch_hook_added = 1;
    }
    pt_launches_on = PyObject_IsTrue(on) && pt_launch_hook_added;
    return PyBool_FromLong(was_on && pt_launch_hook_seen);
}

/* ======================================================================== */
/* Publishing to Python                                                     */
/* ======================================================================== */

static PyMethodDef pt_runtime_functions[] = {
    {"gc_callback", (PyCFunction)(void (*)(void))pt_gc_callback, METH_FASTCALL,
     "gc_callback(phase, info): for gc.callbacks; records each collection as a region."},
    {"counter_sample", (PyCFunction)(void (*)(void))pt_counter_sample, METH_FASTCALL,
     "counter_sample(name, value): a counter sample on the lane of the thread that "
     "started tracing; False when not tracing."},
    {"watch_launches", pt_watch_launches, METH_O,
     "watch_launches(on): records each launch as an instant (on) or no more; "
     "returns whether it was on."},
    {"resident_bytes", pt_resident_bytes, METH_NOARGS,
     "resident_bytes(): the process's RSS from /proc/self/statm, or None."},
    {NULL, NULL, 0, NULL},
};

int
pt_runtime_api(void *py_dict)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *dict = (PyObject *)py_dict;
    for (int generation = 0; generation < 3; generation++)
        if (!pt_gc_names[generation])
            pt_gc_names[generation] = PyUnicode_FromFormat("gc (generation %d)", generation);
    if (!pt_gc_phase_start)
        pt_gc_phase_start = PyUnicode_InternFromString("start");
    if (!pt_lane_type)
        pt_lane_type = PyType_FromSpec(&pt_lane_spec);
    PyObject *owner = PyModule_New("pytrace_cffi");
    if (!owner || !PyDict_Check(dict) || !pt_gc_names[2] || !pt_gc_phase_start ||
        !pt_lane_type || PyDict_SetItemString(dict, "TaskLane", pt_lane_type) < 0) {
        rc = PT_ERR_PYTHON;
        goto done;
    }
    for (PyMethodDef *def = pt_runtime_functions; def->ml_name; def++) {
        PyObject *function = PyCFunction_NewEx(def, owner, NULL);
        if (!function || PyDict_SetItemString(dict, def->ml_name, function) < 0)
            rc = PT_ERR_PYTHON;
        Py_XDECREF(function);
    }
done:
    if (rc != PT_OK)
        PyErr_Clear();
    Py_XDECREF(owner);
    PyGILState_Release(gil);
    return rc;
}

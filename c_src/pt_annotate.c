/* pt_annotate.c - what user code records on purpose: record_function regions,
 * instants and counters, and captured stacks with their bulk symbolization.
 *
 * These are Python-callable C objects (a type and METH_FASTCALL functions), so a
 * `with record_function(...)` costs a few C calls and nothing when not tracing.
 * They reach the running tracer through pt_active_tracer.
 */
#include "pt_record_internal.h"

#include <string.h>

/* ======================================================================== */
/* Keys for annotation names                                                */
/* ======================================================================== */

static const char pt_annotation_marker = 'A';

/* The key of a record_function name: its own namespace beside code objects and
 * built-ins; the source naming it is the name string itself. */
uint32_t
pt_key_for_annotation(pt_tracer *tracer, PyObject *name)
{
    uint32_t id = pt_key_find(tracer, name, &pt_annotation_marker);
    if (id)
        return id;
    Py_INCREF(name);
    return pt_key_add(tracer, name, &pt_annotation_marker, name);
}

/* ======================================================================== */
/* Argument checking                                                        */
/* ======================================================================== */

/* Returns a new reference: a .shape as a list of exact ints. Sizes are checked
 * here, so a saved trace or a Chrome export never meets one JSON cannot hold. */
static PyObject *
pt_shape_sizes(PyObject *shape, const char *what)
{
    PyObject *sizes = PySequence_List(shape);
    if (!sizes)
        return NULL;
    Py_ssize_t n = PyList_Size(sizes);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *index = PyNumber_Index(PyList_GetItem(sizes, i));
        /* 3.9's PyNumber_Index keeps int subclasses (bool): store a plain int */
        PyObject *size = index ? PyNumber_Long(index) : NULL;
        Py_XDECREF(index);
        if (!size) {
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "%s: a .shape must hold integer sizes", what);
            Py_DECREF(sizes);
            return NULL;
        }
        PyList_SetItem(sizes, i, size);
    }
    return sizes;
}

/* Returns a new reference: args as a dict of str -> str/int/float/bool, objects
 * with a .shape turned into a list of its sizes; None stays None. NULL with
 * TypeError for anything else. */
static PyObject *
pt_checked_args(PyObject *args, const char *what)
{
    if (args == Py_None) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    if (!PyDict_Check(args)) {
        PyErr_Format(PyExc_TypeError, "%s: args must be a dict or None", what);
        return NULL;
    }
    PyObject *checked = PyDict_New();
    if (!checked)
        return NULL;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (PyDict_Next(args, &pos, &key, &value)) {
        if (!PyUnicode_Check(key)) {
            PyErr_Format(PyExc_TypeError, "%s: args keys must be str", what);
            goto fail;
        }
        PyObject *stored;
        if (PyUnicode_Check(value) || PyLong_Check(value) || PyFloat_Check(value) ||
            PyBool_Check(value)) {
            Py_INCREF(value);
            stored = value;
        } else {
            PyObject *shape = PyObject_GetAttrString(value, "shape");
            if (!shape) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "%s: args values must be str, int, float, bool or have a .shape",
                             what);
                goto fail;
            }
            stored = pt_shape_sizes(shape, what);
            Py_DECREF(shape);
            if (!stored)
                goto fail;
        }
        int rc = PyDict_SetItem(checked, key, stored);
        Py_DECREF(stored);
        if (rc < 0)
            goto fail;
    }
    return checked;
fail:
    Py_DECREF(checked);
    return NULL;
}

static int
pt_check_name(PyObject *name, const char *what)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s: name must be a str", what);
        return -1;
    }
    return 0;
}

/* ======================================================================== */
/* record_function                                                          */
/* ======================================================================== */

typedef struct {
    PyObject_HEAD
    PyObject *name;
    PyObject *args;               /* checked dict, or None */
    uint64_t generation;          /* tracer the key below belongs to */
    uint32_t key;
    uint64_t entered_generation;  /* tracer the open region was recorded into */
} pt_region;

/* Python's record_function wrapper factory: decorate(region, function). */
static PyObject *pt_region_decorate;

/* The type's __enter__ descriptor (set with the type, kept while it lives). */
static PyObject *pt_region_enter_descr;
static PyMethodDef pt_region_methods[3];

int
pt_is_region_enter(const void *implementation)
{
    return implementation && (implementation == (const void *)pt_region_enter_descr ||
                              implementation == (const void *)&pt_region_methods[0] ||
                              /* (a CPython whose m_ml moved: pt_cfunction_def) */
                              implementation == (const void *)pt_region_methods[0].ml_meth);
}

/* Returns a new reference: a region named `name`, its args checked. */
static PyObject *
pt_region_create(PyTypeObject *type, PyObject *name, PyObject *region_args)
{
    if (pt_check_name(name, "record_function") < 0)
        return NULL;
    PyObject *checked = pt_checked_args(region_args, "record_function");
    if (!checked)
        return NULL;
    /* Plain allocation: the type is final and holds no cycles (no GC needed). */
    pt_region *self = PyObject_Malloc(sizeof(pt_region));
    if (!self) {
        Py_DECREF(checked);
        return PyErr_NoMemory();
    }
    PyObject_Init((PyObject *)self, type);      /* takes a reference to the heap type */
    self->generation = self->entered_generation = 0;
    self->key = 0;
    Py_INCREF(name);
    self->name = name;
    self->args = checked;
    return (PyObject *)self;
}

static PyObject *
pt_region_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    Py_ssize_t nargs = PyTuple_Size(args);
    PyObject *name = nargs >= 1 ? PyTuple_GetItem(args, 0) : NULL;
    PyObject *region_args = nargs >= 2 ? PyTuple_GetItem(args, 1) : Py_None;
    if (kwds && PyDict_Size(kwds)) {
        PyObject *kw_name = PyDict_GetItemString(kwds, "name");
        PyObject *kw_args = PyDict_GetItemString(kwds, "args");
        Py_ssize_t known = (kw_name != NULL) + (kw_args != NULL);
        if (known != PyDict_Size(kwds) || (kw_name && name) || (kw_args && nargs >= 2)) {
            PyErr_SetString(PyExc_TypeError, "record_function(name, args=None)");
            return NULL;
        }
        if (kw_name)
            name = kw_name;
        if (kw_args)
            region_args = kw_args;
    }
    if (!name || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "record_function(name, args=None)");
        return NULL;
    }
    return pt_region_create(type, name, region_args);
}

static PyObject *pt_region_type;

/* record_function(name, args=None): the everyday way to make a region. A
 * METH_FASTCALL function builds no argument tuple, unlike calling the type,
 * and this runs for every `with record_function(...)`. */
static PyObject *
pt_record_function(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                   PyObject *kwnames)
{
    PyObject *name = nargs >= 1 ? args[0] : NULL;
    PyObject *region_args = nargs >= 2 ? args[1] : Py_None;
    Py_ssize_t n_kw = kwnames ? PyTuple_Size(kwnames) : 0;
    for (Py_ssize_t i = 0; i < n_kw; i++) {
        PyObject *keyword = PyTuple_GetItem(kwnames, i);
        PyObject *value = args[nargs + i];
        if (!name && PyUnicode_CompareWithASCIIString(keyword, "name") == 0 && nargs == 0)
            name = value;
        else if (nargs < 2 && PyUnicode_CompareWithASCIIString(keyword, "args") == 0)
            region_args = value;
        else
            name = NULL, nargs = 3;         /* unknown or repeated: the error below */
    }
    if (!name || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "record_function(name, args=None)");
        return NULL;
    }
    return pt_region_create((PyTypeObject *)pt_region_type, name, region_args);
}

static void
pt_region_dealloc(PyObject *op)
{
    pt_region *self = (pt_region *)op;
    PyTypeObject *type = Py_TYPE(op);
    Py_CLEAR(self->name);
    Py_CLEAR(self->args);
    PyObject_Free(op);
    Py_DECREF(type);
}

static PyObject *
pt_region_enter(PyObject *op, PyObject *unused)
{
    pt_region *self = (pt_region *)op;
    pt_tracer *tracer = pt_annotating_tracer();
    if (tracer) {
        pt_thread *thread = pt_thread_of_caller(tracer);
        if (thread) {
            if (self->generation != tracer->generation) {
                self->key = pt_key_for_annotation(tracer, self->name);
                self->generation = tracer->generation;
            }
            if (pt_record(tracer, thread, PT_EV_PY_CALL, self->key) < 0) {
                Py_INCREF(op);          /* stopped while the spill hook ran */
                return op;
            }
            self->entered_generation = tracer->generation;
            if (self->args != Py_None) {
                if (!tracer->annotation_args)
                    tracer->annotation_args = PyList_New(0);
                Py_ssize_t index = tracer->annotation_args
                    ? PyList_Size(tracer->annotation_args) : -1;
                if (index >= 0 && pt_aux_fits(tracer, PT_AUX_ARGS, index) &&
                    PyList_Append(tracer->annotation_args, self->args) == 0)
                    pt_append(tracer, thread, 0, pt_aux_word(PT_AUX_ARGS, (uint32_t)index));
                else
                    PyErr_Clear();   /* the region stays, without its args */
            }
        }
    }
    Py_INCREF(op);
    return op;
}

static PyObject *
pt_region_exit(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    pt_region *self = (pt_region *)op;
    pt_tracer *tracer = pt_annotating_tracer();
    if (tracer && self->entered_generation == tracer->generation) {
        pt_thread *thread = pt_thread_of_caller(tracer);
        if (thread)
            pt_record(tracer, thread, PT_EV_PY_RETURN, self->key);
        if (tracer->progress_region &&
            PyUnicode_Compare(self->name, tracer->progress_region) == 0)
            pt_flight_step();       /* the watchdog's named region made progress */
    }
    Py_IncRef(Py_False);            /* (3.14: see PT_RETURN_NONE) */
    return Py_False;                /* never swallows the exception */
}

/* As a decorator: returns a function that runs the decorated one in this region. */
static PyObject *
pt_region_call(PyObject *op, PyObject *args, PyObject *kwds)
{
    PyObject *function = PyTuple_Size(args) == 1 ? PyTuple_GetItem(args, 0) : NULL;
    if (!function || (kwds && PyDict_Size(kwds)) || !PyCallable_Check(function)) {
        PyErr_SetString(PyExc_TypeError, "record_function(...) decorates one callable");
        return NULL;
    }
    if (!pt_region_decorate) {
        PyErr_SetString(PyExc_RuntimeError, "record_function: decorator support not loaded");
        return NULL;
    }
    return PyObject_CallFunctionObjArgs(pt_region_decorate, op, function, NULL);
}

static PyObject *
pt_region_get_name(PyObject *op, void *closure)
{
    PyObject *name = ((pt_region *)op)->name;
    Py_INCREF(name);
    return name;
}

static PyObject *
pt_region_get_args(PyObject *op, void *closure)
{
    PyObject *args = ((pt_region *)op)->args;
    if (args == Py_None) {
        Py_INCREF(Py_None);
        return Py_None;
    }
    return PyDict_Copy(args);
}

static PyMethodDef pt_region_methods[] = {
    {"__enter__", pt_region_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))pt_region_exit, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef pt_region_getset[] = {
    {"name", pt_region_get_name, NULL, NULL, NULL},
    {"args", pt_region_get_args, NULL, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot pt_region_slots[] = {
    {Py_tp_new, (void *)pt_region_new},
    {Py_tp_dealloc, (void *)pt_region_dealloc},
    {Py_tp_methods, pt_region_methods},
    {Py_tp_getset, pt_region_getset},
    {Py_tp_call, (void *)pt_region_call},
    {Py_tp_doc, (void *)
     "record_function(name, args=None): a region recorded as a \"user_annotation\"\n"
     "slice named `name`, nested with the function slices around and inside it.\n\n"
     "A context manager (`with record_function(\"load\"): ...`) and a decorator\n"
     "(`@record_function(\"step\")`). `args` is a dict of str, int, float or bool\n"
     "values, or objects with a .shape (recorded as its sizes): the slice's args.\n"
     "Bad types raise TypeError at construction. Not tracing, it costs a few C calls."},
    {0, NULL},
};

static PyType_Spec pt_region_spec = {
    "pytrace_cffi.RecordFunction", sizeof(pt_region), 0, Py_TPFLAGS_DEFAULT,
    pt_region_slots,
};

/* ======================================================================== */
/* Instants and counters                                                    */
/* ======================================================================== */

void
pt_add_mark_at(pt_tracer *tracer, const char *kind, int64_t ticks, int thread_index,
               PyObject *name, PyObject *payload)
{
    if (!tracer->marks && !(tracer->marks = PyList_New(0))) {
        PyErr_Clear();
        return;
    }
    PyObject *mark = Py_BuildValue("(sLiOO)", kind, (long long)ticks, thread_index, name,
                                   payload);
    if (!mark || PyList_Append(tracer->marks, mark) < 0)
        PyErr_Clear();
    Py_XDECREF(mark);
}

void
pt_mark_at(pt_tracer *tracer, const pt_thread *thread, const char *kind, int64_t ticks,
           PyObject *name, PyObject *payload)
{
    pt_add_mark_at(tracer, kind, ticks, thread->index, name, payload);
}

/* Appends (kind, now, the calling thread's index, name, payload) to the marks:
 * none from a thread no trace records (pt_own.c). */
static void
pt_add_mark(pt_tracer *tracer, const char *kind, PyObject *name, PyObject *payload)
{
    pt_thread *thread = pt_thread_of_caller(tracer);
    if (thread)
        pt_mark_at(tracer, thread, kind, pt_ticks(tracer), name, payload);
}

static PyObject *
pt_instant(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "instant(name, args=None)");
        return NULL;
    }
    if (pt_check_name(args[0], "instant") < 0)
        return NULL;
    PyObject *checked = pt_checked_args(nargs > 1 ? args[1] : Py_None, "instant");
    if (checked == Py_None) {
        /* One payload shape for every mark, a dict: saved traces, Chrome's "args"
         * and the readers of both expect an object. */
        Py_DECREF(checked);
        checked = PyDict_New();
    }
    if (!checked)
        return NULL;
    pt_tracer *tracer = pt_annotating_tracer();
    if (tracer)
        pt_add_mark(tracer, "i", args[0], checked);
    Py_DECREF(checked);
    PT_RETURN_NONE;
}

static int
pt_is_number(PyObject *value)
{
    return (PyLong_Check(value) || PyFloat_Check(value)) && !PyBool_Check(value);
}

static PyObject *
pt_counter(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "counter(name, value)");
        return NULL;
    }
    if (pt_check_name(args[0], "counter") < 0)
        return NULL;
    PyObject *value = args[1];
    if (PyDict_Check(value)) {
        PyObject *key, *item;
        Py_ssize_t pos = 0;
        while (PyDict_Next(value, &pos, &key, &item))
            if (!PyUnicode_Check(key) || !pt_is_number(item)) {
                PyErr_SetString(PyExc_TypeError,
                                "counter: a dict value must map str to numbers");
                return NULL;
            }
        value = PyDict_Copy(value);
    } else if (pt_is_number(value)) {
        value = Py_BuildValue("{OO}", args[0], value);
    } else {
        PyErr_SetString(PyExc_TypeError, "counter: value must be a number or a dict of numbers");
        return NULL;
    }
    if (!value)
        return NULL;
    pt_tracer *tracer = pt_annotating_tracer();
    if (tracer)
        pt_add_mark(tracer, "C", args[0], value);
    Py_DECREF(value);
    PT_RETURN_NONE;
}

/* ======================================================================== */
/* Captured stacks                                                          */
/* ======================================================================== */

/* One frame of a captured stack. */
typedef struct {
    PyObject *code;               /* strong ref: symbolizable after the frame dies */
    int where;                    /* line number, or byte offset when by_offset */
} pt_stack_frame;

/* A var-sized object: the frames live inline, so a capture is one allocation. */
typedef struct {
    PyObject_VAR_HEAD
    int by_offset;                /* `where` resolves to a line at symbolize time (3.11+) */
    pt_stack_frame frames[1];     /* ob_size of them, innermost first */
} pt_stack;

#define PT_STACK_DEPTH(stack) Py_SIZE(stack)

static PyObject *pt_stack_type;

static void
pt_stack_dealloc(PyObject *op)
{
    pt_stack *self = (pt_stack *)op;
    PyTypeObject *type = Py_TYPE(op);
    for (Py_ssize_t i = 0; i < PT_STACK_DEPTH(self); i++)
        Py_DECREF(self->frames[i].code);
    freefunc tp_free = (freefunc)PyType_GetSlot(type, Py_tp_free);
    tp_free(op);
    Py_DECREF(type);
}

static Py_ssize_t
pt_stack_len(PyObject *op)
{
    return PT_STACK_DEPTH(op);
}

static PyType_Slot pt_stack_slots[] = {
    {Py_tp_dealloc, (void *)pt_stack_dealloc},
    {Py_sq_length, (void *)pt_stack_len},
    {Py_tp_doc, (void *)"A captured Python stack: (code, line) pairs, innermost first."},
    {0, NULL},
};

static PyType_Spec pt_stack_spec = {
    "pytrace_cffi._core.CapturedStack", offsetof(pt_stack, frames), sizeof(pt_stack_frame),
    Py_TPFLAGS_DEFAULT,
    pt_stack_slots,
};

/* capture_stack(max_depth=128): the calling thread's stack, innermost first. */
static PyObject *
pt_capture_stack(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                 PyObject *kwnames)
{
    long max_depth = 128;
    PyObject *depth_arg = nargs == 1 ? args[0] : NULL;
    Py_ssize_t n_kw = kwnames ? PyTuple_Size(kwnames) : 0;
    if (n_kw == 1 && nargs == 0 &&
        PyUnicode_CompareWithASCIIString(PyTuple_GetItem(kwnames, 0), "max_depth") == 0)
        depth_arg = args[0];
    else if (n_kw || nargs > 1) {
        PyErr_SetString(PyExc_TypeError, "capture_stack(max_depth=128)");
        return NULL;
    }
    if (depth_arg && !PyLong_Check(depth_arg)) {
        PyErr_SetString(PyExc_TypeError, "capture_stack: max_depth must be an int");
        return NULL;
    }
    if (depth_arg && ((max_depth = PyLong_AsLong(depth_arg)) < 0 || max_depth > 1 << 20)) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "capture_stack: max_depth must be 0..1048576");
        return NULL;
    }
    pt_stack_frame on_stack[128];
    pt_stack_frame *frames = on_stack;
    Py_ssize_t cap = 128, depth = 0;
    PyFrameObject *frame = PyEval_GetFrame();       /* borrowed */
    Py_XINCREF(frame);
    while (frame && depth < max_depth) {
        if (depth == cap) {
            pt_stack_frame *grown = PyMem_Malloc(2 * cap * sizeof *grown);
            if (!grown)
                break;                  /* keep the innermost `cap` frames */
            memcpy(grown, frames, depth * sizeof *frames);
            if (frames != on_stack)
                PyMem_Free(frames);
            frames = grown;
            cap *= 2;
        }
        frames[depth].code = (PyObject *)PyFrame_GetCode(frame);   /* new reference, kept */
        /* Where available, keep the instruction offset: turning it into a line
         * scans the line table, work symbolize does once per distinct place. */
        frames[depth].where = PyFrame_GetLasti ? PyFrame_GetLasti(frame)
                                               : PyFrame_GetLineNumber(frame);
        depth++;
        PyFrameObject *back = PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
    }
    Py_XDECREF(frame);

    allocfunc tp_alloc =
        (allocfunc)PyType_GetSlot((PyTypeObject *)pt_stack_type, Py_tp_alloc);
    pt_stack *stack = (pt_stack *)tp_alloc((PyTypeObject *)pt_stack_type, depth);
    if (stack) {
        memcpy(stack->frames, frames, depth * sizeof *frames);   /* the references move */
        stack->by_offset = PyFrame_GetLasti != NULL;
    } else {
        for (Py_ssize_t i = 0; i < depth; i++)
            Py_DECREF(frames[i].code);
    }
    if (frames != on_stack)
        PyMem_Free(frames);
    return (PyObject *)stack;
}

/* One distinct place (code object, line or offset) and the dict naming it. */
typedef struct {
    PyObject *code;
    int where;
    PyObject *entry;              /* {"filename", "line", "name"}, owned */
} pt_place;

/* Returns a new reference: the frame dict for code at `where`. */
static PyObject *
pt_place_entry(PyObject *code, int where, int by_offset, PyObject *keys[3])
{
    int line = by_offset ? (where >= 0 ? PyCode_Addr2Line(code, where) : -1) : where;
    PyObject *filename = PyObject_GetAttrString(code, "co_filename");
    PyObject *name = filename ? PyObject_GetAttrString(code, "co_name") : NULL;
    PyObject *line_obj = name ? PyLong_FromLong(line) : NULL;
    PyObject *entry = line_obj ? PyDict_New() : NULL;
    if (entry && (PyDict_SetItem(entry, keys[0], filename) < 0 ||
                  PyDict_SetItem(entry, keys[1], line_obj) < 0 ||
                  PyDict_SetItem(entry, keys[2], name) < 0))
        Py_CLEAR(entry);
    Py_XDECREF(filename);
    Py_XDECREF(name);
    Py_XDECREF(line_obj);
    return entry;
}

/* symbolize(stacks): per stack a list of {"filename", "line", "name"} dicts,
 * innermost first. Work is shared across stacks: each distinct place is resolved
 * once, and its dict is shared by every stack that passes there (read-only). */
static PyObject *
pt_symbolize(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 1) {
        PyErr_SetString(PyExc_TypeError, "symbolize(stacks) takes one list of stacks");
        return NULL;
    }
    PyObject *stacks = PySequence_List(args[0]);
    if (!stacks)
        return NULL;
    PyObject *keys[3] = {PyUnicode_FromString("filename"), PyUnicode_FromString("line"),
                         PyUnicode_FromString("name")};
    Py_ssize_t n = PyList_Size(stacks);
    size_t mask = 1023, used = 0;
    pt_place *places = PyMem_Calloc(mask + 1, sizeof *places);
    PyObject *result = NULL;
    if (!keys[0] || !keys[1] || !keys[2] || !places || !(result = PyList_New(n)))
        goto fail;
    for (Py_ssize_t s = 0; s < n; s++) {
        PyObject *item = PyList_GetItem(stacks, s);     /* borrowed */
        if (Py_TYPE(item) != (PyTypeObject *)pt_stack_type) {
            PyErr_SetString(PyExc_TypeError, "symbolize: stacks must come from capture_stack()");
            goto fail;
        }
        pt_stack *stack = (pt_stack *)item;
        PyObject *frames = PyList_New(PT_STACK_DEPTH(stack));
        if (!frames)
            goto fail;
        PyList_SetItem(result, s, frames);               /* steals */
        for (Py_ssize_t i = 0; i < PT_STACK_DEPTH(stack); i++) {
            PyObject *code = stack->frames[i].code;
            int where = stack->frames[i].where * 2 + stack->by_offset;   /* keeps kinds apart */
            size_t j = (((uintptr_t)code >> 4) ^ ((size_t)where * 0x9E3779B1u)) & mask;
            while (places[j].code && (places[j].code != code || places[j].where != where))
                j = (j + 1) & mask;
            if (!places[j].code) {
                PyObject *entry = pt_place_entry(code, stack->frames[i].where, stack->by_offset,
                                                  keys);
                if (!entry)
                    goto fail;
                places[j].code = code;
                places[j].where = where;
                places[j].entry = entry;
                if (++used * 2 > mask) {                   /* keep the table half empty */
                    size_t new_mask = mask * 2 + 1;
                    pt_place *grown = PyMem_Calloc(new_mask + 1, sizeof *grown);
                    if (!grown)
                        goto fail;
                    for (size_t k = 0; k <= mask; k++) {
                        if (!places[k].code)
                            continue;
                        size_t m = (((uintptr_t)places[k].code >> 4) ^
                                    ((size_t)places[k].where * 0x9E3779B1u)) & new_mask;
                        while (grown[m].code)
                            m = (m + 1) & new_mask;
                        grown[m] = places[k];
                    }
                    PyMem_Free(places);
                    places = grown;
                    mask = new_mask;
                    for (j = (((uintptr_t)code >> 4) ^ ((size_t)where * 0x9E3779B1u)) & mask;
                         places[j].code != code || places[j].where != where;
                         j = (j + 1) & mask)
                        ;
                }
            }
            Py_INCREF(places[j].entry);
            PyList_SetItem(frames, i, places[j].entry);  /* steals */
        }
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    if (places) {
        for (size_t k = 0; k <= mask; k++)
            Py_XDECREF(places[k].entry);
        PyMem_Free(places);
    }
    for (int k = 0; k < 3; k++)
        Py_XDECREF(keys[k]);
    Py_DECREF(stacks);
    return result;
}

/* ======================================================================== */
/* Publishing to Python                                                     */
/* ======================================================================== */

static PyMethodDef pt_annotate_functions[] = {
    {"record_function", (PyCFunction)(void (*)(void))pt_record_function,
     METH_FASTCALL | METH_KEYWORDS,
     "record_function(name, args=None): a region recorded as a \"user_annotation\"\n"
     "slice named `name`, nested with the function slices around and inside it.\n\n"
     "A context manager (`with record_function(\"load\"): ...`) and a decorator\n"
     "(`@record_function(\"step\")`). `args` is a dict of str, int, float or bool\n"
     "values, or objects with a .shape (recorded as its sizes): the slice's args.\n"
     "Bad types raise TypeError at construction. Not tracing, it costs a few C calls.\n"
     "Returns a RecordFunction."},
    {"instant", (PyCFunction)(void (*)(void))pt_instant, METH_FASTCALL,
     "instant(name, args=None): a point event on the timeline."},
    {"counter", (PyCFunction)(void (*)(void))pt_counter, METH_FASTCALL,
     "counter(name, value): a counter sample, value a number or a dict of numbers."},
    {"capture_stack", (PyCFunction)(void (*)(void))pt_capture_stack,
     METH_FASTCALL | METH_KEYWORDS,
     "capture_stack(max_depth=128): the current thread's Python stack, cheaply."},
    {"symbolize", (PyCFunction)(void (*)(void))pt_symbolize, METH_FASTCALL,
     "symbolize(stacks): lists of {filename, line, name} dicts, innermost first."},
    {NULL, NULL, 0, NULL},
};

int
pt_annotation_api(void *py_dict)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *dict = (PyObject *)py_dict;
    PyObject *decorate = PyDict_Check(dict) ? PyDict_GetItemString(dict, "decorate") : NULL;
    if (decorate && !pt_region_decorate) {
        Py_INCREF(decorate);
        pt_region_decorate = decorate;
    }
    if (!pt_region_type)
        pt_region_type = PyType_FromSpec(&pt_region_spec);
    if (pt_region_type && !pt_region_enter_descr) {
        /* the descriptor itself (a type's method descriptor gets as itself) */
        pt_region_enter_descr = PyObject_GetAttrString(pt_region_type, "__enter__");
        if (!pt_region_enter_descr)
            PyErr_Clear();
    }
    if (!pt_stack_type)
        pt_stack_type = PyType_FromSpec(&pt_stack_spec);
    if (!PyDict_Check(dict) || !pt_region_type || !pt_stack_type ||
        PyDict_SetItemString(dict, "RecordFunction", pt_region_type) < 0 ||
        PyDict_SetItemString(dict, "CapturedStack", pt_stack_type) < 0) {
        PyErr_Clear();
        rc = PT_ERR_PYTHON;
        goto done;
    }
    /* Bound to a module named "pytrace_cffi", traces name them pytrace_cffi.instant
     * and so on, like any module function. */
    PyObject *owner = PyModule_New("pytrace_cffi");
    for (PyMethodDef *def = pt_annotate_functions; owner && def->ml_name; def++) {
        PyObject *function = PyCFunction_NewEx(def, owner, NULL);
        if (!function || PyDict_SetItemString(dict, def->ml_name, function) < 0) {
            Py_XDECREF(function);
            Py_CLEAR(owner);
        } else {
            Py_DECREF(function);
        }
    }
    if (!owner) {
        PyErr_Clear();
        rc = PT_ERR_PYTHON;
    }
    Py_XDECREF(owner);
done:
    PyGILState_Release(gil);
    return rc;
}

int
pt_annotation_data(pt_tracer *tracer, void *py_args_list, void *py_marks_list)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = PT_OK;
    if ((tracer->annotation_args &&
         PyList_SetSlice((PyObject *)py_args_list, 0, 0, tracer->annotation_args) < 0) ||
        (tracer->marks && PyList_SetSlice((PyObject *)py_marks_list, 0, 0, tracer->marks) < 0)) {
        pt_set_error_from_python(tracer, "reading annotations");
        rc = PT_ERR_PYTHON;
    }
    PyGILState_Release(gil);
    return rc;
}

/* The flight recorder's watchdog counts each end of a region named py_name
 * (a str) as progress, as it counts steps (pt_flight.c). Before start. */
int
pt_set_progress_region(pt_tracer *tracer, void *py_name)
{
    if (tracer->state != PT_STATE_NEW)
        return PT_ERR_STATE;
    PyGILState_STATE gil = PyGILState_Ensure();
    int ok = PyUnicode_Check((PyObject *)py_name);
    if (ok) {
        Py_INCREF((PyObject *)py_name);
        Py_CLEAR(tracer->progress_region);
        tracer->progress_region = (PyObject *)py_name;
    }
    PyGILState_Release(gil);
    return ok ? PT_OK : PT_ERR_ARG;
}

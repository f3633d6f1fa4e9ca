/* pt_keys.c - the key table: what each recorded key stands for (a code object,
 * a built-in, a (C function, self) pair), asked once per new key of the filters
 * and of the torch watcher (tags). */
#include "pt_record_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <errno.h>
#include <signal.h>
#include <time.h>

/* ======================================================================== */
/* Key table                                                                */
/* ======================================================================== */

static int
pt_key_table_grow(pt_tracer *tracer)
{
    uint32_t new_mask = tracer->slot_mask * 2 + 1;
    pt_key_slot *slots = calloc((size_t)new_mask + 1, sizeof(pt_key_slot));
    if (!slots)
        return PT_ERR_NOMEM;
    for (uint32_t i = 0; i <= tracer->slot_mask; i++) {
        pt_key_slot *old = &tracer->slots[i];
        if (!old->id)
            continue;
        uint32_t j = pt_key_hash(old->a, old->b) & new_mask;
        while (slots[j].id)
            j = (j + 1) & new_mask;
        slots[j] = *old;
    }
    free(tracer->slots);
    tracer->slots = slots;
    tracer->slot_mask = new_mask;
    return PT_OK;
}

/* Keeps the table at most half full, counting keys and owner-is-self marks. */
static int
pt_key_make_room(pt_tracer *tracer)
{
    if ((tracer->slots_used + 1) * 2 <= tracer->slot_mask + 1)
        return PT_OK;
    return pt_key_table_grow(tracer);
}

/* Stores (a, b) -> id in the first free slot of its probe sequence. */
static void
pt_key_place(pt_tracer *tracer, const void *a, const void *b, uint32_t id)
{
    uint32_t j = pt_key_hash(a, b) & tracer->slot_mask;
    while (tracer->slots[j].id)
        j = (j + 1) & tracer->slot_mask;
    tracer->slots[j].a = a;
    tracer->slots[j].b = b;
    tracer->slots[j].id = id;
    tracer->slots_used++;
}

/* Cold path: a key seen for the first time. Takes ownership of source (a new
 * reference, or NULL after a failure, which is recorded as the sticky error). */
static uint32_t
pt_key_insert(pt_tracer *tracer, const void *a, const void *b, PyObject *source)
{
    if (!source) {
        if (!tracer->hot_error) {
            tracer->hot_error = PT_ERR_PYTHON;
            pt_set_error_from_python(tracer, "naming a traced function");
        }
        PyErr_Clear();
        return 0;
    }
    if (tracer->n_keys >= PT_MAX_KEYS - 1) {
        Py_DECREF(source);
        if (!tracer->hot_error) {
            tracer->hot_error = PT_ERR_NOMEM;
            pt_set_error(tracer, "more than 2^29 distinct functions");
        }
        return 0;
    }
    if (pt_key_make_room(tracer) != PT_OK)
        goto nomem;
    if (tracer->n_keys == tracer->sources_cap) {
        uint32_t cap = tracer->sources_cap * 2;
        PyObject **sources = realloc(tracer->sources, cap * sizeof(PyObject *));
        if (!sources)
            goto nomem;
        memset(sources + tracer->sources_cap, 0,
               (cap - tracer->sources_cap) * sizeof(PyObject *));
        tracer->sources = sources;
        uint8_t *key_flags = realloc(tracer->key_flags, cap);
        if (!key_flags)
            goto nomem;     /* sources grew already; harmless */
        memset(key_flags + tracer->sources_cap, 0, cap - tracer->sources_cap);
        tracer->key_flags = key_flags;
        tracer->sources_cap = cap;
    }
    uint32_t id = tracer->n_keys++;
    tracer->sources[id] = source;
    pt_key_place(tracer, a, b, id);
    return id;

nomem:
    Py_DECREF(source);
    if (!tracer->hot_error) {
        tracer->hot_error = PT_ERR_NOMEM;
        pt_set_error(tracer, "out of memory for the function table");
    }
    return 0;
}

/* Cold path of a new code object: asks the watcher whether its calls get tagged. */
static void
pt_classify_code(pt_tracer *tracer, PyObject *code, uint32_t id)
{
    static PyObject *co_name;           /* "co_name", made once (the GIL held) */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (!co_name)
        co_name = PyUnicode_InternFromString("co_name");
    PyObject *name = co_name ? PyObject_GetAttr(code, co_name) : NULL;
    int watched = name ? PySet_Contains(tracer->watch_names, name) : -1;
    Py_XDECREF(name);
    if (watched > 0) {
        PyObject *result = PyObject_CallFunctionObjArgs(tracer->watch_classify, code, NULL);
        long flags = result ? PyLong_AsLong(result) : -1;
        Py_XDECREF(result);
        if (flags > 0)
            tracer->key_flags[id] |= PT_KEYF_TAG;
        watched = flags < 0 && PyErr_Occurred() ? -1 : 0;
    }
    if (watched < 0 && !tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error_from_python(tracer, "classifying a code object");
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

/* Cold path of a new code object: asks the include/exclude filter about it. */
static void
pt_filter_code(pt_tracer *tracer, PyObject *code, uint32_t id)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *result = PyObject_CallFunctionObjArgs(tracer->code_filter, code, NULL);
    int skip = result ? PyObject_IsTrue(result) : -1;
    Py_XDECREF(result);
    /* Code the watcher names (an nn.Module call, an optimizer step, a torch
     * region) stays, with the name; what it calls is filtered as usual. The
     * import machinery's entry stays too: skip_imports needs its calls seen. */
    if (skip > 0)
        tracer->key_flags[id] |= tracer->key_flags[id] & (PT_KEYF_TAG | PT_KEYF_IMPORT)
            ? PT_KEYF_NAMED : PT_KEYF_SKIP;
    else if (skip < 0 && !tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error_from_python(tracer, "filtering a code object");
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
}

int
pt_set_filters(pt_tracer *tracer, uint32_t max_depth, void *py_skip)
{
    if (tracer->state != PT_STATE_NEW) {
        pt_set_error(tracer, "filters are set before start");
        return PT_ERR_STATE;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    tracer->max_depth = max_depth;
    if (py_skip) {
        Py_INCREF((PyObject *)py_skip);
        Py_CLEAR(tracer->code_filter);
        tracer->code_filter = (PyObject *)py_skip;
    }
    PyGILState_Release(gil);
    return PT_OK;
}

int
pt_set_uncounted(pt_tracer *tracer, void *py_code)
{
    if (tracer->state != PT_STATE_NEW) {
        pt_set_error(tracer, "uncounted code is set before start");
        return PT_ERR_STATE;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    uint32_t key = pt_key_for_code(tracer, (PyObject *)py_code);
    if (key)
        tracer->key_flags[key] |= PT_KEYF_UNCOUNTED;
    PyGILState_Release(gil);
    if (!key) {
        pt_set_error(tracer, "out of memory for a code key");
        return PT_ERR_NOMEM;
    }
    return PT_OK;
}

int
pt_set_import_entry(pt_tracer *tracer, void *py_code)
{
    if (tracer->state != PT_STATE_NEW) {
        pt_set_error(tracer, "skip_imports is set before start");
        return PT_ERR_STATE;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    uint32_t key = pt_key_for_code(tracer, (PyObject *)py_code);
    if (key) {
        /* never left out by the filters: its calls open the suppressed stretch */
        if (tracer->key_flags[key] & PT_KEYF_SKIP)
            tracer->key_flags[key] = (uint8_t)((tracer->key_flags[key] & ~PT_KEYF_SKIP) |
                                               PT_KEYF_NAMED);
        tracer->key_flags[key] |= PT_KEYF_IMPORT;
        /* the depth check is what looks at the flag: on, with no limit */
        if (!tracer->max_depth)
            tracer->max_depth = UINT32_MAX;
    }
    PyGILState_Release(gil);
    if (!key) {
        pt_set_error(tracer, "out of memory for a code key");
        return PT_ERR_NOMEM;
    }
    return PT_OK;
}

uint32_t
pt_key_find(pt_tracer *tracer, const void *a, const void *b)
{
    return pt_key_lookup(tracer, a, b);
}

uint32_t
pt_key_add(pt_tracer *tracer, const void *a, const void *b, PyObject *source)
{
    return pt_key_insert(tracer, a, b, source);
}

static void pt_ask_about_code(pt_tracer *tracer, uint32_t id);

/* Appends text (n bytes, tabs and newlines made spaces) to source_text. */
static int
pt_source_append(pt_tracer *tracer, const char *text, size_t n, char end)
{
    if (tracer->source_len + n + 1 > tracer->source_cap) {
        size_t cap = tracer->source_cap ? tracer->source_cap : 4096;
        while (cap < tracer->source_len + n + 1)
            cap *= 2;
        char *grown = realloc(tracer->source_text, cap);
        if (!grown)
            return 0;
        tracer->source_text = grown;
        tracer->source_cap = cap;
    }
    char *out = tracer->source_text + tracer->source_len;
    for (size_t i = 0; i < n; i++)
        out[i] = text[i] == '\t' || text[i] == '\n' || text[i] == '\r' ? ' ' : text[i];
    out[n] = end;
    tracer->source_len += n + 1;
    return 1;
}

static int
pt_source_append_str(pt_tracer *tracer, PyObject *code, const char *attribute, char end)
{
    PyObject *value = PyObject_GetAttrString(code, attribute);
    PyObject *text = value ? PyObject_Str(value) : NULL;
    PyObject *utf8 = text ? PyUnicode_AsEncodedString(text, "utf-8", "replace") : NULL;
    char *bytes;
    Py_ssize_t n;
    int ok = utf8 && PyBytes_AsStringAndSize(utf8, &bytes, &n) == 0 &&
             pt_source_append(tracer, bytes, (size_t)n, end);
    Py_XDECREF(utf8);
    Py_XDECREF(text);
    Py_XDECREF(value);
    return ok;
}

/* The flight recorder: a code key's file, line and name, for a dump C writes
 * when Python cannot run (pt_flight.c). Once per code object; its cost is in
 * docs/PERFORMANCE.md. */
static void
pt_note_source(pt_tracer *tracer, uint32_t id, PyObject *code)
{
    char digits[16];
    int n = snprintf(digits, sizeof digits, "%u", id);
    size_t mark = tracer->source_len;
    if (!(pt_source_append(tracer, digits, (size_t)n, '\t') &&
          pt_source_append_str(tracer, code, "co_filename", '\t') &&
          pt_source_append_str(tracer, code, "co_firstlineno", '\t') &&
          pt_source_append_str(tracer, code, "co_name", '\n')))
        tracer->source_len = mark;      /* a line whole, or none */
    PyErr_Clear();
}

/* The flight recorder: a built-in key's name, as _names.builtin_name makes it
 * from the source (owner, name, keepalive): "id<TAB>name" lines. */
static void
pt_note_builtin(pt_tracer *tracer, uint32_t id, PyObject *source)
{
    PyObject *owner = PyTuple_GetItem(source, 0), *name = PyTuple_GetItem(source, 1);
    PyObject *full = NULL;
    if (!owner || !name || !PyUnicode_Check(name)) {
        PyErr_Clear();
        return;
    }
    if (owner == Py_None) {
        Py_INCREF(name);
        full = name;
    } else if (PyUnicode_Check(owner)) {
        full = PyUnicode_FromFormat("%U.%U", owner, name);
    } else if (PyModule_Check(owner)) {
        PyObject *module = PyObject_GetAttrString(owner, "__name__");
        if (module && PyUnicode_Check(module))
            full = PyUnicode_FromFormat("%U.%U", module, name);
        Py_XDECREF(module);
    } else {
        PyObject *module = PyObject_GetAttrString(owner, "__module__");
        if (!module)
            PyErr_Clear();
        PyObject *qualname = PyObject_GetAttrString(owner, "__qualname__");
        if (!qualname) {
            PyErr_Clear();
            qualname = PyObject_GetAttrString(owner, "__name__");
        }
        if (qualname && PyUnicode_Check(qualname)) {
            if (!module || !PyUnicode_Check(module) ||
                PyUnicode_CompareWithASCIIString(module, "builtins") == 0)
                full = PyUnicode_FromFormat("%U.%U", qualname, name);
            else
                full = PyUnicode_FromFormat("%U.%U.%U", module, qualname, name);
        }
        Py_XDECREF(module);
        Py_XDECREF(qualname);
    }
    PyObject *utf8 = full ? PyUnicode_AsEncodedString(full, "utf-8", "replace") : NULL;
    char digits[16], *bytes;
    Py_ssize_t n;
    int length = snprintf(digits, sizeof digits, "%u", id);
    size_t mark = tracer->source_len;
    if (!(utf8 && PyBytes_AsStringAndSize(utf8, &bytes, &n) == 0 &&
          pt_source_append(tracer, digits, (size_t)length, '\t') &&
          pt_source_append(tracer, bytes, (size_t)n, '\n')))
        tracer->source_len = mark;
    Py_XDECREF(utf8);
    Py_XDECREF(full);
    PyErr_Clear();
}

int
pt_set_note_sources(pt_tracer *tracer)
{
    if (tracer->state != PT_STATE_NEW)
        return PT_ERR_STATE;
    tracer->note_sources = 1;
    return PT_OK;
}

/* The cold half of pt_key_for_code (pt_internal.h): a code object seen first. */
uint32_t
pt_key_for_new_code(pt_tracer *tracer, PyObject *code)
{
    uint32_t id;
    Py_INCREF(code);   /* held until the tracer is freed, so the address never aliases */
    id = pt_key_insert(tracer, code, NULL, code);
    if (id && tracer->note_sources)
        pt_note_source(tracer, id, code);
    if (id && (tracer->watch_names || tracer->code_filter || tracer->args_match)) {
        if (tracer->classify_from)
            return id;     /* pt_start is walking threads: no Python code may run yet */
        int was_running = tracer->state == PT_STATE_RUNNING;
        pt_python_enter(tracer);
        pt_ask_about_code(tracer, id);
        /* The Python code asked may let other threads run, and one may stop the
         * tracer (and drop its trace): the hook asking must then record nothing
         * (after stop_ticks), and touch nothing once it is gone. */
        int stopped = was_running && tracer->state != PT_STATE_RUNNING;
        if (pt_python_leave(tracer) || stopped)
            return 0;
    }
    return id;
}

/* Runs the watcher's, the filter's and log_args' Python callbacks about a new
 * code key. */
static void
pt_ask_about_code(pt_tracer *tracer, uint32_t id)
{
    PyObject *code = tracer->sources[id];
    if (tracer->watch_names)
        pt_classify_code(tracer, code, id);
    if (tracer->code_filter)
        pt_filter_code(tracer, code, id);
    if (tracer->args_match)
        pt_match_logged_code(tracer, code, id);
}

void
pt_defer_questions(pt_tracer *tracer)
{
    tracer->classify_from = tracer->n_keys;
}

/* The caller holds the tracer against being freed: start() its session, a
 * thread attaching its pt_python_enter. */
void
pt_ask_deferred_questions(pt_tracer *tracer)
{
    uint32_t first = tracer->classify_from;
    tracer->classify_from = 0;
    if (!first || !(tracer->watch_names || tracer->code_filter || tracer->args_match))
        return;
    for (uint32_t id = first; id < tracer->n_keys; id++)
        if (tracer->sources[id] && !PyTuple_Check(tracer->sources[id]) &&
            !PyUnicode_Check(tracer->sources[id]))
            pt_ask_about_code(tracer, id);
}

int
pt_key_flags(pt_tracer *tracer, uint8_t *out, uint32_t n)
{
    /* under the GIL: while tracing (a followed process's spill) another thread
     * may be adding keys, which can move the table */
    PyGILState_STATE gil = PyGILState_Ensure();
    if (n > tracer->n_keys)
        n = tracer->n_keys;
    memcpy(out, tracer->key_flags, n);
    PyGILState_Release(gil);
    return PT_OK;
}

/* Asks the watcher for the tag of the call just recorded (its frame is current).
 * The hook returns right after: the tracer may be gone (pt_python_leave). */
void
pt_tag_call(pt_tracer *tracer, pt_thread *thread, PyFrameObject *frame)
{
    if (!frame)
        return;
    pt_python_enter(tracer);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *result = PyObject_CallFunctionObjArgs(tracer->watch_tag, (PyObject *)frame, NULL);
    long tag = result ? PyLong_AsLong(result) : -1;
    Py_XDECREF(result);
    if (tag > 0) {
        if (tracer->state == PT_STATE_RUNNING &&     /* not stopped while the watcher ran */
            pt_aux_fits(tracer, PT_AUX_TAG, tag))
            pt_append(tracer, thread, 0, pt_aux_word(PT_AUX_TAG, (uint32_t)tag));
    } else if (tag < 0 && PyErr_Occurred() && !tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error_from_python(tracer, "tagging a call");
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    (void)pt_python_leave(tracer);
}

int
pt_set_watch(pt_tracer *tracer, void *py_tuple)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *spec = (PyObject *)py_tuple;
    PyObject *names, *classify, *tag;
    if (tracer->state != PT_STATE_NEW) {
        pt_set_error(tracer, "pt_set_watch must come before start");
        rc = PT_ERR_STATE;
    } else if (!PyArg_ParseTuple(spec, "OOO", &names, &classify, &tag) ||
               !PyAnySet_Check(names) || !PyCallable_Check(classify) || !PyCallable_Check(tag)) {
        PyErr_Clear();
        pt_set_error(tracer, "pt_set_watch needs (set, callable, callable)");
        rc = PT_ERR_ARG;
    } else {
        Py_INCREF(names);
        Py_INCREF(classify);
        Py_INCREF(tag);
        Py_CLEAR(tracer->watch_names);
        Py_CLEAR(tracer->watch_classify);
        Py_CLEAR(tracer->watch_tag);
        tracer->watch_names = names;
        tracer->watch_classify = classify;
        tracer->watch_tag = tag;
    }
    PyGILState_Release(gil);
    return rc;
}

/* Whether a text names something private: it or a dotted part of it starts
 * with "_" (torch._C.TensorBase, _frozen_importlib._List). */
static int
pt_is_private_text(PyObject *text)
{
    if (!text || !PyUnicode_Check(text))
        return 0;
    PyObject *dot_under = PyUnicode_FromString("._");
    int private = PyUnicode_GetLength(text) > 0 && PyUnicode_ReadChar(text, 0) == '_';
    if (!private && dot_under)
        private = PyUnicode_Find(text, dot_under, 0, PyUnicode_GetLength(text), 1) >= 0;
    Py_XDECREF(dot_under);
    PyErr_Clear();
    return private;
}

/* Whether cls is private by its module or its qualified name: a method it
 * defines is then named after the public type it was called on (torch.Tensor.sum,
 * not torch._C.TensorBase.sum). */
static int
pt_is_private_class(PyObject *cls)
{
    PyObject *module = PyObject_GetAttrString(cls, "__module__");
    PyObject *qualname = PyObject_GetAttrString(cls, "__qualname__");
    PyErr_Clear();
    int private = pt_is_private_text(module) || pt_is_private_text(qualname);
    Py_XDECREF(module);
    Py_XDECREF(qualname);
    return private;
}

/* Borrowed: the first class of type's MRO whose own dictionary holds name as a
 * built-in method (a method or slot wrapper descriptor) and is no private class,
 * else type. Looks at the classes' dictionaries only, so no user code runs. */
static PyObject *
pt_defining_class(PyTypeObject *type, PyObject *name)
{
    PyObject *found = (PyObject *)type;
    PyObject *mro = PyObject_GetAttrString((PyObject *)type, "__mro__");
    if (mro && PyTuple_Check(mro)) {
        for (Py_ssize_t i = 0; i < PyTuple_Size(mro); i++) {
            PyObject *cls = PyTuple_GetItem(mro, i);
            PyObject *dict = cls ? PyObject_GetAttrString(cls, "__dict__") : NULL;
            PyObject *entry = dict ? PyObject_GetItem(dict, name) : NULL;
            Py_XDECREF(dict);
            if (!entry) {
                PyErr_Clear();
                continue;
            }
            int builtin = Py_TYPE(entry) == &PyMethodDescr_Type ||
                          Py_TYPE(entry) == &PyWrapperDescr_Type;
            Py_DECREF(entry);
            if (builtin && !pt_is_private_class(cls))
                found = cls;
            break;          /* the first class defining name decides */
        }
    }
    PyErr_Clear();
    Py_XDECREF(mro);        /* (the MRO's classes outlive it: the type holds them) */
    return found;
}

/* Returns a new reference: the owner a built-in is named after (module, type or
 * None): for a method of an ordinary object, the class of type(self)'s MRO that
 * defines it (list.append for a list subclass's, as cProfile names it), else
 * type(self). */
static PyObject *
pt_builtin_owner(PyObject *self, PyObject *name)
{
    PyObject *owner;
    if (!self)
        owner = Py_None;
    else if (PyModule_Check(self) || PyType_Check(self))
        owner = self;
    else
        owner = pt_defining_class(Py_TYPE(self), name);
    Py_INCREF(owner);
    return owner;
}

/* Returns a new reference: the (owner, name, keepalive) tuple naming a built-in.
 * owner is NULL for pt_builtin_owner(self), else a new reference it consumes. */
static PyObject *
pt_builtin_source(PyObject *callable, PyObject *self, PyObject *owner, PyObject *keepalive)
{
    PyObject *name = PyObject_GetAttrString(callable, "__name__");
    if (!name) {
        Py_XDECREF(owner);
        return NULL;
    }
    if (!owner)
        owner = pt_builtin_owner(self, name);
    PyObject *source = PyTuple_Pack(3, owner, name, keepalive ? keepalive : Py_None);
    Py_DECREF(owner);
    Py_DECREF(name);
    return source;
}

/* Marks (namespaces: pt_internal.h) record what the slow path learnt about an
 * (implementation, type of self) pair: owner-is-self marks, whose calls have a
 * `self` that is itself a module or a type (a metaclass's instance), so their key
 * uses self rather than its type; record marks, whose calls are told apart by
 * self (pt_record_module). */
static void
pt_key_mark(pt_tracer *tracer, const void *a, const void *mark, uint32_t id)
{
    if (pt_key_make_room(tracer) == PT_OK)    /* else we only take the slow path again */
        pt_key_place(tracer, a, mark, id);
}

/* Whether `callable`, a PyCFunction bound to `self` (neither module nor type), is
 * an ordinary bound method: the method descriptor type(self) holds under the
 * callable's name, bound to self, is equal to it (same self, same C function).
 * Looks only at the classes' dictionaries, so no user code runs. 1, 0, or -1
 * with an exception set. pytrace_cffi/_names.py applies the same rule. */
static int
pt_is_bound_method(PyObject *callable, PyObject *self, PyObject *name)
{
    PyObject *type = (PyObject *)Py_TYPE(self);
    PyObject *mro = PyObject_GetAttrString(type, "__mro__");
    if (!mro)
        return -1;
    PyObject *attr = NULL;
    Py_ssize_t n = PyTuple_Check(mro) ? PyTuple_Size(mro) : 0;
    for (Py_ssize_t i = 0; i < n && !attr; i++) {
        PyObject *dict = PyObject_GetAttrString(PyTuple_GetItem(mro, i), "__dict__");
        if (!dict) {
            Py_DECREF(mro);
            return -1;
        }
        attr = PyObject_GetItem(dict, name);
        Py_DECREF(dict);
        if (!attr) {
            if (!PyErr_ExceptionMatches(PyExc_KeyError)) {
                Py_DECREF(mro);
                return -1;
            }
            PyErr_Clear();
        }
    }
    Py_DECREF(mro);
    if (!attr)
        return 0;
    int result = 0;
    if (Py_TYPE(attr) == &PyMethodDescr_Type) {
        PyObject *bound = PyObject_CallMethod(attr, "__get__", "OO", self, type);
        result = bound ? PyObject_RichCompareBool(bound, callable, Py_EQ) : -1;
        Py_XDECREF(bound);
    }
    Py_DECREF(attr);
    return result;
}

/* Returns a new reference: the str `callable.__module__` when callable is bound to
 * a "function record" self (not an ordinary bound method of type(self), and
 * naming a module), else NULL; errors count as "no" (today's naming). */
static PyObject *
pt_record_module(PyObject *callable, PyObject *self)
{
    PyObject *module = NULL;
    PyObject *name = PyObject_GetAttrString(callable, "__name__");
    if (name && PyUnicode_Check(name) && pt_is_bound_method(callable, self, name) == 0) {
        module = PyObject_GetAttrString(callable, "__module__");
        if (module && !PyUnicode_Check(module))
            Py_CLEAR(module);
    }
    Py_XDECREF(name);
    PyErr_Clear();
    return module;
}

/* Inserts the key (a, b) of a built-in, named by pt_builtin_source. */
static uint32_t
pt_key_insert_builtin(pt_tracer *tracer, const void *a, const void *b, PyObject *callable,
                      PyObject *self, PyObject *owner, PyObject *keepalive)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *source = pt_builtin_source(callable, self, owner, keepalive);
    uint32_t id = pt_key_insert(tracer, a, b, source);
    if (id && pt_is_region_enter(a))
        tracer->key_flags[id] |= PT_KEYF_UNRECORDED;
    if (id && source && tracer->note_sources)
        pt_note_builtin(tracer, id, source);
    PyErr_Restore(type, value, tb);
    return id;
}

/* The key of a PyCFunction whose self is a module (or NULL), not found by the
 * fast path: the function object itself, held by the source, so that several
 * functions of one module sharing one C function keep their names. A method of
 * the module's type (mod.__dir__) is bound anew on each access, which would make
 * a key per call: it is keyed by (implementation, module) instead, and a record
 * mark on (implementation, type of the module) says so to later calls. */
static uint32_t
pt_key_for_module_function(pt_tracer *tracer, PyObject *callable, PyObject *self)
{
    if (self) {
        const void *impl = pt_cfunction_def(callable);
        const void *mark = pt_record_mark(Py_TYPE(self));
        int bound = pt_key_lookup(tracer, impl, mark) != 0;
        if (!bound) {
            uint32_t id = pt_key_lookup(tracer, callable, PT_CALLABLE_KEY);
            if (id)
                return id;             /* a module subclass's instance: the fast
                                          path looked for another key */
            PyObject *type, *value, *tb;
            PyErr_Fetch(&type, &value, &tb);
            PyObject *name = PyObject_GetAttrString(callable, "__name__");
            bound = name && PyUnicode_Check(name) &&
                    pt_is_bound_method(callable, self, name) > 0;
            Py_XDECREF(name);
            PyErr_Clear();
            PyErr_Restore(type, value, tb);
            if (bound)
                pt_key_mark(tracer, impl, mark, PT_SELF_IS_RECORD);
        }
        if (bound) {
            uint32_t id = pt_key_lookup(tracer, impl, self);
            return id ? id : pt_key_insert_builtin(tracer, impl, self, callable, self, NULL,
                                                   NULL);
        }
    }
    return pt_key_insert_builtin(tracer, callable, PT_CALLABLE_KEY, callable, self, NULL,
                                 callable);
}

/* The cold half of pt_key_for_builtin (pt_internal.h), which has found no key
 * for implementation `a` called on `self` (or, for a function of a module, for
 * the callable itself): first sights, and every call whose key the fast path
 * does not compute (function records, subclass instances of modules and types). */
static uint32_t
pt_key_for_builtin_named(pt_tracer *tracer, PyObject *callable, int is_function,
                         const void *a, PyObject *self)
{
    if (is_function && (!self || Py_TYPE(self) == &PyModule_Type))
        return pt_key_for_module_function(tracer, callable, self);

    PyTypeObject *self_type = Py_TYPE(self);
    const void *b;
    int record = 0;
    if (self_type == &PyType_Type || self_type == &PyModule_Type) {
        b = self;
    } else if (is_function && pt_key_lookup(tracer, a, pt_record_mark(self_type))) {
        b = self;
        record = 1;
    } else if (is_function && PyModule_Check(self)) {
        return pt_key_for_module_function(tracer, callable, self);
    } else if (pt_key_lookup(tracer, a, pt_owner_mark(self_type))) {
        b = self;
    } else if (PyModule_Check(self) || PyType_Check(self)) {
        pt_key_mark(tracer, a, pt_owner_mark(self_type), PT_OWNER_IS_SELF);
        b = self;
    } else {
        b = pt_instance_owner(self_type);
    }
    uint32_t id = pt_key_lookup(tracer, a, b);
    if (id)
        return id;

    PyObject *owner = NULL;            /* NULL: named after pt_builtin_owner(self) */
    if (is_function && b == pt_instance_owner(self_type)) {
        /* First sight of this implementation on this type: an ordinary bound
         * method, or one of many functions that share a dispatcher? Asked once:
         * the mark sends later calls of the second kind straight to their key. */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        owner = pt_record_module(callable, self);
        PyErr_Restore(type, value, tb);
        if (owner) {
            pt_key_mark(tracer, a, pt_record_mark(self_type), PT_SELF_IS_RECORD);
            b = self;
            record = 1;
            id = pt_key_lookup(tracer, a, b);   /* there when the mark found no room */
            if (id) {
                Py_DECREF(owner);
                return id;
            }
        }
    } else if (record) {
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        owner = pt_record_module(callable, self);
        PyErr_Restore(type, value, tb);
    }
    /* A record's key is its self, which the source holds; a method descriptor's
     * is the descriptor. */
    PyObject *keepalive = record ? self : is_function ? NULL : callable;
    return pt_key_insert_builtin(tracer, a, b, callable, self, owner, keepalive);
}

uint32_t
pt_key_for_builtin_slow(pt_tracer *tracer, PyObject *callable, int is_function,
                        const void *a, PyObject *self)
{
    /* Naming may run Python code (a descriptor's __get__, a __name__ property, a
     * metaclass's __mro__), which may let a thread stop the tracer (and drop its
     * trace): 0 then, and the hook records nothing (and touches nothing). */
    int was_running = tracer->state == PT_STATE_RUNNING;
    pt_python_enter(tracer);
    uint32_t id = pt_key_for_builtin_named(tracer, callable, is_function, a, self);
    int stopped = was_running && tracer->state != PT_STATE_RUNNING;
    return pt_python_leave(tracer) || stopped ? 0 : id;
}

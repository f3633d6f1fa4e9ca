/* shared_dispatch - a test extension whose callables share C functions, the way
 * binding generators and some C modules build them (tests/test_shared_dispatch.py
 * compiles it against the running interpreter):
 *
 *   f1, f2, f3     module functions, three PyMethodDefs on one C function
 *                  (self = the module);
 *   r1, r2, r3     pybind11 style: one C dispatcher, each function bound to its own
 *                  "function record" object (PyCFunction_NewEx, __module__ given);
 *   c1, c2, __sizeof__
 *                  the same with a PyCapsule per function (older pybind11); the
 *                  last is named like a method capsules have, but is not it;
 *   n1, n2         one C function, no self at all;
 *   Thing.ping, Thing.pong
 *                  ordinary methods, the control;
 *   Widget.m1, Widget.m2
 *                  pybind11 class methods: one C dispatcher (METH_O: the
 *                  instance comes as the argument), each function bound to its
 *                  own capsule and wrapped in an instancemethod in the class
 *                  dict, so widget.m1() calls a bound `method` object whose
 *                  __func__ is the PyCFunction; they return the instance.
 *
 * Every shared function returns its self (None when it has none).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *
shared_call(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (!self)
        Py_RETURN_NONE;
    Py_INCREF(self);
    return self;
}

static PyObject *
thing_ping(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString("ping");
}

static PyObject *
thing_pong(PyObject *self, PyObject *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString("pong");
}

static PyMethodDef module_methods[] = {
    {"f1", shared_call, METH_NOARGS, "shares its C function with f2 and f3"},
    {"f2", shared_call, METH_NOARGS, "shares its C function with f1 and f3"},
    {"f3", shared_call, METH_NOARGS, "shares its C function with f1 and f2"},
    {NULL, NULL, 0, NULL},
};

/* Like pybind11, one PyMethodDef per function, all with the same C function. */
static PyMethodDef record_defs[] = {
    {"r1", shared_call, METH_NOARGS, NULL},
    {"r2", shared_call, METH_NOARGS, NULL},
    {"r3", shared_call, METH_NOARGS, NULL},
    {"c1", shared_call, METH_NOARGS, NULL},
    {"c2", shared_call, METH_NOARGS, NULL},
    {"__sizeof__", shared_call, METH_NOARGS, NULL},
    {"n1", shared_call, METH_NOARGS, NULL},
    {"n2", shared_call, METH_NOARGS, NULL},
};

static PyObject *
method_call(PyObject *record, PyObject *instance)
{
    (void)record;
    Py_INCREF(instance);
    return instance;
}

static PyMethodDef widget_defs[] = {
    {"m1", method_call, METH_O, NULL},
    {"m2", method_call, METH_O, NULL},
};

static PyMethodDef thing_methods[] = {
    {"ping", thing_ping, METH_NOARGS, NULL},
    {"pong", thing_pong, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot thing_slots[] = {
    {Py_tp_methods, thing_methods},
    {0, NULL},
};

static PyType_Spec thing_spec = {
    "shared_dispatch.Thing", sizeof(PyObject), 0, Py_TPFLAGS_DEFAULT, thing_slots,
};

static PyType_Slot widget_slots[] = {
    {0, NULL},
};

static PyType_Spec widget_spec = {
    "shared_dispatch.Widget", sizeof(PyObject), 0, Py_TPFLAGS_DEFAULT, widget_slots,
};

static PyType_Slot record_slots[] = {
    {0, NULL},
};

static PyType_Spec record_spec = {
    "shared_dispatch.function_record", sizeof(PyObject), 0, Py_TPFLAGS_DEFAULT,
    record_slots,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "shared_dispatch", NULL, -1, module_methods,
    NULL, NULL, NULL, NULL,
};

/* Adds record_defs[index] to the module as a function bound to `self` (a new
 * reference, consumed; NULL: no self). */
static int
add_function(PyObject *module, PyObject *module_name, int index, PyObject *self)
{
    PyObject *function = PyCFunction_NewEx(&record_defs[index], self, module_name);
    Py_XDECREF(self);
    if (!function)
        return -1;
    int rc = PyModule_AddObject(module, record_defs[index].ml_name, function);
    if (rc < 0)
        Py_DECREF(function);
    return rc;
}

/* Sets widget_defs[index] on the class as pybind11 does a method: the function
 * bound to its own capsule, wrapped in an instancemethod. */
static int
add_method(PyObject *widget_type, PyObject *module_name, int index)
{
    PyObject *capsule = PyCapsule_New((void *)&widget_defs[index], "shared_dispatch.method",
                                      NULL);
    PyObject *function = capsule ? PyCFunction_NewEx(&widget_defs[index], capsule,
                                                     module_name) : NULL;
    PyObject *method = function ? PyInstanceMethod_New(function) : NULL;
    int rc = method ? PyObject_SetAttrString(widget_type, widget_defs[index].ml_name, method)
                    : -1;
    Py_XDECREF(method);
    Py_XDECREF(function);
    Py_XDECREF(capsule);
    return rc;
}

PyMODINIT_FUNC
PyInit_shared_dispatch(void)
{
    PyObject *module = PyModule_Create(&module_def);
    if (!module)
        return NULL;
    PyObject *module_name = PyUnicode_FromString("shared_dispatch");
    PyObject *record_type = PyType_FromSpec(&record_spec);
    PyObject *thing_type = PyType_FromSpec(&thing_spec);
    PyObject *widget_type = PyType_FromSpec(&widget_spec);
    if (!module_name || !record_type || !thing_type || !widget_type)
        goto fail;
    for (int i = 0; i < 2; i++)
        if (add_method(widget_type, module_name, i) < 0)
            goto fail;
    if (PyModule_AddObject(module, "Widget", widget_type) < 0)
        goto fail;
    widget_type = NULL;                 /* the module holds it now */
    for (int i = 0; i < 3; i++) {
        PyObject *record = PyObject_CallObject(record_type, NULL);
        if (!record || add_function(module, module_name, i, record) < 0)
            goto fail;
    }
    for (int i = 3; i < 6; i++) {
        PyObject *capsule = PyCapsule_New((void *)&record_defs[i], "shared_dispatch.record",
                                          NULL);
        if (!capsule || add_function(module, module_name, i, capsule) < 0)
            goto fail;
    }
    for (int i = 6; i < 8; i++)
        if (add_function(module, module_name, i, NULL) < 0)
            goto fail;
    Py_INCREF(thing_type);
    if (PyModule_AddObject(module, "Thing", thing_type) < 0) {
        Py_DECREF(thing_type);
        goto fail;
    }
    Py_DECREF(thing_type);
    Py_DECREF(record_type);
    Py_DECREF(module_name);
    return module;

fail:
    Py_XDECREF(widget_type);
    Py_XDECREF(thing_type);
    Py_XDECREF(record_type);
    Py_XDECREF(module_name);
    Py_DECREF(module);
    return NULL;
}

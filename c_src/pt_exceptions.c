/* pt_exceptions.c - log_exceptions: each exception event the hooks see becomes
 * an instant on its thread, described by Python (pytrace_cffi/_exceptions.py).
 *
 * Cold by construction: 3.12+ registers the RAISE, RERAISE and
 * EXCEPTION_HANDLED callbacks only with the option on; 3.9-3.11 installs the
 * profile hook's logging variant only then (pt_hooks.c). Each report costs one
 * Python call.
 */
#include "pt_record_internal.h"

int
pt_set_exception_hook(pt_tracer *tracer, void *py_hook)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *hook = (PyObject *)py_hook;
    if (tracer->state != PT_STATE_NEW) {
        pt_set_error(tracer, "log_exceptions is set before start");
        rc = PT_ERR_STATE;
    } else if (!PyCallable_Check(hook)) {
        pt_set_error(tracer, "pt_set_exception_hook needs a callable");
        rc = PT_ERR_ARG;
    } else {
        Py_INCREF(hook);
        Py_CLEAR(tracer->exception_hook);
        tracer->exception_hook = hook;
    }
    PyGILState_Release(gil);
    return rc;
}

void
pt_report_exception(pt_tracer *tracer, pt_thread *thread, int event, PyObject *place,
                    int offset, PyObject *detail, int chained, int64_t ticks)
{
    pt_python_enter(tracer);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *result = PyObject_CallFunction(tracer->exception_hook, "iOiOii", event, place,
                                             offset, detail ? detail : Py_None, thread->index,
                                             chained);
    if (!result) {
        if (!tracer->hot_error) {
            tracer->hot_error = PT_ERR_PYTHON;
            pt_set_error_from_python(tracer, "describing an exception");
        }
    } else if (PyTuple_Check(result) && PyTuple_Size(result) == 2 &&
               tracer->state == PT_STATE_RUNNING) {
        pt_mark_at(tracer, thread, "i", ticks, PyTuple_GetItem(result, 0),
                   PyTuple_GetItem(result, 1));
    }
    Py_XDECREF(result);
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    if (!pt_python_leave(tracer))
        thread->exception_mark = thread->cursor;
}

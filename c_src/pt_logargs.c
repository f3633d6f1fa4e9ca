/* pt_logargs.c - log_args: the arguments and return values of chosen functions.
 *
 * Which functions is decided once per code object, when its key is made
 * (pt_keys.c asks pt_match_logged_code): a match sets PT_KEYF_LOG_ARGS, which
 * sends its calls off the hooks' fast paths (any key flag does) to here. A
 * call of any other code pays nothing. Python (pytrace_cffi/_arglog.py) makes
 * the summaries: a dict per call, kept with record_function's args
 * (tracer->annotation_args) and named by an ARGS aux event right after the
 * call's, so that the call's slice carries it as its args in every export. The
 * return adds to the same dict, found through the thread's stack of open
 * logged calls.
 */
#include "pt_record_internal.h"

int
pt_set_arg_logging(pt_tracer *tracer, void *py_tuple)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *match, *on_call, *on_return;
    if (tracer->state != PT_STATE_NEW) {
        pt_set_error(tracer, "log_args is set before start");
        rc = PT_ERR_STATE;
    } else if (!PyArg_ParseTuple((PyObject *)py_tuple, "OOO", &match, &on_call, &on_return) ||
               !PyCallable_Check(match) || !PyCallable_Check(on_call) ||
               !PyCallable_Check(on_return)) {
        PyErr_Clear();
        pt_set_error(tracer, "pt_set_arg_logging needs (callable, callable, callable)");
        rc = PT_ERR_ARG;
    } else {
        Py_INCREF(match);
        Py_INCREF(on_call);
        Py_INCREF(on_return);
        Py_CLEAR(tracer->args_match);
        Py_CLEAR(tracer->args_call);
        Py_CLEAR(tracer->args_return);
        tracer->args_match = match;
        tracer->args_call = on_call;
        tracer->args_return = on_return;
    }
    PyGILState_Release(gil);
    return rc;
}

/* Python code failed (a bug of ours, or KeyboardInterrupt meanwhile): the
 * sticky error stop() raises. */
static void
pt_log_failed(pt_tracer *tracer, const char *what)
{
    if (!tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error_from_python(tracer, what);
    }
    PyErr_Clear();
}

void
pt_match_logged_code(pt_tracer *tracer, PyObject *code, uint32_t id)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *result = PyObject_CallFunctionObjArgs(tracer->args_match, code, NULL);
    int match = result ? PyObject_IsTrue(result) : -1;
    Py_XDECREF(result);
    if (match > 0)
        tracer->key_flags[id] |= PT_KEYF_LOG_ARGS;
    else if (match < 0)
        pt_log_failed(tracer, "matching log_args");
    PyErr_Restore(type, value, tb);
}

/* Pushes (key, index) on the thread's open logged calls; 0 without memory (the
 * call's return is then not logged). */
static int
pt_logged_push(pt_thread *thread, uint32_t key, uint32_t index)
{
    if (thread->n_logged == thread->cap_logged) {
        uint32_t cap = thread->cap_logged ? 2 * thread->cap_logged : 16;
        uint32_t *grown = realloc(thread->logged, (size_t)cap * 2 * sizeof *grown);
        if (!grown)
            return 0;
        thread->logged = grown;
        thread->cap_logged = cap;
    }
    thread->logged[2 * thread->n_logged] = key;
    thread->logged[2 * thread->n_logged + 1] = index;
    thread->n_logged++;
    return 1;
}

void
pt_log_call(pt_tracer *tracer, pt_thread *thread, uint32_t key, PyFrameObject *frame,
            int first_entry)
{
    if (!frame)
        return;
    pt_python_enter(tracer);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *args = PyObject_CallFunction(tracer->args_call, "Oi", (PyObject *)frame,
                                           first_entry);
    if (!args) {
        pt_log_failed(tracer, "summarizing a logged call's arguments");
    } else if (PyDict_Check(args) && tracer->state == PT_STATE_RUNNING) {
        if (!tracer->annotation_args)
            tracer->annotation_args = PyList_New(0);
        Py_ssize_t index = tracer->annotation_args ? PyList_Size(tracer->annotation_args) : -1;
        if (index >= 0 && pt_aux_fits(tracer, PT_AUX_ARGS, index) &&
            PyList_Append(tracer->annotation_args, args) == 0) {
            /* the args event names the call just recorded (no event of this
             * thread came in between: the hooks do not run inside this one) */
            if (pt_append(tracer, thread, 0, pt_aux_word(PT_AUX_ARGS, (uint32_t)index)) >= 0)
                (void)pt_logged_push(thread, key, (uint32_t)index);
        } else {
            PyErr_Clear();      /* the call stays, without its args */
        }
    }
    Py_XDECREF(args);
    PyErr_Restore(type, value, tb);
    (void)pt_python_leave(tracer);
}

int
pt_log_return(pt_tracer *tracer, pt_thread *thread, uint32_t key, PyObject *value, int raised)
{
    /* The innermost open logged call is this one, or (its key differs, or none
     * is open) this frame's call was not logged: a frame running at start, or a
     * call whose summary failed. */
    if (!thread->n_logged || thread->logged[2 * (thread->n_logged - 1)] != key)
        return 0;
    uint32_t index = thread->logged[2 * (thread->n_logged - 1) + 1];
    thread->n_logged--;
    PyObject *args = tracer->annotation_args
        ? PyList_GetItem(tracer->annotation_args, (Py_ssize_t)index) : NULL;    /* borrowed */
    if (!args) {
        PyErr_Clear();
        return 0;
    }
    Py_INCREF(args);
    pt_python_enter(tracer);
    PyObject *type, *error, *tb;
    PyErr_Fetch(&type, &error, &tb);
    PyObject *result = PyObject_CallFunction(tracer->args_return, "OOi", args,
                                             value ? value : Py_None, raised);
    if (!result)
        pt_log_failed(tracer, "summarizing a logged call's return value");
    Py_XDECREF(result);
    Py_DECREF(args);
    PyErr_Restore(type, error, tb);
    int stopped = tracer->state != PT_STATE_RUNNING;
    return pt_python_leave(tracer) || stopped;
}

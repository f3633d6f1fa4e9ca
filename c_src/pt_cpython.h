/* pt_cpython.h - the CPython surface pytrace_cffi's C core compiles against.
 *
 * Everything is built with Py_LIMITED_API=0x03090000 (set by build_ffi.py) so one
 * abi3 module loads on CPython 3.9-3.15. The few functions below are public,
 * exported by libpython on every one of those versions, but the limited API does
 * not declare them: they are profiler plumbing (installing a profile function,
 * walking frames and thread states). We declare their prototypes here, and only
 * here, exactly as the full API spells them. One struct field is read (see
 * pt_cfunction_def); frames, code objects and thread states stay opaque pointers,
 * but for the flight recorder's dump clone, which reads two fields of them by
 * offset on 3.11+ (pt_frame_layout_of).
 */
#ifndef PT_CPYTHON_H
#define PT_CPYTHON_H

#include <Python.h>

/* Returns a new reference to None. Python 3.12's headers spell Py_RETURN_NONE
 * `return Py_None` whatever Py_LIMITED_API says (None is immortal from 3.12 on),
 * so a module built with them took a reference it never had on 3.9-3.11, each
 * call, until None was deallocated. Code that runs on 3.9-3.11 returns None with
 * this. Py_IncRef, not Py_INCREF: 3.9's limited API makes Py_INCREF add to
 * ob_refcnt in place, which 3.12 and 3.13 take back at the caller's decref (an
 * immortal's count sits at 2**32 - 1, one more reads as mortal), but 3.14 starts
 * immortals at 3 << 30 and never decrements them: each call left None's count one
 * higher. Py_IncRef is the interpreter's own, which knows immortals. */
#define PT_RETURN_NONE do { Py_IncRef(Py_None); return Py_None; } while (0)

/* Returns None from a sys.monitoring callback: these run on 3.12+ only, where
 * None is immortal, so without a reference, as 3.12's headers' Py_RETURN_NONE
 * does (see PT_RETURN_NONE for why Py_INCREF would drift on 3.14). */
#define PT_MONITOR_RETURN_NONE return Py_None

/* A built-in function object's method definition (its PyMethodDef: name, C
 * function, flags), the one field we read: PyCFunctionObject (and PyCMethodObject,
 * which extends it) holds it right after the object header, m_ml, on 3.9-3.15
 * (Include/cpython/methodobject.h; abi3 builds have no free-threaded header). Two
 * methods may share one C function (_thread.lock's acquire and __enter__ up to
 * 3.11): PyCFunction_GetFunction would merge them under one key, their
 * definitions do not. A plain load, where PyCFunction_GetFunction is a call. */
typedef struct {
    PyObject_HEAD
    PyMethodDef *m_ml;
} pt_cfunction_head;

/* 1 when m_ml was found where pt_cfunction_head says, on builtins.len (its name
 * and C function), checked once by pt_start (pt_check_cfunction_layout); else a
 * later CPython moved it, and built-ins are keyed by their C function as before. */
extern int pt_cfunction_def_ok;
void pt_check_cfunction_layout(void);

static inline const PyMethodDef *
pt_cfunction_m_ml(PyObject *function)
{
    return ((const pt_cfunction_head *)(const void *)function)->m_ml;
}

static inline const void *
pt_cfunction_def(PyObject *function)
{
    if (pt_cfunction_def_ok)
        return pt_cfunction_m_ml(function);
    return (const void *)PyCFunction_GetFunction(function);
}

/* ------------------------------------------------------------------------ */
/* Profile hook (Include/cpython/pystate.h, Include/cpython/ceval.h)         */
/* ------------------------------------------------------------------------ */

typedef int (*pt_tracefunc)(PyObject *obj, PyFrameObject *frame, int what,
                            PyObject *arg);

/* Installs func/obj as the current thread's profile function (3.9+). */
PyAPI_FUNC(void) PyEval_SetProfile(pt_tracefunc func, PyObject *obj);
/* The frame type (Include/pyframe.h): what a Python profile function gets. */
PyAPI_DATA(PyTypeObject) PyFrame_Type;

/* Installs func/obj as tstate's profile function, from the calling thread: the
 * "sys.setprofile" audit event (which runs Python audit hooks) is raised in the
 * caller's own context. PyEval_SetProfile under another thread's state swapped in
 * would run those hooks on that thread's frame stack while it is suspended, which
 * corrupts it (a followed process's audit hook crashed start() so). Exported by
 * libpython 3.9-3.13 (Include/cpython/ceval.h); weak all the same, as the full API
 * marks it private: only the PyEval_SetProfile backend (3.9-3.11) calls it. */
PyAPI_FUNC(int) _PyEval_SetProfile(PyThreadState *tstate, pt_tracefunc func,
                                   PyObject *obj) __attribute__((weak));

/* Adds a C audit hook (Include/cpython/sysmodule.h, 3.8+). A C hook runs no
 * Python code unless it calls some itself: see pt_audit_guard (pt_signals.c). */
typedef int (*pt_audit_hook_func)(const char *event, PyObject *args, void *data);
PyAPI_FUNC(int) PySys_AddAuditHook(pt_audit_hook_func hook, void *data);

/* The `what` codes passed to a profile function (stable since Python 2). */
#define PT_TRACE_CALL 0
#define PT_TRACE_EXCEPTION 1
#define PT_TRACE_RETURN 3
#define PT_TRACE_C_CALL 4
#define PT_TRACE_C_EXCEPTION 5
#define PT_TRACE_C_RETURN 6

/* ------------------------------------------------------------------------ */
/* Frames and thread states (Include/cpython/frameobject.h, pystate.h)       */
/* ------------------------------------------------------------------------ */

/* Returns a new reference to the calling frame, or NULL (3.9+). */
PyAPI_FUNC(PyFrameObject *) PyFrame_GetBack(PyFrameObject *frame);

/* Thread-state iteration, used to install the hook on threads that already run
 * and to seed their active frames at start (3.9+). */
PyAPI_FUNC(PyThreadState *) PyInterpreterState_ThreadHead(PyInterpreterState *interp);
PyAPI_FUNC(PyThreadState *) PyThreadState_Next(PyThreadState *tstate);

/* Byte offset of a frame's last instruction: 3.11+, so declared weak and looked
 * at only when present (3.9 and 3.10 compute the line at capture instead). */
PyAPI_FUNC(int) PyFrame_GetLasti(PyFrameObject *frame) __attribute__((weak));

/* The source line of a byte offset in a code object (3.9+). */
PyAPI_FUNC(int) PyCode_Addr2Line(PyObject *code, int byte_offset);

/* The type of code objects (3.9+): a frame's code is told from the None an
 * entry frame of the C stack holds (3.13+) by it. */
PyAPI_DATA(PyTypeObject) PyCode_Type;

/* The code object (a new reference) and current line of an interpreter frame
 * (Include/cpython/pyframe.h, 3.12+; weak: absent before). Both only read the
 * frame: a flight recorder's dump clone calls them (pt_flight_lines.c). */
struct _PyInterpreterFrame;
PyAPI_FUNC(PyObject *) PyUnstable_InterpreterFrame_GetCode(struct _PyInterpreterFrame *frame)
    __attribute__((weak));
PyAPI_FUNC(int) PyUnstable_InterpreterFrame_GetLine(struct _PyInterpreterFrame *frame)
    __attribute__((weak));

/* Where a thread state's innermost interpreter frame and a frame's previous
 * are, per minor version (3.11+), for the flight recorder's dump clone, which may
 * not allocate the frame objects the public API makes (pt_flight_lines.c). Read
 * by offset, never by struct: offsetof on x86-64 against the internal headers of
 * 3.11.7, 3.12.1, 3.13.0, 3.14 and 3.15 (Debian's). Other 64-bit builds are
 * expected alike: pt_flight_lines_prepare checks them against the public API
 * before any is used. NULL for a version not listed. */
typedef struct {
    int minor;
    size_t c_frame_at;      /* 3.11, 3.12: the thread state's C frame (0: none) */
    size_t current_frame_at;    /* in the C frame, or (3.13+) in the thread state */
    size_t previous_at;     /* in an interpreter frame */
    size_t code_at;         /* 3.11: a frame's code object */
    size_t instruction_at;  /* 3.11: its last instruction */
    size_t code_units_at;   /* 3.11: a code object's first instruction */
} pt_frame_layout;

static inline const pt_frame_layout *
pt_frame_layout_of(int minor)
{
    static const pt_frame_layout layouts[] = {
        {11, 56, 8, 48, 32, 56, 184},
        {12, 56, 0, 8, 0, 0, 0},
        {13, 0, 72, 8, 0, 0, 0},
        {14, 0, 72, 8, 0, 0, 0},
        {15, 0, 72, 8, 0, 0, 0},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++)
        if (layouts[i].minor == minor)
            return &layouts[i];
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Bound methods (Include/cpython/classobject.h)                             */
/* ------------------------------------------------------------------------ */

/* The type of bound `method` objects, and the function and self of one (borrowed
 * references; 3.9+). sys.setprofile on 3.12.5+ and 3.13 reports calling a bound
 * method whose function is a built-in as a call of that built-in (pybind11 class
 * methods are such methods), so the sys.monitoring CALL hook looks inside them. */
PyAPI_DATA(PyTypeObject) PyMethod_Type;
PyAPI_FUNC(PyObject *) PyMethod_Function(PyObject *method);
PyAPI_FUNC(PyObject *) PyMethod_Self(PyObject *method);

/* ------------------------------------------------------------------------ */
/* Limited-API gaps for the 3.9 baseline                                     */
/* ------------------------------------------------------------------------ */

/* METH_FASTCALL joined the limited API in 3.10; its value never changed. */
#ifndef METH_FASTCALL
#define METH_FASTCALL 0x0080
#endif

typedef PyObject *(*pt_fastcall)(PyObject *self, PyObject *const *args,
                                 Py_ssize_t nargs);

/* PyMem_Calloc (3.5+, stable ABI) is declared by 3.9's headers only outside the
 * limited API (Include/cpython/pymem.h); 3.10+ declare it in Include/pymem.h.
 * Without this a build on 3.9 (pip install ., pip install -e .) fails. */
#if PY_VERSION_HEX < 0x030A0000
PyAPI_FUNC(void *) PyMem_Calloc(size_t nelem, size_t elsize);
#endif

#endif /* PT_CPYTHON_H */

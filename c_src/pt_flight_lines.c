/* pt_flight_lines.c - lines.tsv of a flight recorder dump: the line each
 * Python frame of each recorded thread is on, read in the dump's clone
 * (pt_flight.c), so that `report` shows where a thread stuck in C holding the
 * GIL is, not only the first line of its functions (stacks.tsv has keys only).
 *
 * The clone is a snapshot: only its thread runs, it has no Python thread state,
 * and it may take no lock and allocate nothing (pt_flight.c). Allocating a frame
 * object there (PyThreadState_GetFrame and PyFrame_GetBack do on 3.11+, for a
 * frame that has none) reads the calling thread's state, which the clone has
 * not: a NULL dereference (3.11: the GC's state, 3.12+: the allocator's too),
 * and on 3.11 may run a collection (finalizers: Python code). So:
 *  - 3.9, 3.10: the public frame API, which only reads (and counts references,
 *    in the clone's copy): every frame is an object;
 *  - 3.11-3.15: the interpreter's frames, walked by two fields whose place is
 *    fixed per minor version (the thread state's current frame, a frame's
 *    previous: pt_frame_layout_of, pt_cpython.h), each frame's code and line by
 *    3.12+'s
 *    PyUnstable_InterpreterFrame_GetCode/GetLine (they read only), on 3.11 by
 *    its frame's code and last instruction fields and PyCode_Addr2Line.
 * The layout is checked at arm time (pt_flight_lines_prepare, with the GIL) on
 * the arming thread's own frames against the public API; when it disagrees, or
 * the version is not one of those, lines.tsv says why and no line is given.
 * Walks are bounded (a list being changed at the clone cannot loop it).
 */
#define _GNU_SOURCE
#include "pt_record_internal.h"
#include "pt_flight_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define PT_LINES_MAX_THREADS 4096
#define PT_LINES_MAX_FRAMES 4096        /* per thread, innermost first */
#define PT_LINES_CHECKED 32             /* frames compared at arm time */

enum { PT_LINES_UNKNOWN, PT_LINES_FRAME_OBJECTS, PT_LINES_INTERPRETER_FRAMES };
static int pt_lines_way;
static const pt_frame_layout *pt_layout;
static PyInterpreterState *pt_lines_interp;
static char pt_lines_why[160] = "the recorder was not armed";

static void *
pt_word_at(const void *base, size_t offset)
{
    void *value;
    memcpy(&value, (const char *)base + offset, sizeof value);
    return value;
}

/* The innermost interpreter frame of ts (NULL: none). */
static void *
pt_current_frame(PyThreadState *ts)
{
    const void *holder = ts;
    if (pt_layout->c_frame_at) {            /* 3.11, 3.12: through the C frame */
        holder = pt_word_at(ts, pt_layout->c_frame_at);
        if (!holder)
            return NULL;
    }
    return pt_word_at(holder, pt_layout->current_frame_at);
}

/* The code object frame runs and its line into *line; NULL for a frame that
 * runs none (an entry frame of the C stack). */
static PyObject *
pt_frame_code_line(void *frame, int *line)
{
    PyObject *code;
    if (pt_layout->minor == 11) {
        code = pt_word_at(frame, pt_layout->code_at);
        if (!code || Py_TYPE(code) != &PyCode_Type)
            return NULL;
        const char *at = pt_word_at(frame, pt_layout->instruction_at);
        const char *first = (const char *)code + pt_layout->code_units_at;
        *line = PyCode_Addr2Line(code, (int)(at - first));     /* a byte offset */
        return code;
    }
    code = PyUnstable_InterpreterFrame_GetCode(frame);      /* (a reference more, in the clone) */
    if (!code || Py_TYPE(code) != &PyCode_Type)
        return NULL;
    *line = PyUnstable_InterpreterFrame_GetLine(frame);
    return code;
}

/* Calls each(frame's code, line, arg) for ts's frames, innermost first, at most
 * PT_LINES_MAX_FRAMES; stops early when each returns 0. */
static void
pt_each_frame(PyThreadState *ts, int (*each)(PyObject *, int, void *), void *arg)
{
    int n = 0;
    if (pt_lines_way == PT_LINES_FRAME_OBJECTS) {
        /* 3.9, 3.10: new references, never released (the clone's copy) */
        for (PyFrameObject *f = PyThreadState_GetFrame(ts); f && n < PT_LINES_MAX_FRAMES;
             f = PyFrame_GetBack(f), n++)
            if (!each((PyObject *)PyFrame_GetCode(f), PyFrame_GetLineNumber(f), arg))
                return;
        return;
    }
    for (void *frame = pt_current_frame(ts); frame && n < PT_LINES_MAX_FRAMES;
         frame = pt_word_at(frame, pt_layout->previous_at), n++) {
        int line = 0;
        PyObject *code = pt_frame_code_line(frame, &line);
        if (code && !each(code, line, arg))
            return;
    }
}

/* ------------------------------------------------------------------------ */
/* At arm time: the walk checked against the public API                      */
/* ------------------------------------------------------------------------ */

typedef struct { PyObject *code[PT_LINES_CHECKED]; int line[PT_LINES_CHECKED], n; } pt_seen;

static int
pt_see(PyObject *code, int line, void *arg)
{
    pt_seen *seen = arg;
    seen->code[seen->n] = code;
    seen->line[seen->n++] = line;
    return seen->n < PT_LINES_CHECKED;
}

/* The word at addr into *value; 0 when addr cannot be read (a wrong layout
 * points anywhere): through a pipe, whose write says EFAULT where a read would
 * fault. At arm time only: a few system calls a word. */
static int
pt_readable_word(const void *addr, void **value)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0)
        return 0;
    int ok = write(fds[1], addr, sizeof *value) == (ssize_t)sizeof *value &&
             read(fds[0], value, sizeof *value) == (ssize_t)sizeof *value;
    close(fds[0]);
    close(fds[1]);
    return ok;
}

/* A frame object's interpreter frame (3.11-3.15: f_frame, after the object's
 * head and f_back). */
static void *
pt_frame_of(PyFrameObject *f)
{
    return pt_word_at(f, sizeof(PyObject) + sizeof(void *));
}

/* Whether the layout's fields lead, by reads that cannot fault, from ts to its
 * innermost frame (f's: the caller's, complete) and from there to the next
 * complete one out (entry frames between): only then does the walk read
 * through them. A layout of another build of this minor version is refused
 * here, never a crash at arm time. */
static int
pt_layout_reaches(PyThreadState *ts, PyFrameObject *f)
{
    void *holder = ts, *frame = NULL;
    if (pt_layout->c_frame_at &&          /* 3.11, 3.12: through the C frame */
        (!pt_readable_word((const char *)ts + pt_layout->c_frame_at, &holder) || !holder))
        return 0;
    if (!pt_readable_word((const char *)holder + pt_layout->current_frame_at, &frame) ||
        frame != pt_frame_of(f))
        return 0;
    PyFrameObject *back = PyFrame_GetBack(f);
    if (!back)
        return 1;
    void *outer = pt_frame_of(back);
    Py_DecRef((PyObject *)back);
    for (int i = 0; i < 64 && frame; i++) {
        if (!pt_readable_word((const char *)frame + pt_layout->previous_at, &frame))
            return 0;
        if (frame == outer)
            return 1;
    }
    return 0;
}

/* Whether the public API's frames of ts (code, line) are, in order, among the
 * walk's (which holds entry frames and incomplete ones too). */
static int
pt_walk_agrees(PyThreadState *ts)
{
    PyFrameObject *f = PyThreadState_GetFrame(ts);
    if (!f)
        return 0;
    if (pt_lines_way == PT_LINES_INTERPRETER_FRAMES && !pt_layout_reaches(ts, f)) {
        Py_DecRef((PyObject *)f);
        return 0;
    }
    pt_seen seen = {{0}, {0}, 0};
    pt_each_frame(ts, pt_see, &seen);
    int at = 0, compared = 0;
    while (f && compared < PT_LINES_CHECKED / 2) {
        PyObject *code = (PyObject *)PyFrame_GetCode(f);
        int line = PyFrame_GetLineNumber(f);
        while (at < seen.n && seen.code[at] != code)
            at++;
        int found = at < seen.n && seen.line[at] == line;
        Py_DecRef(code);
        PyFrameObject *back = PyFrame_GetBack(f);
        Py_DecRef((PyObject *)f);
        f = back;
        if (!found) {
            if (f)
                Py_DecRef((PyObject *)f);
            return 0;
        }
        at++;
        compared++;
    }
    if (f)
        Py_DecRef((PyObject *)f);
    return compared > 0;
}

void
pt_flight_lines_prepare(void)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    PyThreadState *self = PyThreadState_Get();
    pt_lines_interp = PyThreadState_GetInterpreter(self);
    PyObject *info = PySys_GetObject("hexversion");     /* borrowed */
    long hex = info ? PyLong_AsLong(info) : -1;
    int major = (int)(hex >> 24 & 0xff), minor = (int)(hex >> 16 & 0xff);
    PyErr_Clear();
    pt_lines_way = PT_LINES_UNKNOWN;
    pt_layout = NULL;
    if (major == 3 && (minor == 9 || minor == 10))
        pt_lines_way = PT_LINES_FRAME_OBJECTS;
    if (major == 3)
        pt_layout = pt_frame_layout_of(minor);
    if (pt_layout && (minor == 11 || (PyUnstable_InterpreterFrame_GetCode &&
                                      PyUnstable_InterpreterFrame_GetLine)))
        pt_lines_way = PT_LINES_INTERPRETER_FRAMES;
    if (pt_lines_way == PT_LINES_UNKNOWN)
        snprintf(pt_lines_why, sizeof pt_lines_why,
                 "Python %d.%d's frames are not known to this pytrace_cffi", major, minor);
    else if (!pt_walk_agrees(self)) {
        snprintf(pt_lines_why, sizeof pt_lines_why,
                 "Python %d.%d's frames are not where this pytrace_cffi looks", major, minor);
        pt_lines_way = PT_LINES_UNKNOWN;
    }
    PyGILState_Release(gil);
}

/* ------------------------------------------------------------------------ */
/* In the clone                                                             */
/* ------------------------------------------------------------------------ */

typedef struct { pt_tracer *tracer; int fd, ok, index; } pt_lines_out;

static int
pt_put_line(PyObject *code, int line, void *arg)
{
    pt_lines_out *out = arg;
    uint32_t key = pt_key_find(out->tracer, code, NULL);
    if (key)
        out->ok = pt_flight_put(out->fd, "line\t", 5) &&
                  pt_flight_put_number(out->fd, out->index) &&
                  pt_flight_put(out->fd, "\t", 1) && pt_flight_put_number(out->fd, key) &&
                  pt_flight_put(out->fd, "\t", 1) && pt_flight_put_number(out->fd, line) &&
                  pt_flight_put(out->fd, "\n", 1);
    return out->ok;
}

/* lines.tsv: per recorded thread, "line<TAB>thread index<TAB>key<TAB>line" for
 * each frame whose code has a key, innermost first; or "unknown<TAB>why"; "end"
 * last. Written as lines.tsv.part, renamed whole. */
int
pt_flight_write_lines(pt_tracer *tracer, const char *dir)
{
    char part[PT_FLIGHT_FILES_PATH], path[PT_FLIGHT_FILES_PATH];
    if (snprintf(part, sizeof part, "%s/lines.tsv.part", dir) >= (int)sizeof part ||
        snprintf(path, sizeof path, "%s/lines.tsv", dir) >= (int)sizeof path)
        return 0;
    int fd = open(part, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return 0;
    pt_lines_out out = {tracer, fd, 1, 0};
    if (pt_lines_way == PT_LINES_UNKNOWN || !pt_lines_interp)
        out.ok = pt_flight_put(fd, "unknown\t", 8) &&
                 pt_flight_put(fd, pt_lines_why, strlen(pt_lines_why)) &&
                 pt_flight_put(fd, "\n", 1);
    else {
        int n = 0;
        for (PyThreadState *ts = PyInterpreterState_ThreadHead(pt_lines_interp);
             out.ok && ts && n < PT_LINES_MAX_THREADS; ts = PyThreadState_Next(ts), n++) {
            uint64_t id = PyThreadState_GetID(ts);
            pt_thread *t = tracer->threads;
            while (t && t->tstate_id != id)
                t = t->next;
            if (!t)
                continue;
            out.index = t->index;
            pt_each_frame(ts, pt_put_line, &out);
        }
    }
    out.ok = out.ok && pt_flight_put(fd, "end\n", 4);
    return close(fd) == 0 && out.ok && rename(part, path) == 0;
}

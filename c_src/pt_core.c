/* pt_core.c - a tracer's life: errors, creation and freeing, its threads, and
 * the plain-C reading interface Python uses after stop. The hooks live in
 * pt_hooks.c, event storage (chunks, bounds, spilling) in pt_buffers.c, the key
 * table in pt_keys.c, the clock in pt_clock.c; the streaming walk that pairs the
 * events into calls in pt_walk.c.
 */
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
/* Errors                                                                   */
/* ======================================================================== */

void
pt_set_error(pt_tracer *tracer, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tracer->error, sizeof tracer->error, fmt, ap);
    va_end(ap);
}

/* Returns a new reference: str as UTF-8 bytes, or NULL. Consumes str. */
static PyObject *
pt_utf8(PyObject *str)
{
    PyObject *bytes = str && PyUnicode_Check(str)
        ? PyUnicode_AsEncodedString(str, "utf-8", "replace") : NULL;
    Py_XDECREF(str);
    if (!bytes)
        PyErr_Clear();
    return bytes;
}

/* Moves the pending Python exception into tracer->error and clears it, so no
 * exception ever leaks out through cffi. */
void
pt_set_error_from_python(pt_tracer *tracer, const char *what)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *text = pt_utf8(value ? PyObject_Str(value) : NULL);
    PyObject *type_name = pt_utf8(type ? PyObject_GetAttrString(type, "__name__") : NULL);
    pt_set_error(tracer, "%s: %s: %s", what,
                 type_name ? PyBytes_AsString(type_name) : "error",
                 text ? PyBytes_AsString(text) : "(no message)");
    Py_XDECREF(type_name);
    Py_XDECREF(text);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    PyErr_Clear();
}

const char *
pt_last_error(pt_tracer *tracer)
{
    return tracer->error;
}

int
pt_hot_error(pt_tracer *tracer)
{
    return tracer->hot_error;
}

/* ======================================================================== */
/* Lifecycle                                                                */
/* ======================================================================== */

static uint64_t pt_next_generation = 1;   /* only advanced atomically */

pt_tracer *
pt_tracer_new(int flags, int backend)
{
    pt_buffers_init_once();
    pt_tracer *tracer = calloc(1, sizeof *tracer);
    if (!tracer)
        return NULL;
    tracer->generation = __atomic_fetch_add(&pt_next_generation, 1, __ATOMIC_RELAXED);
    tracer->flags = flags;
    tracer->backend = backend;
    /* small at first (start() zeroes them: an empty trace's cost), doubled as
     * keys come (pt_keys.c) */
    tracer->slot_mask = 255;
    tracer->slots = calloc(tracer->slot_mask + 1, sizeof(pt_key_slot));
    tracer->sources_cap = 128;
    tracer->sources = calloc(tracer->sources_cap, sizeof(PyObject *));
    tracer->key_flags = calloc(tracer->sources_cap, 1);
    tracer->n_keys = 1;   /* id 0 means "unknown" */
    tracer->start_thread = -1;
    if (!tracer->slots || !tracer->sources || !tracer->key_flags) {
        free(tracer->slots);
        free(tracer->sources);
        free(tracer->key_flags);
        free(tracer);
        return NULL;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    tracer->handle = pt_handle_new(tracer);
    if (!tracer->handle)
        PyErr_Clear();
    PyGILState_Release(gil);
    if (!tracer->handle) {
        free(tracer->slots);
        free(tracer->sources);
        free(tracer->key_flags);
        free(tracer);
        return NULL;
    }
    return tracer;
}

static void pt_tracer_release(pt_tracer *tracer);

void
pt_tracer_free(pt_tracer *tracer)
{
    if (!tracer)
        return;
    /* A tracer is only freed stopped (the Python wrapper guarantees it), so no
     * new hook call reaches it; a hook still inside Python code it called frees
     * it when it comes back (pt_python_leave). */
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        int busy = tracer->in_python != 0;
        if (busy) {
            tracer->free_pending = 1;
            pt_handle_detach(tracer->handle);   /* new hook calls find nothing */
        }
        PyGILState_Release(gil);
        if (busy)
            return;
    }
    pt_tracer_release(tracer);
}

int
pt_python_leave(pt_tracer *tracer)
{
    if (--tracer->in_python || !tracer->free_pending)
        return 0;
    pt_tracer_release(tracer);
    return 1;
}

/* Frees the tracer, its buffers and its references. At interpreter teardown we
 * skip the decrefs. */
static void
pt_tracer_release(pt_tracer *tracer)
{
    if (Py_IsInitialized()) {
        PyGILState_STATE gil = PyGILState_Ensure();
        pt_handle_detach(tracer->handle);
        Py_CLEAR(tracer->handle);
        Py_CLEAR(tracer->monitoring_missing);
        Py_CLEAR(tracer->monitoring_disable);
        Py_CLEAR(tracer->code_filter);
        Py_CLEAR(tracer->watch_names);
        Py_CLEAR(tracer->watch_classify);
        Py_CLEAR(tracer->watch_tag);
        Py_CLEAR(tracer->annotation_args);
        Py_CLEAR(tracer->exception_hook);
        Py_CLEAR(tracer->args_match);
        Py_CLEAR(tracer->args_call);
        Py_CLEAR(tracer->args_return);
        Py_CLEAR(tracer->gc_args);
        Py_CLEAR(tracer->marks);
        Py_CLEAR(tracer->spill_hook);
        Py_CLEAR(tracer->progress_region);
        Py_CLEAR(tracer->getprofile);
        Py_CLEAR(tracer->hooks_lost);
        Py_CLEAR(tracer->thread_objects);
        for (uint32_t i = 0; i < tracer->n_keys; i++)
            Py_CLEAR(tracer->sources[i]);
        PyGILState_Release(gil);
    }
    pt_spill_close(tracer);
    free(tracer->spill_path);
    pt_thread *thread = tracer->threads;
    while (thread) {
        pt_thread *next_thread = thread->next;
        pt_chunk *chunk = thread->head;
        while (chunk) {
            pt_chunk *next_chunk = chunk->next;
            pt_chunk_free(chunk);
            chunk = next_chunk;
        }
        free(thread->logged);
        free(thread);
        thread = next_thread;
    }
    free(tracer->slots);
    free(tracer->sources);
    free(tracer->key_flags);
    free(tracer->source_text);
    free(tracer);
}

/* ======================================================================== */
/* Per-thread buffers                                                       */
/* ======================================================================== */

pt_thread *
pt_thread_find(pt_tracer *tracer, uint64_t tstate_id)
{
    for (pt_thread *t = tracer->threads; t; t = t->next)
        if (t->tstate_id == tstate_id)
            return t;
    return NULL;
}

pt_thread *
pt_thread_new(pt_tracer *tracer, uint64_t tstate_id, uint64_t ident,
              uint64_t native_id, int64_t base_ticks)
{
    pt_thread *thread = calloc(1, sizeof *thread);
    if (!thread)
        return NULL;
    thread->base_ticks = thread->last_ticks = base_ticks;
    thread->tstate_id = tstate_id;
    thread->ident = ident;
    thread->native_id = native_id;
    thread->index = tracer->n_threads++;
    thread->next = tracer->threads;
    tracer->threads = thread;
    return thread;
}
/* ======================================================================== */
/* Reading                                                                  */
/* ======================================================================== */
int64_t pt_start_ns(pt_tracer *tracer) { return tracer->start_ns; }
int64_t pt_stop_ns(pt_tracer *tracer) { return tracer->stop_ns; }
int64_t pt_start_ticks(pt_tracer *tracer) { return tracer->start_ticks; }
int64_t pt_stop_ticks(pt_tracer *tracer) { return tracer->stop_ticks; }
int pt_thread_count(pt_tracer *tracer) { return tracer->n_threads; }
uint32_t pt_key_count(pt_tracer *tracer) { return tracer->n_keys; }

static pt_thread *
pt_thread_at(pt_tracer *tracer, int index)
{
    for (pt_thread *t = tracer->threads; t; t = t->next)
        if (t->index == index)
            return t;
    return NULL;
}

/* Threads are read only once stopped: their buffers no longer move. */
pt_thread *
pt_thread_for_reading(pt_tracer *tracer, int index)
{
    if (tracer->state != PT_STATE_STOPPED) {
        pt_set_error(tracer, "the trace can only be read after stop");
        return NULL;
    }
    pt_thread *thread = pt_thread_at(tracer, index);
    if (!thread)
        pt_set_error(tracer, "no thread at index %d", index);
    return thread;
}

int
pt_thread_get_info(pt_tracer *tracer, int index, pt_thread_info *out)
{
    pt_thread *thread = pt_thread_for_reading(tracer, index);
    if (!thread)
        return tracer->state != PT_STATE_STOPPED ? PT_ERR_STATE : PT_ERR_ARG;
    memset(out, 0, sizeof *out);
    out->tstate_id = thread->tstate_id;
    out->ident = thread->ident;
    out->native_id = thread->native_id;
    out->dropped = thread->dropped;
    out->base_ticks = thread->base_ticks;
    out->spilled = thread->spilled;
    for (pt_chunk *chunk = thread->head; chunk; chunk = chunk->next)
        out->n_events += pt_chunk_used(thread, chunk);
    return PT_OK;
}

int
pt_thread_infos(pt_tracer *tracer, pt_thread_info *out, int n)
{
    for (int i = 0; i < n; i++) {
        int rc = pt_thread_get_info(tracer, i, &out[i]);
        if (rc != PT_OK)
            return rc;
    }
    return PT_OK;
}

int
pt_get_stop_facts(pt_tracer *tracer, int use_tsc, pt_stop_facts *out)
{
    if (tracer->state != PT_STATE_STOPPED) {
        pt_set_error(tracer, "the trace can only be read after stop");
        return PT_ERR_STATE;
    }
    memset(out, 0, sizeof *out);
    out->start_ns = tracer->start_ns;
    out->start_ticks = tracer->start_ticks;
    out->stop_ticks = tracer->stop_ticks;
    memcpy(out->anchor, tracer->anchor, sizeof out->anchor);
    out->n_threads = tracer->n_threads;
    out->hot_error = tracer->hot_error;
    pt_clock_pair(use_tsc, &out->now_ticks, &out->now_ns);
    return PT_OK;
}

int
pt_thread_ends_open(pt_tracer *tracer, int index)
{
    pt_thread *thread = pt_thread_for_reading(tracer, index);
    if (!thread)
        return tracer->state != PT_STATE_STOPPED ? PT_ERR_STATE : PT_ERR_ARG;
    if (thread->ended_unhooked)
        return 0;       /* its seeded frames never returned: it ended before its hook */
    /* The open calls' key_kind words with the kind's call bit cleared, so that a
     * return's word (kind | 1) compares as is after clearing it too: PY_CALL 0 /
     * PY_RETURN 1, C_CALL 2 / C_RETURN 3; a seed (4) is a Python call. */
    uint32_t inline_stack[256];
    uint32_t *stack = inline_stack;
    uint64_t depth = 0, cap = 256;
    int rc = 0;
    for (pt_chunk *chunk = thread->head; chunk; chunk = chunk->next) {
        const pt_event *ev = chunk->events;
        const pt_event *end = ev + pt_chunk_used(thread, chunk);
        for (; ev < end; ev++) {
            uint32_t word = ev->key_kind;
            uint32_t kind = word & PT_KIND_MASK;
            if (kind == PT_EV_PY_CALL || kind == PT_EV_C_CALL || kind == PT_EV_PY_SEED) {
                if (depth == cap) {
                    uint32_t *grown = malloc(2 * cap * sizeof *grown);
                    if (!grown) {
                        rc = PT_ERR_NOMEM;
                        goto done;
                    }
                    memcpy(grown, stack, depth * sizeof *grown);
                    if (stack != inline_stack)
                        free(stack);
                    stack = grown;
                    cap *= 2;
                }
                stack[depth++] = kind == PT_EV_PY_SEED ? word & ~(uint32_t)PT_KIND_MASK : word;
            } else if (kind == PT_EV_PY_RETURN || kind == PT_EV_C_RETURN) {
                uint32_t call = word & ~(uint32_t)1;
                if (depth && stack[depth - 1] == call) {
                    depth--;
                    continue;
                }
                for (uint64_t i = depth; i > 0; i--)
                    if (stack[i - 1] == call) {
                        depth = i - 1;
                        break;
                    }
            }
        }
    }
    rc = depth != 0;
done:
    if (stack != inline_stack)
        free(stack);
    return rc;
}

/* The run of a thread's events that starts at event `first`: a view into the
 * chunk holding it (valid until the tracer is freed), so a streaming walk reads
 * the events where they are. *base_ticks: the clock the thread's first held event
 * counts from (under max_events the oldest chunks may be gone). */
int
pt_thread_events_at(pt_tracer *tracer, int index, uint64_t first, const pt_event **events,
                    uint64_t *n, int64_t *base_ticks)
{
    pt_thread *thread = pt_thread_for_reading(tracer, index);
    if (!thread)
        return tracer->state != PT_STATE_STOPPED ? PT_ERR_STATE : PT_ERR_ARG;
    *base_ticks = thread->head ? thread->head->base_ticks : thread->base_ticks;
    *events = NULL;
    *n = 0;
    uint64_t skipped = 0;
    for (pt_chunk *chunk = thread->head; chunk; chunk = chunk->next) {
        uint64_t used = pt_chunk_used(thread, chunk);
        if (first < skipped + used) {
            *events = chunk->events + (first - skipped);
            *n = skipped + used - first;
            return PT_OK;
        }
        skipped += used;
    }
    return PT_OK;
}

int
pt_key_sources(pt_tracer *tracer, uint32_t first, void *py_list)
{
    int rc = PT_OK;
    PyGILState_STATE gil = PyGILState_Ensure();
    PyObject *list = (PyObject *)py_list;
    if (!PyList_Check(list)) {
        pt_set_error(tracer, "pt_key_sources needs a list");
        rc = PT_ERR_ARG;
        goto done;
    }
    for (uint32_t i = first; i < tracer->n_keys; i++) {
        PyObject *source = tracer->sources[i] ? tracer->sources[i] : Py_None;
        if (PyList_Append(list, source) < 0) {
            pt_set_error_from_python(tracer, "pt_key_sources");
            rc = PT_ERR_PYTHON;
            goto done;
        }
    }
done:
    PyGILState_Release(gil);
    return rc;
}

/* pt_core.c - tracer state: per-thread event buffers, the key table, and the
 * plain-C reading interface. The hooks themselves live in pt_hooks.c, replay in
 * pt_replay.c.
 */
#include "pt_internal.h"

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

static void pt_chunk_free(pt_chunk *chunk);
static void pt_register_fork_handler(void);
static pthread_once_t pt_fork_handler_once;

pt_tracer *
pt_tracer_new(int flags, int backend)
{
    pthread_once(&pt_fork_handler_once, pt_register_fork_handler);
    pt_tracer *tracer = calloc(1, sizeof *tracer);
    if (!tracer)
        return NULL;
    tracer->generation = __atomic_fetch_add(&pt_next_generation, 1, __ATOMIC_RELAXED);
    tracer->flags = flags;
    tracer->backend = backend;
    tracer->slot_mask = 1023;
    tracer->slots = calloc(tracer->slot_mask + 1, sizeof(pt_key_slot));
    tracer->sources_cap = 1024;
    tracer->sources = calloc(tracer->sources_cap, sizeof(PyObject *));
    tracer->key_flags = calloc(tracer->sources_cap, 1);
    tracer->n_keys = 1;   /* id 0 means "unknown" */
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

void
pt_tracer_free(pt_tracer *tracer)
{
    if (!tracer)
        return;
    /* A tracer is only freed stopped (the Python wrapper guarantees it), so no
     * hook can still reach it. At interpreter teardown we skip the decrefs. */
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
        Py_CLEAR(tracer->marks);
        Py_CLEAR(tracer->spill_hook);
        Py_CLEAR(tracer->getprofile);
        Py_CLEAR(tracer->hooks_lost);
        for (uint32_t i = 0; i < tracer->n_keys; i++)
            Py_CLEAR(tracer->sources[i]);
        PyGILState_Release(gil);
    }
    if (tracer->spill)
        fclose(tracer->spill);
    pt_thread *thread = tracer->threads;
    while (thread) {
        pt_thread *next_thread = thread->next;
        pt_chunk *chunk = thread->head;
        while (chunk) {
            pt_chunk *next_chunk = chunk->next;
            pt_chunk_free(chunk);
            chunk = next_chunk;
        }
        free(thread);
        thread = next_thread;
    }
    free(tracer->slots);
    free(tracer->sources);
    free(tracer->key_flags);
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

/* Big chunks freed by dropped traces wait here for the next trace, up to
 * PT_POOL_CHUNKS: first-touch page faults (the kernel zeroing fresh pages) are the
 * dearest part of recording, and a tracer started again and again (schedules,
 * signal windows, benchmarks) should not pay them every time. The pool is the one
 * piece of process-wide mutable state; it has its own lock because traces can be
 * freed by the garbage collector on any thread. */
#define PT_POOL_CHUNKS 8
static pt_chunk *pt_pool[PT_POOL_CHUNKS];
static int pt_pool_count;
static pthread_mutex_t pt_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t pt_fork_handler_once = PTHREAD_ONCE_INIT;

static void pt_sigterm_after_fork(void);

/* A child forked while another thread held the pool lock must not inherit it. */
static void
pt_pool_after_fork_in_child(void)
{
    pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;
    pt_pool_lock = unlocked;
    pt_sigterm_after_fork();
}

static void
pt_register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, pt_pool_after_fork_in_child);
}

static void
pt_chunk_free(pt_chunk *chunk)
{
    if (chunk->capacity == (PT_CHUNK_BYTES - sizeof(pt_chunk)) / sizeof(pt_event)) {
        pthread_mutex_lock(&pt_pool_lock);
        if (pt_pool_count < PT_POOL_CHUNKS) {
            pt_pool[pt_pool_count++] = chunk;
            chunk = NULL;
        }
        pthread_mutex_unlock(&pt_pool_lock);
    }
    free(chunk);
}

/* Empties the pool (pytrace_cffi.release_memory()). */
void
pt_release_pool(void)
{
    pthread_mutex_lock(&pt_pool_lock);
    while (pt_pool_count > 0)
        free(pt_pool[--pt_pool_count]);
    pthread_mutex_unlock(&pt_pool_lock);
}

/* Returns a chunk of `bytes`; a big one comes from the pool or as a transparent
 * huge page. */
static pt_chunk *
pt_chunk_alloc(size_t bytes)
{
    void *memory = NULL;
    if (bytes >= PT_CHUNK_BYTES) {
        pthread_mutex_lock(&pt_pool_lock);
        if (pt_pool_count > 0)
            memory = pt_pool[--pt_pool_count];
        pthread_mutex_unlock(&pt_pool_lock);
    }
    if (memory) {
        /* reused as is */
    } else if (bytes >= PT_CHUNK_BYTES) {
        if (posix_memalign(&memory, bytes, bytes) != 0)
            return NULL;
#ifdef MADV_HUGEPAGE
        madvise(memory, bytes, MADV_HUGEPAGE);
#endif
    } else {
        memory = malloc(bytes);
        if (!memory)
            return NULL;
    }
    pt_chunk *chunk = memory;
    chunk->next = NULL;
    chunk->used = 0;
    chunk->capacity = (bytes - sizeof(pt_chunk)) / sizeof(pt_event);
    return chunk;
}

/* ======================================================================== */
/* Bounded memory: spilling or dropping the oldest chunk                    */
/* ======================================================================== */

/* One block of spilled events: which thread, how many, the clock before them. */
typedef struct {
    uint32_t thread_index;
    uint32_t reserved;
    uint64_t n_events;
    int64_t base_ticks;
} pt_spill_block;

/* Writes n events of thread to the spill file; on failure stops spilling (the
 * sticky error says why) and returns 0, and the caller drops them instead. */
static int
pt_spill_events(pt_tracer *tracer, pt_thread *thread, const pt_chunk *chunk,
                uint64_t n)
{
    if (!tracer->spill)
        return 0;
    pt_spill_block block = {(uint32_t)thread->index, 0, n, chunk->base_ticks};
    if (fwrite(&block, sizeof block, 1, tracer->spill) != 1 ||
        fwrite(chunk->events, sizeof(pt_event), n, tracer->spill) != n) {
        if (!tracer->hot_error) {
            tracer->hot_error = PT_ERR_PYTHON;
            pt_set_error(tracer,
                         "writing spilled events failed (disk full?); later ones were dropped");
        }
        fclose(tracer->spill);
        tracer->spill = NULL;
        return 0;
    }
    tracer->spilled_events += n;
    thread->spilled += n;
    return 1;
}

/* Moves owner's oldest chunk out of memory: to the spill file, or dropped and
 * counted. A thread's only chunk is emptied in place. */
static void
pt_evict_head(pt_tracer *tracer, pt_thread *owner)
{
    pt_chunk *victim = owner->head;
    int is_tail = victim == owner->tail;
    uint64_t n = is_tail ? (uint64_t)(owner->cursor - victim->events) : victim->used;
    if (!pt_spill_events(tracer, owner, victim, n))
        owner->dropped += n;
    if (is_tail) {
        victim->used = 0;
        victim->seq = tracer->chunk_seq++;
        victim->base_ticks = owner->last_ticks;
        owner->cursor = victim->events;
    } else {
        owner->head = victim->next;
        tracer->held_events -= victim->capacity;
        pt_chunk_free(victim);
    }
}

/* Evicts the oldest chunk holding events of any thread. Returns 0 when no chunk
 * holds anything. */
static int
pt_evict_oldest(pt_tracer *tracer)
{
    pt_thread *owner = NULL;
    for (pt_thread *t = tracer->threads; t; t = t->next) {
        pt_chunk *head = t->head;
        if (head && (head != t->tail || t->cursor > head->events) &&
            (!owner || head->seq < owner->head->seq))
            owner = t;
    }
    if (!owner)
        return 0;
    pt_evict_head(tracer, owner);
    return 1;
}

/* Runs the spill hook (see pt_set_spill_hook), keeping any pending exception.
 * It may release the GIL (it writes a file): other threads can record meanwhile. */
static void
pt_run_spill_hook(pt_tracer *tracer)
{
    if (tracer->spill_hook_busy || tracer->classify_from || tracer->state != PT_STATE_RUNNING)
        return;
    tracer->spill_hook_busy = 1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *result = PyObject_CallObject(tracer->spill_hook, NULL);
    if (!result && !tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error_from_python(tracer, "writing key names before a spill");
    }
    Py_XDECREF(result);
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
    tracer->spill_hook_busy = 0;
}

/* Spills this thread's full chunk at once and empties it in place (the spill
 * hook's mode). Returns 1 when done, 0 when it cannot (nothing to spill, or the
 * file failed), -1 when tracing stopped meanwhile (the event is dropped). */
static int
pt_spill_own_chunk(pt_tracer *tracer, pt_thread *thread)
{
    pt_run_spill_hook(tracer);
    /* The hook may have let other threads run: one of them may have stopped
     * tracing (stop() waits for a hook in progress, not for this tail), or emptied
     * this thread's chunk already (more threads than max_events has chunks). */
    if (tracer->state != PT_STATE_RUNNING)
        return -1;
    if (thread->cursor < thread->limit)
        return 1;
    if (!tracer->spill || thread->head != thread->tail)
        return 0;
    pt_evict_head(tracer, thread);
    return thread->cursor < thread->limit;
}

int
pt_spill_rest(pt_tracer *tracer)
{
    while (pt_evict_oldest(tracer))
        ;
    int rc = PT_OK;
    if (tracer->spill) {
        if (fclose(tracer->spill) != 0) {
            pt_set_error(tracer, "closing the spill file failed");
            rc = PT_ERR_PYTHON;
        }
        tracer->spill = NULL;
    }
    return rc;
}

int
pt_set_bounds(pt_tracer *tracer, uint64_t max_events, const char *spill_path)
{
    if (tracer->state != PT_STATE_NEW) {
        pt_set_error(tracer, "bounds are set before start");
        return PT_ERR_STATE;
    }
    if (max_events == 0) {
        pt_set_error(tracer, "max_events must be at least 1");
        return PT_ERR_ARG;
    }
    if (spill_path) {
        tracer->spill = fopen(spill_path, "wb");
        if (!tracer->spill) {
            pt_set_error(tracer, "cannot write %s", spill_path);
            return PT_ERR_ARG;
        }
        /* Unbuffered: a block is in the file once written (a killed process keeps
         * it), and a forked child's copy of the stream has nothing to flush. */
        setvbuf(tracer->spill, NULL, _IONBF, 0);
        static const char header[16] = "PTEVENTS\1\0\0\0\x08\0\0\0";
        if (fwrite(header, sizeof header, 1, tracer->spill) != 1) {
            fclose(tracer->spill);
            tracer->spill = NULL;
            pt_set_error(tracer, "cannot write %s", spill_path);
            return PT_ERR_ARG;
        }
    }
    tracer->max_events = max_events;
    /* Chunks of about an eighth of the budget, so eviction frees memory finely. */
    uint64_t per_chunk = max_events / 8;
    uint64_t largest = (PT_CHUNK_BYTES - sizeof(pt_chunk)) / sizeof(pt_event);
    tracer->bounded_chunk_events =
        per_chunk < 512 ? 512 : per_chunk > largest ? largest : per_chunk;
    return PT_OK;
}

int
pt_set_spill_hook(pt_tracer *tracer, void *py_hook)
{
    if (tracer->state != PT_STATE_NEW || !tracer->spill) {
        pt_set_error(tracer, "the spill hook is set after the spill file, before start");
        return PT_ERR_STATE;
    }
    PyGILState_STATE gil = PyGILState_Ensure();
    int ok = PyCallable_Check((PyObject *)py_hook);
    if (ok) {
        Py_INCREF((PyObject *)py_hook);
        Py_CLEAR(tracer->spill_hook);
        tracer->spill_hook = (PyObject *)py_hook;
    }
    PyGILState_Release(gil);
    if (!ok) {
        pt_set_error(tracer, "the spill hook must be callable");
        return PT_ERR_ARG;
    }
    return PT_OK;
}

uint64_t
pt_spilled_events(pt_tracer *tracer)
{
    return tracer->spilled_events;
}

/* Appends a fresh chunk; never copies recorded events. Under max_events, first
 * spills or drops the oldest chunks so that what is held stays within it. */
int
pt_thread_grow(pt_tracer *tracer, pt_thread *thread)
{
    size_t bytes = thread->head ? PT_CHUNK_BYTES : PT_FIRST_CHUNK_BYTES;
    if (tracer->max_events) {
        uint64_t events = tracer->bounded_chunk_events;
        bytes = sizeof(pt_chunk) + events * sizeof(pt_event);
        if (thread->tail)
            thread->tail->used = (uint64_t)(thread->cursor - thread->tail->events);
        if (tracer->spill_hook && thread->tail) {
            int spilled = pt_spill_own_chunk(tracer, thread);
            if (spilled)
                return spilled > 0 ? PT_OK : PT_ERR_STATE;
        }
        while (tracer->held_events + events > tracer->max_events && pt_evict_oldest(tracer))
            if (thread->cursor < thread->limit)
                return PT_OK;          /* this thread's own chunk was emptied in place */
    }
    pt_chunk *chunk = pt_chunk_alloc(bytes);
    if (!chunk) {
        if (!tracer->hot_error) {
            tracer->hot_error = PT_ERR_NOMEM;
            pt_set_error(tracer, "out of memory for trace events; later events were dropped");
        }
        return PT_ERR_NOMEM;
    }
    chunk->seq = tracer->chunk_seq++;
    chunk->base_ticks = thread->last_ticks;
    tracer->held_events += chunk->capacity;
    if (thread->tail) {
        thread->tail->used = (uint64_t)(thread->cursor - thread->tail->events);
        thread->tail->next = chunk;
    } else {
        thread->head = chunk;
    }
    thread->tail = chunk;
    thread->cursor = chunk->events;
    thread->limit = chunk->events + chunk->capacity;
    return PT_OK;
}

/* Records a pause longer than a 32-bit delta: delta's high bits ride in the key. */
void
pt_append_time(pt_tracer *tracer, pt_thread *thread, uint64_t delta)
{
    uint64_t high = delta >> 32;
    if (high >= PT_MAX_KEYS)
        high = PT_MAX_KEYS - 1;        /* > 2^61 ticks: decades; clamp */
    if (pt_append(tracer, thread, (uint32_t)delta, (uint32_t)high << PT_KEY_SHIFT | PT_EV_TIME))
        thread->last_ticks += (int64_t)((uint64_t)(uint32_t)delta | high << 32);
}

static uint64_t
pt_chunk_used(const pt_thread *thread, const pt_chunk *chunk)
{
    return chunk == thread->tail ? (uint64_t)(thread->cursor - chunk->events)
                                 : chunk->used;
}

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
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *name = PyObject_GetAttrString(code, "co_name");
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

/* The cold half of pt_key_for_code (pt_internal.h): a code object seen first. */
uint32_t
pt_key_for_new_code(pt_tracer *tracer, PyObject *code)
{
    uint32_t id;
    Py_INCREF(code);   /* held until the tracer is freed, so the address never aliases */
    id = pt_key_insert(tracer, code, NULL, code);
    if (id && (tracer->watch_names || tracer->code_filter)) {
        if (tracer->classify_from)
            return id;     /* pt_start is walking threads: no Python code may run yet */
        pt_ask_about_code(tracer, id);
    }
    return id;
}

/* Runs the watcher's and the filter's Python callbacks about a new code key. */
static void
pt_ask_about_code(pt_tracer *tracer, uint32_t id)
{
    PyObject *code = tracer->sources[id];
    if (tracer->watch_names)
        pt_classify_code(tracer, code, id);
    if (tracer->code_filter)
        pt_filter_code(tracer, code, id);
}

void
pt_defer_questions(pt_tracer *tracer)
{
    tracer->classify_from = tracer->n_keys;
}

void
pt_ask_deferred_questions(pt_tracer *tracer)
{
    uint32_t first = tracer->classify_from;
    tracer->classify_from = 0;
    if (!first || !(tracer->watch_names || tracer->code_filter))
        return;
    for (uint32_t id = first; id < tracer->n_keys; id++)
        if (tracer->sources[id] && !PyTuple_Check(tracer->sources[id]) &&
            !PyUnicode_Check(tracer->sources[id]))
            pt_ask_about_code(tracer, id);
}

int
pt_key_flags(pt_tracer *tracer, uint8_t *out, uint32_t n)
{
    if (n > tracer->n_keys)
        n = tracer->n_keys;
    memcpy(out, tracer->key_flags, n);
    return PT_OK;
}

/* Asks the watcher for the tag of the call just recorded (its frame is current). */
void
pt_tag_call(pt_tracer *tracer, pt_thread *thread, PyFrameObject *frame)
{
    if (!frame)
        return;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyObject *result = PyObject_CallFunctionObjArgs(tracer->watch_tag, (PyObject *)frame, NULL);
    long tag = result ? PyLong_AsLong(result) : -1;
    Py_XDECREF(result);
    if (tag > 0 && tag < (long)PT_MAX_KEYS) {
        pt_append(tracer, thread, 0, (uint32_t)tag << PT_KEY_SHIFT | PT_EV_TAG);
    } else if (tag < 0 && PyErr_Occurred() && !tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error_from_python(tracer, "tagging a call");
    }
    PyErr_Clear();
    PyErr_Restore(type, value, tb);
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

/* Returns a new reference: the owner a built-in is named after, as
 * sys.setprofile's bound method would show it (module, type or None). */
static PyObject *
pt_builtin_owner(PyObject *self)
{
    PyObject *owner;
    if (!self)
        owner = Py_None;
    else if (PyModule_Check(self) || PyType_Check(self))
        owner = self;
    else
        owner = (PyObject *)Py_TYPE(self);
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
        owner = pt_builtin_owner(self);
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
        const void *impl = (const void *)PyCFunction_GetFunction(callable);
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
uint32_t
pt_key_for_builtin_slow(pt_tracer *tracer, PyObject *callable, int is_function,
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

/* ======================================================================== */
/* Reading                                                                  */
/* ======================================================================== */

int
pt_tsc_supported(void)
{
    return PT_HAVE_TSC;
}

/* A simultaneous reading of the event clock and CLOCK_MONOTONIC: the tick
 * reading is the midpoint of two around the nanosecond one. */
void
pt_clock_pair(int use_tsc, int64_t *ticks, int64_t *ns)
{
    pt_tracer probe;
    probe.flags = use_tsc && PT_HAVE_TSC ? PT_FLAG_TSC : 0;
    int64_t before = pt_ticks(&probe);
    *ns = pt_clock();
    int64_t after = pt_ticks(&probe);
    *ticks = before + (after - before) / 2;
}

static int64_t
pt_timespec_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

#define PT_ANCHOR_PAIRS 7

/* Puts the trace on wall-clock time (torch.profiler's timeline) without
 * touching the event clock: each CLOCK_REALTIME reading sits between two
 * CLOCK_MONOTONIC ones; of PT_ANCHOR_PAIRS such pairs the one with the median
 * offset wins (a preemption inside one pair moves only that pair), and the
 * spread (range of the offsets, at least the winner's bracket) says how far
 * to trust it. */
void
pt_take_anchor(int64_t out[3])
{
    int64_t mono[PT_ANCHOR_PAIRS], offset[PT_ANCHOR_PAIRS], width[PT_ANCHOR_PAIRS];
    int64_t sorted[PT_ANCHOR_PAIRS];
    for (int i = 0; i < PT_ANCHOR_PAIRS; i++) {
        struct timespec before, real, after;
        clock_gettime(CLOCK_MONOTONIC, &before);
        clock_gettime(CLOCK_REALTIME, &real);
        clock_gettime(CLOCK_MONOTONIC, &after);
        int64_t b = pt_timespec_ns(&before), a = pt_timespec_ns(&after);
        mono[i] = b + (a - b) / 2;
        width[i] = a - b;
        offset[i] = pt_timespec_ns(&real) - mono[i];
        sorted[i] = offset[i];
    }
    for (int i = 1; i < PT_ANCHOR_PAIRS; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            int64_t t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    int64_t median = sorted[PT_ANCHOR_PAIRS / 2];
    int chosen = 0;
    while (offset[chosen] != median)
        chosen++;
    int64_t spread = sorted[PT_ANCHOR_PAIRS - 1] - sorted[0];
    out[0] = mono[chosen];
    out[1] = mono[chosen] + median;
    out[2] = spread > width[chosen] ? spread : width[chosen];
}

int
pt_realtime_anchor(pt_tracer *tracer, int at_stop, int64_t *monotonic_ns, int64_t *realtime_ns,
                   int64_t *spread_ns)
{
    if (tracer->state == PT_STATE_NEW || (at_stop && tracer->state != PT_STATE_STOPPED)) {
        pt_set_error(tracer, "no clock anchor before start (at start) or stop (at stop)");
        return PT_ERR_STATE;
    }
    const int64_t *anchor = tracer->anchor[at_stop ? 1 : 0];
    *monotonic_ns = anchor[0];
    *realtime_ns = anchor[1];
    *spread_ns = anchor[2];
    return PT_OK;
}

int64_t pt_start_ns(pt_tracer *tracer) { return tracer->start_ns; }
int64_t pt_stop_ns(pt_tracer *tracer) { return tracer->stop_ns; }
int64_t pt_start_ticks(pt_tracer *tracer) { return tracer->start_ticks; }
int64_t pt_stop_ticks(pt_tracer *tracer) { return tracer->stop_ticks; }
int pt_thread_count(pt_tracer *tracer) { return tracer->n_threads; }
uint32_t pt_key_count(pt_tracer *tracer) { return tracer->n_keys; }

uint64_t
pt_current_tstate_id(void)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    uint64_t id = PyThreadState_GetID(PyThreadState_Get());
    PyGILState_Release(gil);
    return id;
}

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
    for (pt_chunk *chunk = thread->head; chunk; chunk = chunk->next) {
        uint64_t used = pt_chunk_used(thread, chunk);
        out->n_events += used;
        out->n_calls += pt_count_calls(chunk->events, used);
    }
    return PT_OK;
}

int
pt_thread_copy_events(pt_tracer *tracer, int index, pt_event *out, uint64_t cap)
{
    pt_thread *thread = pt_thread_for_reading(tracer, index);
    if (!thread)
        return tracer->state != PT_STATE_STOPPED ? PT_ERR_STATE : PT_ERR_ARG;
    uint64_t n = 0;
    for (pt_chunk *chunk = thread->head; chunk; chunk = chunk->next) {
        uint64_t used = pt_chunk_used(thread, chunk);
        if (n + used > cap) {
            pt_set_error(tracer, "event buffer too small");
            return PT_ERR_ARG;
        }
        memcpy(out + n, chunk->events, used * sizeof(pt_event));
        n += used;
    }
    return PT_OK;
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

/* Iterates a thread's events in order; used by replay. */
int
pt_thread_events_each(pt_tracer *tracer, int index,
                      int (*visit)(void *ctx, const pt_event *ev, uint64_t n),
                      void *ctx)
{
    pt_thread *thread = pt_thread_for_reading(tracer, index);
    if (!thread)
        return tracer->state != PT_STATE_STOPPED ? PT_ERR_STATE : PT_ERR_ARG;
    for (pt_chunk *chunk = thread->head; chunk; chunk = chunk->next) {
        int rc = visit(ctx, chunk->events, pt_chunk_used(thread, chunk));
        if (rc != PT_OK)
            return rc;
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

/* ======================================================================== */
/* SIGTERM relay (processes.py)                                             */
/* ======================================================================== */

/* A Python-level SIGTERM handler only notes the signal for the eval loop. If the
 * signal lands just before the main thread blocks in a C call that is not
 * interrupted later (multiprocessing's semaphore wait: the idle Pool worker that
 * Pool.terminate() signals), the handler never runs and the process never exits.
 * The relay runs Python's C handler, then re-sends SIGTERM every 200 ms: one of
 * those interrupts the wait and the Python handler runs (it ends the process). */
#ifdef __linux__
static void (*pt_python_sigterm)(int);
static timer_t pt_sigterm_timer;
static int pt_sigterm_timer_made;

static void
pt_sigterm_relay(int sig)
{
    int saved = errno;
    if (pt_python_sigterm)
        pt_python_sigterm(sig);
    if (pt_sigterm_timer_made) {
        struct itimerspec again = {{0, 200000000}, {0, 200000000}};
        timer_settime(pt_sigterm_timer, 0, &again, NULL);    /* async-signal-safe */
    }
    errno = saved;
}

/* Timers are not inherited by fork: the child makes its own. */
static void
pt_sigterm_after_fork(void)
{
    pt_sigterm_timer_made = 0;
}
#else
static void pt_sigterm_after_fork(void) {}
#endif

int
pt_sigterm_guard(int on)
{
#ifdef __linux__
    if (!on) {
        if (pt_sigterm_timer_made) {
            timer_delete(pt_sigterm_timer);
            pt_sigterm_timer_made = 0;
        }
        return PT_OK;
    }
    struct sigaction current;
    if (sigaction(SIGTERM, NULL, &current) != 0 || (current.sa_flags & SA_SIGINFO) ||
        current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN)
        return PT_ERR_STATE;
    if (!pt_sigterm_timer_made) {
        struct sigevent event;
        memset(&event, 0, sizeof event);
        event.sigev_notify = SIGEV_SIGNAL;
        event.sigev_signo = SIGTERM;
        if (timer_create(CLOCK_MONOTONIC, &event, &pt_sigterm_timer) != 0)
            return PT_ERR_STATE;
        pt_sigterm_timer_made = 1;
    }
    if (current.sa_handler != pt_sigterm_relay) {
        pt_python_sigterm = current.sa_handler;
        current.sa_handler = pt_sigterm_relay;
        if (sigaction(SIGTERM, &current, NULL) != 0)
            return PT_ERR_STATE;
    }
    return PT_OK;
#else
    (void)on;
    return PT_OK;
#endif
}

/* pt_buffers.c - where events live: per-thread chunks from a small process-wide
 * pool, and the bound on them (max_events) that spills the oldest chunk to a
 * file or drops it, counted. */
#include "pt_record_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

/* ======================================================================== */
/* Chunk pool                                                               */
/* ======================================================================== */


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

/* A child forked while another thread held the pool lock must not inherit it. */
static void
pt_pool_after_fork_in_child(void)
{
    pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;
    pt_pool_lock = unlocked;
    pt_sigterm_after_fork();
    pt_flight_after_fork();
    pt_hooks_after_fork();
}

static void
pt_register_fork_handler(void)
{
    pthread_atfork(NULL, NULL, pt_pool_after_fork_in_child);
}

void
pt_buffers_init_once(void)
{
    pthread_once(&pt_fork_handler_once, pt_register_fork_handler);
}

void
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


static void pt_spill_give_up(pt_tracer *tracer);

#define PT_SMALLEST_CHUNK 512       /* events: a bounded thread's first chunk */

/* Whether the spill file is still ours (pt_internal.h: pt_file_id): a
 * descriptor the program closed is opened again by its path, at the end of its
 * whole blocks; the old FILE is left unclosed, its number being the program's
 * now. When the file is gone too, the spill is lost: the sticky error says so,
 * and recording stops. */
static int
pt_spill_ours(pt_tracer *tracer)
{
    if (!tracer->spill)
        return 0;
    if (pt_fd_names(fileno(tracer->spill), &tracer->spill_id))
        return 1;
    int fd = tracer->spill_path ? open(tracer->spill_path, O_RDWR | O_CLOEXEC) : -1;
    FILE *again = NULL;
    if (fd >= 0 && pt_fd_names(fd, &tracer->spill_id) && (again = fdopen(fd, "r+b"))) {
        setvbuf(again, NULL, _IONBF, 0);
        if (fseeko(again, (off_t)tracer->spill_bytes, SEEK_SET) == 0) {
            tracer->spill = again;
            return 1;
        }
        fclose(again);
    } else if (fd >= 0) {
        close(fd);
    }
    tracer->spill = NULL;
    tracer->spill_errno = EBADF;
    if (!tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error(tracer, "the program closed the spill file's descriptor and its file "
                     "was removed; recording stopped there: the trace holds what was "
                     "written before");
    }
    tracer->flags |= PT_FLAG_NOOP;
    pt_handle_sync(tracer);
    return 0;
}

/* pt_record_internal.h; also at the tracer's release (pt_core.c) */
int
pt_spill_close(pt_tracer *tracer)
{
    FILE *spill = tracer->spill;
    tracer->spill = NULL;
    if (!spill || !pt_fd_names(fileno(spill), &tracer->spill_id))
        return 0;
    return fclose(spill);
}

/* Appends one block (n events of thread) to the spill file. On failure the file is
 * cut back to its last whole block, spill_errno says why, and 0 is returned: the
 * file stays open, the caller decides (try again elsewhere, or give up); when it
 * cannot be cut back, it is given up at once. */
static int
pt_spill_write(pt_tracer *tracer, pt_thread *thread, const pt_chunk *chunk, uint64_t n)
{
    pt_spill_block block = {(uint32_t)thread->index, 0, n, chunk->base_ticks};
    if (!pt_spill_ours(tracer))
        return 0;               /* (lost: said, recording stopped) */
    if (fwrite(&block, sizeof block, 1, tracer->spill) == 1 &&
        fwrite(chunk->events, sizeof(pt_event), n, tracer->spill) == n) {
        tracer->spill_bytes += sizeof block + n * sizeof(pt_event);
        tracer->spill_errno = 0;
        return 1;
    }
    tracer->spill_errno = errno ? errno : EIO;
    clearerr(tracer->spill);
    /* Unbuffered: what went in is in the file; a partial block would make the
     * blocks after it unreadable. (load() stops at the length meta.json gives.) */
    if (ftruncate(fileno(tracer->spill), (off_t)tracer->spill_bytes) != 0 ||
        fseeko(tracer->spill, (off_t)tracer->spill_bytes, SEEK_SET) != 0)
        pt_spill_give_up(tracer);
    return 0;
}

/* The spill file failed for good: the file keeps what it holds, and recording
 * stops (a gap inside a thread's blocks would make them unreadable, and events
 * that can go nowhere only cost time). The sticky error says why. */
static void
pt_spill_give_up(pt_tracer *tracer)
{
    if (!tracer->spill)
        return;
    if (!tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error(tracer, "writing spilled events failed (%s); recording stopped there: "
                     "the trace holds what was written before",
                     strerror(tracer->spill_errno ? tracer->spill_errno : EIO));
    }
    pt_spill_close(tracer);
    tracer->flags |= PT_FLAG_NOOP;
    pt_handle_sync(tracer);
}

/* The spill hook's file failed and no other place took it (a full disk): recording
 * stops, but the chunks not written stay in memory (the file stays open) for
 * pt_spill_rest at stop, which may find room again (or a new place: see
 * pt_spill_move); dropping them would lose all of a trace not spilled yet. */
static void
pt_spill_hold(pt_tracer *tracer)
{
    if (!tracer->hot_error) {
        tracer->hot_error = PT_ERR_PYTHON;
        pt_set_error(tracer, "writing spilled events failed (%s); recording stopped there: "
                     "the events not written yet were kept in memory for the end",
                     strerror(tracer->spill_errno ? tracer->spill_errno : EIO));
    }
    tracer->spill_held = 1;
    tracer->flags |= PT_FLAG_NOOP;
    pt_handle_sync(tracer);
}

/* Writes n events of thread to the spill file; on failure gives the file up and
 * returns 0, and the caller drops them instead. */
static int
pt_spill_events(pt_tracer *tracer, pt_thread *thread, const pt_chunk *chunk,
                uint64_t n)
{
    if (!tracer->spill)
        return 0;
    if (pt_spill_write(tracer, thread, chunk, n))
        return 1;
    pt_spill_give_up(tracer);
    return 0;
}

/* Empties owner's oldest chunk in place (a thread's only chunk) or frees it, its
 * n events counted as spilled or as dropped. */
static void
pt_release_head(pt_tracer *tracer, pt_thread *owner, uint64_t n, int spilled)
{
    pt_chunk *victim = owner->head;
    if (spilled) {
        tracer->spilled_events += n;
        owner->spilled += n;
    } else {
        owner->dropped += n;
    }
    if (victim == owner->tail) {
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

/* Moves owner's oldest chunk out of memory: to the spill file, or dropped and
 * counted. A thread's only chunk is emptied in place. */
static void
pt_evict_head(pt_tracer *tracer, pt_thread *owner)
{
    pt_chunk *victim = owner->head;
    uint64_t n = pt_chunk_used(owner, victim);
    pt_release_head(tracer, owner, n, pt_spill_events(tracer, owner, victim, n));
}

/* Evicts the oldest chunk holding events of any thread. Returns 0 when no chunk
 * holds anything. freeing: only a chunk whose eviction frees its memory (not a
 * thread's only one, which is emptied in place and stays held): making room by
 * emptying those would wipe every thread's newest events and free nothing. */
static int
pt_evict_oldest(pt_tracer *tracer, int freeing)
{
    pt_thread *owner = NULL;
    for (pt_thread *t = tracer->threads; t; t = t->next) {
        pt_chunk *head = t->head;
        if (head && (head != t->tail ? 1 : !freeing && t->cursor > head->events) &&
            (!owner || head->seq < owner->head->seq))
            owner = t;
    }
    if (!owner)
        return 0;
    pt_evict_head(tracer, owner);
    return 1;
}

/* The flight recorder by seconds: drops every chunk whose events all came
 * before cutoff (its successor began before it), a thread's last chunk kept. */
static void
pt_drop_older(pt_tracer *tracer, int64_t cutoff)
{
    for (pt_thread *t = tracer->threads; t; t = t->next)
        while (t->head && t->head != t->tail && t->head->next->base_ticks < cutoff)
            pt_release_head(tracer, t, t->head->used, 0);
}

int
pt_set_max_age(pt_tracer *tracer, int64_t ticks)
{
    if (tracer->state != PT_STATE_NEW || !tracer->max_events || tracer->spill || ticks < 0) {
        pt_set_error(tracer, "a ring's age is set after its bounds, without a spill file, "
                             "before start");
        return PT_ERR_STATE;
    }
    tracer->max_age_ticks = ticks;
    return PT_OK;
}

/* Runs the spill hook (see pt_set_spill_hook), keeping any pending exception.
 * It may release the GIL (it writes a file): other threads can record meanwhile,
 * or stop tracing. Returns 1 when tracing stopped meanwhile (the tracer may be
 * gone: see pt_python_enter), else 0. */
static int
pt_run_spill_hook(pt_tracer *tracer)
{
    if (tracer->spill_hook_busy || tracer->classify_from || tracer->state != PT_STATE_RUNNING)
        return tracer->state != PT_STATE_RUNNING;
    tracer->spill_hook_busy = 1;
    pt_python_enter(tracer);
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
    int stopped = tracer->state != PT_STATE_RUNNING;
    return pt_python_leave(tracer) || stopped;
}

/* Spills this thread's full chunk at once and empties it in place (the spill
 * hook's mode). Returns 1 when done, 0 when it cannot (nothing to spill, or the
 * file failed), -1 when tracing stopped meanwhile (the event is dropped). A block
 * that fails to go in is tried once more after the hook ran again, which may
 * have moved the file (see pt_spill_errno). */
static int
pt_spill_own_chunk(pt_tracer *tracer, pt_thread *thread)
{
    for (int attempt = 0;; attempt++) {
        /* The hook may have let other threads run: one of them may have stopped
         * tracing (stop() waits for a hook in progress, not for this tail) and
         * dropped the trace, or emptied this thread's chunk already (more threads
         * than max_events has chunks). */
        if (pt_run_spill_hook(tracer))
            return -1;
        if (thread->cursor < thread->limit)
            return 1;
        if (!tracer->spill || thread->head != thread->tail)
            return 0;
        uint64_t n = pt_chunk_used(thread, thread->head);
        if (pt_spill_write(tracer, thread, thread->head, n)) {
            pt_release_head(tracer, thread, n, 1);
            return thread->cursor < thread->limit;
        }
        if (tracer->spill && (attempt > 0 || tracer->spill_hook_busy)) {
            pt_spill_hold(tracer);
            return -1;
        }
        if (attempt > 0 || tracer->spill_hook_busy || !tracer->spill) {
            pt_spill_give_up(tracer);
            pt_release_head(tracer, thread, n, 0);
            return thread->cursor < thread->limit;
        }
    }
}

int
pt_spill_errno(pt_tracer *tracer)
{
    return tracer->spill_errno;
}

int
pt_spill_fd(pt_tracer *tracer)
{
    return pt_spill_ours(tracer) ? fileno(tracer->spill) : -1;
}

uint64_t
pt_spill_bytes(pt_tracer *tracer)
{
    return tracer->spill_bytes;
}

/* Copies the first `bytes` of in to out. Returns 0, or an errno. */
static int
pt_copy_file(int in, int out, uint64_t bytes)
{
    char buffer[1 << 16];
    uint64_t done = 0;
    while (done < bytes) {
        size_t want = bytes - done < sizeof buffer ? (size_t)(bytes - done) : sizeof buffer;
        ssize_t got = pread(in, buffer, want, (off_t)done);
        if (got <= 0)
            return got < 0 ? errno : EIO;
        for (ssize_t put = 0; put < got;) {
            ssize_t n = write(out, buffer + put, (size_t)(got - put));
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                return errno;
            }
            put += n;
        }
        done += (uint64_t)got;
    }
    return 0;
}

int
pt_spill_move(pt_tracer *tracer, const char *path)
{
    /* Under the GIL throughout: no thread spills while the file is copied. */
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = PT_OK;
    if (!pt_spill_ours(tracer)) {
        pt_set_error(tracer, "there is no spill file to move");
        rc = PT_ERR_STATE;
        goto done;
    }
    int out = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    int err = out < 0 ? errno : pt_copy_file(fileno(tracer->spill), out, tracer->spill_bytes);
    FILE *moved = NULL;
    if (!err && !(moved = fdopen(out, "r+b")))
        err = errno ? errno : ENOMEM;
    if (err) {
        if (out >= 0) {
            close(out);
            unlink(path);
        }
        tracer->spill_errno = err;
        pt_set_error(tracer, "cannot move the spill file to %s: %s", path, strerror(err));
        rc = PT_ERR_ARG;
        goto done;
    }
    setvbuf(moved, NULL, _IONBF, 0);
    char *moved_path = strdup(path);
    pt_file_id moved_id;
    if (!moved_path || !pt_file_id_of(fileno(moved), &moved_id)) {
        free(moved_path);
        fclose(moved);
        unlink(path);
        pt_set_error(tracer, "cannot move the spill file to %s: out of memory", path);
        rc = PT_ERR_ARG;
        goto done;
    }
    pt_spill_close(tracer);
    tracer->spill = moved;
    free(tracer->spill_path);
    tracer->spill_path = moved_path;
    tracer->spill_id = moved_id;
    tracer->spill_errno = 0;
done:
    PyGILState_Release(gil);
    return rc;
}

int
pt_spill_rest(pt_tracer *tracer)
{
    tracer->spill_held = 0;     /* the held chunks go now, or are dropped and counted */
    while (pt_evict_oldest(tracer, 0))
        ;
    int rc = PT_OK;
    if (tracer->spill && pt_spill_close(tracer) != 0) {
        pt_set_error(tracer, "closing the spill file failed");
        rc = PT_ERR_PYTHON;
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
        tracer->spill = fopen(spill_path, "w+b");
        if (!tracer->spill) {
            pt_set_error(tracer, "cannot write %s", spill_path);
            return PT_ERR_ARG;
        }
        /* Unbuffered: a block is in the file once written (a killed process keeps
         * it), and a forked child's copy of the stream has nothing to flush. */
        setvbuf(tracer->spill, NULL, _IONBF, 0);
        static const char header[16] = PT_EVENTS_HEADER;
        if (fwrite(header, sizeof header, 1, tracer->spill) != 1) {
            fclose(tracer->spill);
            tracer->spill = NULL;
            pt_set_error(tracer, "cannot write %s", spill_path);
            return PT_ERR_ARG;
        }
        tracer->spill_bytes = sizeof header;
        tracer->spill_path = strdup(spill_path);
        if (!tracer->spill_path || !pt_file_id_of(fileno(tracer->spill), &tracer->spill_id)) {
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
        per_chunk < PT_SMALLEST_CHUNK ? PT_SMALLEST_CHUNK : per_chunk > largest ? largest
                                                                              : per_chunk;
    return PT_OK;
}

int
pt_set_spill_hook(pt_tracer *tracer, void *py_hook)
{
    if (tracer->state != PT_STATE_NEW || !(tracer->spill || tracer->max_events)) {
        pt_set_error(tracer, "the spill hook is set after the bounds, before start");
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

/* thread's next chunk's events under max_events: an eighth of the budget, less
 * when many threads hold one. Each thread's last chunk stays held however empty
 * (eviction cannot free it), so together they take at most about half the
 * budget: the rest holds whole chunks, evicted oldest first. Without a spill
 * hook a thread's chunks also start small and double as it fills them, so that
 * idle threads hold little (with eighths, 8 threads' last chunks took the whole
 * budget, and each new chunk emptied all the others: a ring of 16M kept 5% of
 * its size). With one, each thread reuses its one chunk (spilled when full, the
 * hook run each time): it keeps the size it started with. */
static uint64_t
pt_bounded_chunk_events(pt_tracer *tracer, const pt_thread *thread)
{
    uint64_t holders = 1;
    for (pt_thread *t = tracer->threads; t; t = t->next)
        holders += t->tail != NULL;
    uint64_t events = tracer->bounded_chunk_events;
    uint64_t share = tracer->max_events / (2 * holders);
    if (!tracer->spill_hook) {
        uint64_t doubled = thread->tail ? 2 * thread->tail->capacity : 0;
        if (doubled < share)
            share = doubled;
    }
    if (share < events)
        events = share < PT_SMALLEST_CHUNK ? PT_SMALLEST_CHUNK : share;
    return events;
}

/* Appends a fresh chunk; never copies recorded events. Under max_events, first
 * spills or drops the oldest chunks so that what is held stays within it. */
int
pt_thread_grow(pt_tracer *tracer, pt_thread *thread)
{
    size_t bytes = thread->head ? PT_CHUNK_BYTES : PT_FIRST_CHUNK_BYTES;
    if (tracer->max_events) {
        if (tracer->spill_held)     /* recording stopped: nothing evicted, nothing new */
            return PT_ERR_STATE;
        uint64_t events = pt_bounded_chunk_events(tracer, thread);
        bytes = sizeof(pt_chunk) + events * sizeof(pt_event);
        if (thread->tail)
            thread->tail->used = (uint64_t)(thread->cursor - thread->tail->events);
        if (tracer->spill_hook && thread->tail) {
            int spilled = pt_spill_own_chunk(tracer, thread);
            if (spilled)
                return spilled > 0 ? PT_OK : PT_ERR_STATE;
        }
        while (tracer->held_events + events > tracer->max_events && pt_evict_oldest(tracer, 1))
            ;
        if (tracer->max_age_ticks)
            pt_drop_older(tracer, thread->last_ticks - tracer->max_age_ticks);
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

/* Records a pause longer than a 32-bit delta in TIME aux events, each carrying up to
 * 2^58 - 1 ticks (its payload the high bits): all of it, however long, so the
 * event after it takes delta 0. Returns pt_append's answer (the last one's, or
 * the first that failed: the clock advanced by those stored). */
int
pt_append_time(pt_tracer *tracer, pt_thread *thread, uint64_t delta)
{
    int rc = 1;
    do {
        uint64_t piece = delta < PT_AUX_TIME_MAX ? delta : PT_AUX_TIME_MAX;
        rc = pt_append(tracer, thread, (uint32_t)piece,
                       pt_aux_word(PT_AUX_TIME, (uint32_t)(piece >> 32)));
        if (rc <= 0)
            return rc;
        thread->last_ticks += (int64_t)piece;
        delta -= piece;
    } while (delta);
    return rc;
}

int
pt_aux_fits(pt_tracer *tracer, uint32_t sub_kind, long long index)
{
    if (index >= 0 && index < PT_AUX_PAYLOADS)
        return 1;
    if (!tracer->hot_error) {
        tracer->hot_error = PT_ERR_ARG;
        pt_set_error(tracer, sub_kind == PT_AUX_TAG
                     ? "a tag index past 2^26: later tagged calls were left untagged"
                     : "more than 2^26 annotation args: later regions were left without "
                       "their args");
    }
    return 0;
}

/* pt_live.c - the .pftrace encoded while the program runs, on a thread of its own.
 *
 * A traced process that spills every full chunk to its events.bin (a followed
 * process, `run -o OUT.pftrace`) would otherwise encode all of it after the
 * program ended. This unit follows events.bin as it grows (Python tells it the
 * length in whole blocks at each spill: pt_live_advance) on a pthread that holds
 * no GIL, so the second core does the work: each thread's blocks go through a
 * stream walk (pt_walk_new_stream) and the .pftrace encoder (pt_pftrace_records)
 * into that thread's own part file, deflated a piece at a time (pt_deflate.c).
 * At the end only the last blocks are left; Python then writes the file's head
 * (process and thread tracks, clocks) and appends each thread's part, so every
 * sequence stays whole, as a whole-trace export writes it.
 *
 * Keys come from Python before the spill that first uses them (the same moment
 * keys.jsonl is written): their TrackEvent and InternedData bytes and how the
 * walk hides them, appended to a staging area under a lock the encoder holds
 * only to take them. The encoder never blocks the program: a block it has not
 * reached waits on disk. Anything it cannot do (a tag or args, which only a scan
 * decides; bad input; no memory; a failed write) stops it with a status, and
 * Python writes the file from the whole trace instead. A forked child's copy is
 * left alone (its thread and lock are the parent's): freeing it does nothing.
 */
#include "pt_export_internal.h"
#include "pt_protobuf.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/resource.h>
#include <sys/syscall.h>
#endif

#define PT_LIVE_HEADER 16           /* events.bin: magic, version, record size */
#define PT_LIVE_BLOCK_HEADER 24     /* thread index, reserved, count, base ticks */
#define PT_LIVE_PIECE (256u << 10)  /* input of one compressed_packets packet */
#define PT_LIVE_NICE 10             /* the encoder thread's nice value */

typedef struct {
    pt_walk *walk;
    uint8_t *interned_done;         /* per key: its name is interned on the sequence */
    uint32_t n_done;
    int64_t last_ns;
    char *pending;                  /* encoded packets not yet written */
    uint64_t used, cap;
    uint64_t events;
} pt_live_thread;

/* A growing blob of per-key bytes: key k is bytes[offsets[k]..offsets[k + 1]),
 * PT_PF_BLOB_PADDING zero bytes after the last. */
typedef struct {
    char *bytes;
    uint32_t *offsets;
    uint64_t len, cap;
    uint32_t n;
    uint64_t offsets_cap;
} pt_live_blob;

struct pt_live {
    pid_t pid;                      /* the process whose thread it runs on */
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    /* under lock */
    uint64_t committed;             /* events.bin's length in whole blocks */
    int finishing;
    int abandon;                    /* pt_live_free while it runs: stop, write nothing more */
    int hand_over;                  /* pt_live_finish: the thread stops between blocks */
    int done;
    int64_t stop_ticks;
    pt_live_blob staged_events, staged_interned;
    uint8_t *staged_hidden;
    uint32_t n_staged;
    uint64_t staged_hidden_cap;
    /* the encoder's own */
    int fd;
    char *spill_path;           /* to open it again: the program closed fd (pt_live_read) */
    pt_file_id spill_id;
    char *part_prefix;
    pt_deflater *deflater;
    char *deflated;
    uint64_t deflated_cap;
    pt_walk_tables tables;
    uint32_t first_sequence;        /* thread i's: pt_live_sequence(first_sequence, i) */
    pt_live_blob events, interned;
    uint8_t *hidden;
    uint32_t n_keys;
    uint64_t hidden_cap;
    const char *marks[3];
    uint32_t mark_lens[3];
    char *mark_bytes;
    pt_live_thread *threads;
    uint32_t n_threads;
    uint64_t threads_cap;
    pt_event *buffer;
    uint64_t buffer_cap;
    uint64_t pos;
    uint64_t events_done;
    int status;                     /* PT_OK, or why it stopped */
    int error_number;               /* errno of a failed read or write */
    int stale;
};

/* Appends n keys' bytes to b: key i's are bytes[offsets[i] - offsets[0] ..
 * offsets[i + 1] - offsets[0]) (n + 1 offsets, as a blob's own). */
static int
pt_live_blob_add(pt_live_blob *b, const char *bytes, const uint32_t *offsets, uint32_t n)
{
    uint64_t more = (uint64_t)offsets[n] - offsets[0];
    if (b->len + more > UINT32_MAX)
        return PT_ERR_ARG;
    if (pt_grow((void **)&b->offsets, &b->offsets_cap, (uint64_t)b->n + n + 1,
                sizeof *b->offsets) != PT_OK ||
        pt_grow((void **)&b->bytes, &b->cap, b->len + more + PT_PF_BLOB_PADDING, 1) != PT_OK)
        return PT_ERR_NOMEM;
    if (b->n == 0)
        b->offsets[0] = 0;
    memcpy(b->bytes + b->len, bytes, more);
    for (uint32_t i = 0; i < n; i++)
        b->offsets[b->n + i + 1] = (uint32_t)(b->len + offsets[i + 1] - offsets[0]);
    b->len += more;
    b->n += n;
    memset(b->bytes + b->len, 0, PT_PF_BLOB_PADDING);
    return PT_OK;
}

/* Appends n hiding values to *hidden (*count of them so far). */
static int
pt_live_hidden_add(uint8_t **hidden, uint32_t *count, uint64_t *cap, const uint8_t *values,
                   uint32_t n)
{
    if (pt_grow((void **)hidden, cap, (uint64_t)*count + n, 1) != PT_OK)
        return PT_ERR_NOMEM;
    memcpy(*hidden + *count, values, n);
    *count += n;
    return PT_OK;
}

static void
pt_live_blob_free(pt_live_blob *b)
{
    free(b->bytes);
    free(b->offsets);
}

#define PT_LIVE_UPPER 2147483650u          /* 2^31 + 2: past every pid's range */
#define PT_LIVE_UPPER_SPAN 2147483646u     /* 2^32 - PT_LIVE_UPPER */

uint32_t
pt_live_sequence(uint32_t first_sequence, uint32_t index)
{
    if (index < PT_LIVE_RANGE)
        return first_sequence + index;
    uint64_t from = (uint64_t)first_sequence - 2 + (index - PT_LIVE_RANGE);
    return PT_LIVE_UPPER + (uint32_t)(from % PT_LIVE_UPPER_SPAN);
}

pt_live *
pt_live_new(const char *spill_path, const char *part_prefix, uint32_t first_sequence,
            int level, int64_t tick0, int64_t ns0, double ns_per_tick,
            int64_t min_ns, const char *mark_stop, uint32_t stop_len, const char *mark_start,
            uint32_t start_len)
{
    pt_live *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->fd = -1;
    e->pid = getpid();
    e->first_sequence = first_sequence;
    pthread_mutex_init(&e->lock, NULL);
    pthread_cond_init(&e->wake, NULL);
    e->part_prefix = strdup(part_prefix);
    e->mark_bytes = malloc((size_t)stop_len + start_len + 1);
    if (level >= 0)
        e->deflater = pt_deflater_new(level);
    if (!e->part_prefix || !e->mark_bytes || (level >= 0 && !e->deflater)) {
        pt_live_free(e);
        return NULL;
    }
    memcpy(e->mark_bytes, mark_stop, stop_len);
    memcpy(e->mark_bytes + stop_len, mark_start, start_len);
    e->marks[0] = e->mark_bytes;
    e->marks[PT_PF_MARK_OPEN_AT_STOP] = e->mark_bytes;
    e->marks[PT_PF_MARK_OPEN_AT_START] = e->mark_bytes + stop_len;
    e->mark_lens[PT_PF_MARK_OPEN_AT_STOP] = stop_len;
    e->mark_lens[PT_PF_MARK_OPEN_AT_START] = start_len;
    e->tables.tick0 = tick0;
    e->tables.ns0 = ns0;
    e->tables.ns_per_tick = ns_per_tick;
    e->tables.min_ns = min_ns > 0 ? min_ns : 0;
    e->pos = PT_LIVE_HEADER;
    e->fd = open(spill_path, O_RDONLY | O_CLOEXEC);
    e->spill_path = strdup(spill_path);
    if (e->fd < 0 || !e->spill_path || !pt_file_id_of(e->fd, &e->spill_id)) {
        pt_live_free(e);
        return NULL;
    }
    return e;
}

int
pt_live_add_keys(pt_live *e, const char *events, const uint32_t *event_offsets,
                 const char *interned, const uint32_t *interned_offsets, const uint8_t *hidden,
                 uint32_t n)
{
    pthread_mutex_lock(&e->lock);
    int rc = pt_live_blob_add(&e->staged_events, events, event_offsets, n);
    if (rc == PT_OK)
        rc = pt_live_blob_add(&e->staged_interned, interned, interned_offsets, n);
    if (rc == PT_OK)
        rc = pt_live_hidden_add(&e->staged_hidden, &e->n_staged, &e->staged_hidden_cap,
                                hidden, n);
    pthread_mutex_unlock(&e->lock);
    return rc;
}

/* Under lock: the staged keys become the encoder's. */
static int
pt_live_take_keys(pt_live *e)
{
    uint32_t n = e->n_staged;
    if (!n)
        return PT_OK;
    int rc = pt_live_blob_add(&e->events, e->staged_events.bytes, e->staged_events.offsets, n);
    if (rc == PT_OK)
        rc = pt_live_blob_add(&e->interned, e->staged_interned.bytes,
                              e->staged_interned.offsets, n);
    if (rc == PT_OK)
        rc = pt_live_hidden_add(&e->hidden, &e->n_keys, &e->hidden_cap, e->staged_hidden, n);
    if (rc != PT_OK)
        return rc;
    e->staged_events.len = e->staged_interned.len = 0;
    e->staged_events.n = e->staged_interned.n = 0;
    e->n_staged = 0;
    e->tables.hidden = e->hidden;
    e->tables.n_hidden = e->n_keys;
    for (uint32_t i = 0; i < e->n_threads; i++)
        if (e->threads[i].walk)
            pt_walk_stream_keys(e->threads[i].walk, e->hidden, e->n_keys);
    return PT_OK;
}

static int
pt_live_read(pt_live *e, void *out, uint64_t n, uint64_t at)
{
    char *p = out;
    if (!pt_fd_names(e->fd, &e->spill_id)) {
        /* the program closed it (its number may be a file of its own now) */
        int fd = open(e->spill_path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || !pt_fd_names(fd, &e->spill_id)) {
            if (fd >= 0)
                close(fd);
            e->fd = -1;
            e->error_number = EBADF;
            return PT_ERR_LIVE_IO;
        }
        e->fd = fd;
    }
    while (n) {
        ssize_t got = pread(e->fd, p, n, (off_t)at);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0) {
            e->error_number = got < 0 ? errno : 0;
            return PT_ERR_LIVE_IO;
        }
        p += got;
        at += (uint64_t)got;
        n -= (uint64_t)got;
    }
    return PT_OK;
}

static int
pt_live_write_all(int fd, const char *p, uint64_t n)
{
    while (n) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR)
            continue;
        if (put <= 0)
            return -1;
        p += put;
        n -= (uint64_t)put;
    }
    return 0;
}

/* Writes a thread's pending packets to its part file: whole, or deflated into
 * one compressed_packets packet (TracePacket field 50). */
static int
pt_live_flush(pt_live *e, uint32_t index)
{
    pt_live_thread *t = &e->threads[index];
    if (!t->used)
        return PT_OK;
    const char *data = t->pending;
    uint64_t n = t->used;
    char head[2 * PT_VARINT_MAX + 4];
    char *h = head;
    if (e->deflater) {
        uint64_t bound = pt_deflate_bound(e->deflater, n);
        if (bound > e->deflated_cap) {
            char *grown = realloc(e->deflated, bound);
            if (!grown)
                return PT_ERR_NOMEM;
            e->deflated = grown;
            e->deflated_cap = bound;
        }
        uint64_t size = pt_deflate_zlib(e->deflater, data, n, e->deflated, e->deflated_cap);
        if (!size)
            return PT_ERR_NOMEM;
        /* Trace.packet { compressed_packets (50) = size bytes } */
        *h++ = 0x0a;
        h = pt_put_varint(h, 2 + pt_varint_len(size) + size);
        *h++ = (char)0x92;
        *h++ = 0x03;
        h = pt_put_varint(h, size);
        data = e->deflated;
        n = size;
    }
    char path[4096];
    int len = snprintf(path, sizeof path, "%s%u", e->part_prefix, index);
    if (len < 0 || (size_t)len >= sizeof path)
        return PT_ERR_ARG;
    int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0 || pt_live_write_all(fd, head, (uint64_t)(h - head)) || pt_live_write_all(fd, data, n)) {
        e->error_number = errno;
        if (fd >= 0)
            close(fd);
        return PT_ERR_LIVE_IO;
    }
    close(fd);
    t->used = 0;
    return PT_OK;
}

/* The records the thread's walk has made final, encoded onto its sequence. */
static int
pt_live_encode(pt_live *e, uint32_t index)
{
    pt_live_thread *t = &e->threads[index];
    if (t->n_done < e->n_keys) {
        uint8_t *grown = realloc(t->interned_done, e->n_keys);
        if (!grown)
            return PT_ERR_NOMEM;
        memset(grown + t->n_done, 0, e->n_keys - t->n_done);
        t->interned_done = grown;
        t->n_done = e->n_keys;
    }
    const pt_walk_record *records;
    uint64_t n = pt_walk_ready(t->walk, &records), next = 0;
    while (next < n) {
        uint64_t written = 0, before = next;
        int rc = pt_pftrace_records(records, n, &next, &t->last_ns, e->events.bytes,
                                    e->events.offsets, e->interned.bytes,
                                    e->interned.offsets, t->interned_done, e->n_keys,
                                    e->marks, e->mark_lens,
                                    pt_live_sequence(e->first_sequence, index),
                                    t->pending + t->used,
                                    t->cap - t->used, &written);
        t->used += written;
        if (rc != PT_OK)
            return rc;
        if (next < n || t->used >= PT_LIVE_PIECE) {
            if (next == before && !t->used)
                return PT_ERR_ARG;      /* one packet larger than the buffer */
            rc = pt_live_flush(e, index);
            if (rc != PT_OK)
                return rc;
        }
    }
    pt_walk_consume(t->walk, n);
    return PT_OK;
}

static int
pt_live_thread_for(pt_live *e, uint32_t index, int64_t base_ticks)
{
    if (index >= e->n_threads) {
        /* grown by half at least: a program starting thousands of threads */
        uint64_t want = (uint64_t)index + 1, cap = e->threads_cap;
        if (want > cap) {
            cap = want > cap + cap / 2 ? want : cap + cap / 2;
            pt_live_thread *grown = realloc(e->threads, cap * sizeof *grown);
            if (!grown)
                return PT_ERR_NOMEM;
            e->threads = grown;
            e->threads_cap = cap;
        }
        memset(e->threads + e->n_threads, 0, (index + 1 - e->n_threads) * sizeof *e->threads);
        e->n_threads = index + 1;
    }
    pt_live_thread *t = &e->threads[index];
    if (t->walk)
        return PT_OK;
    uint64_t biggest = 0;
    for (uint32_t k = 0; k < e->n_keys; k++) {
        uint64_t size = (uint64_t)e->events.offsets[k + 1] - e->events.offsets[k] +
                        e->interned.offsets[k + 1] - e->interned.offsets[k];
        if (size > biggest)
            biggest = size;
    }
    t->cap = PT_LIVE_PIECE + 2 * biggest + 4096;
    t->pending = malloc(t->cap);
    t->walk = pt_walk_new_stream(&e->tables, base_ticks);
    t->last_ns = e->tables.ns0;
    if (!t->pending || !t->walk)
        return PT_ERR_NOMEM;
    return PT_OK;
}

/* One block of events.bin at e->pos: fed to its thread's walk and encoded. */
static int
pt_live_block(pt_live *e)
{
    unsigned char header[PT_LIVE_BLOCK_HEADER];
    int rc = pt_live_read(e, header, sizeof header, e->pos);
    if (rc != PT_OK)
        return rc;
    uint32_t index;
    uint64_t n;
    int64_t base_ticks;
    memcpy(&index, header, 4);
    memcpy(&n, header + 8, 8);
    memcpy(&base_ticks, header + 16, 8);
    if (!n || n > (1u << 28))
        return PT_ERR_ARG;      /* damaged */
    if (index >= PT_LIVE_MAX_THREADS)
        return PT_ERR_LIVE_THREADS;
    if (n > e->buffer_cap) {
        pt_event *grown = realloc(e->buffer, n * sizeof *grown);
        if (!grown)
            return PT_ERR_NOMEM;
        e->buffer = grown;
        e->buffer_cap = n;
    }
    rc = pt_live_read(e, e->buffer, n * sizeof(pt_event), e->pos + PT_LIVE_BLOCK_HEADER);
    if (rc == PT_OK)
        rc = pt_live_thread_for(e, index, base_ticks);
    if (rc != PT_OK)
        return rc;
    pt_live_thread *t = &e->threads[index];
    rc = pt_walk_feed(t->walk, e->buffer, n);
    if (rc == PT_OK && pt_walk_stale(t->walk))
        e->stale = 1;
    if (rc == PT_OK && !e->stale)
        rc = pt_live_encode(e, index);
    e->pos += PT_LIVE_BLOCK_HEADER + n * sizeof(pt_event);
    t->events += n;
    e->events_done += n;
    return rc;
}

static int
pt_live_end(pt_live *e)
{
    for (uint32_t i = 0; i < e->n_threads; i++) {
        pt_live_thread *t = &e->threads[i];
        if (!t->walk)
            continue;
        pt_walk_stream_stop(t->walk, e->stop_ticks);
        int rc = pt_walk_finish(t->walk);
        if (rc == PT_OK && pt_walk_stale(t->walk))
            e->stale = 1;
        if (rc == PT_OK && !e->stale)
            rc = pt_live_encode(e, i);
        if (rc == PT_OK && !e->stale)
            rc = pt_live_flush(e, i);
        if (rc != PT_OK)
            return rc;
    }
    return PT_OK;
}

/* The encoder's loop: on its own thread (own: niced) until pt_live_finish hands
 * the rest over (the thread returns between two blocks), then on the finishing
 * caller's thread, at the program's priority: on a busy machine the niced thread
 * took seconds for the last blocks while the user waited (#33 item 10). */
static void
pt_live_loop(pt_live *e, int own)
{
    pthread_mutex_lock(&e->lock);
    for (;;) {
        while (e->committed <= e->pos && !e->finishing && !e->abandon)
            pthread_cond_wait(&e->wake, &e->lock);
        if (e->abandon) {
            e->done = 1;
            pthread_cond_broadcast(&e->wake);
            break;
        }
        if (own && e->hand_over)
            break;
        uint64_t committed = e->committed;
        int finishing = e->finishing;
        int rc = pt_live_take_keys(e);
        pthread_mutex_unlock(&e->lock);
        while (rc == PT_OK && !e->stale && e->pos < committed &&
               !(own && __atomic_load_n(&e->hand_over, __ATOMIC_RELAXED)))
            rc = pt_live_block(e);
        if (rc == PT_OK && !e->stale && finishing && e->pos >= committed)
            rc = pt_live_end(e);
        pthread_mutex_lock(&e->lock);
        if (rc != PT_OK || e->stale || (finishing && e->pos >= committed)) {
            e->status = rc;
            e->done = 1;
            pthread_cond_broadcast(&e->wake);
            break;
        }
    }
    pthread_mutex_unlock(&e->lock);
}

static void *
pt_live_main(void *arg)
{
    pt_live *e = arg;
    pt_own_os_thread_name();
#if defined(__linux__)
    /* The program's threads come first: where they need every core, blocks wait
     * on disk and the end does them (a thread's own nice value on Linux). */
    setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), PT_LIVE_NICE);
#endif
    pt_live_loop(e, 1);
    return NULL;
}

int
pt_live_start(pt_live *e)
{
    if (e->started)
        return PT_ERR_STATE;
    if (pt_own_thread_create(&e->thread, pt_live_main, e) != 0)
        return PT_ERR_NOMEM;
    e->started = 1;
    return PT_OK;
}

void
pt_live_advance(pt_live *e, uint64_t committed)
{
    if (e->pid != getpid())
        return;
    pthread_mutex_lock(&e->lock);
    if (committed > e->committed) {
        e->committed = committed;
        pthread_cond_signal(&e->wake);
    }
    pthread_mutex_unlock(&e->lock);
}

uint64_t
pt_live_backlog(pt_live *e, uint64_t committed)
{
    if (e->pid != getpid())
        return 0;   /* a forked child's copy: its thread is the parent's */
    /* (pos moves on the encoder's thread, unlocked: read whole, maybe a block old) */
    uint64_t pos = __atomic_load_n(&e->pos, __ATOMIC_RELAXED);
    return committed > pos ? committed - pos : 0;
}

int
pt_live_finish(pt_live *e, uint64_t committed, int64_t stop_ticks, pt_live_result *out)
{
    if (!e->started || e->pid != getpid())
        return PT_ERR_STATE;
    pthread_mutex_lock(&e->lock);
    if (committed > e->committed)
        e->committed = committed;
    e->stop_ticks = stop_ticks;
    e->finishing = 1;
    __atomic_store_n(&e->hand_over, 1, __ATOMIC_RELAXED);
    pthread_cond_signal(&e->wake);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    e->started = 0;
    if (!e->done)                   /* (its own lock: a pt_live_backlog meanwhile) */
        pt_live_loop(e, 0);
    out->status = e->status;
    out->stale = e->stale;
    out->error_number = e->error_number;
    out->complete = e->status == PT_OK && !e->stale && e->pos == committed;
    out->n_threads = e->n_threads;
    out->n_keys = e->n_keys;
    out->events = e->events_done;
    return PT_OK;
}

void
pt_live_free(pt_live *e)
{
    if (!e)
        return;
    if (e->pid != getpid())
        return;     /* a forked child's copy: its thread and lock are the parent's */
    if (e->started) {
        pthread_mutex_lock(&e->lock);
        e->abandon = 1;
        pthread_cond_signal(&e->wake);
        pthread_mutex_unlock(&e->lock);
        pthread_join(e->thread, NULL);
    }
    if (e->fd >= 0 && pt_fd_names(e->fd, &e->spill_id))
        close(e->fd);
    free(e->spill_path);
    for (uint32_t i = 0; i < e->n_threads; i++) {
        pt_walk_free(e->threads[i].walk);
        free(e->threads[i].interned_done);
        free(e->threads[i].pending);
    }
    free(e->threads);
    pt_live_blob_free(&e->events);
    pt_live_blob_free(&e->interned);
    pt_live_blob_free(&e->staged_events);
    pt_live_blob_free(&e->staged_interned);
    free(e->hidden);
    free(e->staged_hidden);
    free(e->buffer);
    free(e->deflated);
    free(e->mark_bytes);
    free(e->part_prefix);
    pt_deflater_free(e->deflater);
    pthread_mutex_destroy(&e->lock);
    pthread_cond_destroy(&e->wake);
    free(e);
}

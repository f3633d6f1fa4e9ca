/* pt_pfread.c - reading back the calls of a .pftrace that pytrace_cffi wrote.
 *
 * pt_perfetto.c writes each call as a SLICE_BEGIN and a SLICE_END TrackEvent
 * packet on its thread's sequence, timestamps as deltas of the sequence's
 * incremental clock, the begin carrying the bytes of its key (name iid, category
 * iid, debug annotations), the end of a call open at stop saying so (its
 * annotation; those few ends are Python's to decode). This unit takes runs of
 * such packets from a buffer of Trace bytes (Trace.packet entries, already
 * inflated) and stops at the first
 * packet it does not take whole - a descriptor, a clock snapshot, interned data
 * that says what the file's other sequences did not (pt_pfnames.c), another
 * sequence's packet, a begin whose key bytes it has not been told or that names
 * an iid its sequence did not intern, an entry cut by the buffer's end - for
 * Python to decode that one. Nothing here trusts the bytes: every read is
 * bounded by its packet's end.
 *
 * Begins and ends become calls in three passes over a thread, each in memory
 * that does not grow with the calls but for the middle one's 4 bytes a call:
 * a scan counts and checks (depth, calls open at stop, a digest of every call);
 * a durations pass keeps each call's duration; a slices pass hands out whole
 * calls in start order (pt_slice, as the slice table has them) in batches,
 * through a pt_line_thread, whose digest must be the scan's. A scan may keep the
 * durations itself (up to a limit of calls Python sets): then the reader's first
 * read is the durations pass, and each export or summary after it reads the
 * thread once (a slices pass), not twice.
 */
#include "pt_export_internal.h"

#include <stdlib.h>
#include <string.h>

#define PT_PB_PACKET 0x0a          /* Trace.packet: field 1, length-delimited */
#define PT_PB_TIMESTAMP 0x40       /* TracePacket.timestamp: field 8, varint */
#define PT_PB_SEQUENCE_ID 0x50     /* TracePacket.trusted_packet_sequence_id: 10 */
#define PT_PB_TRACK_EVENT 0x5a     /* TracePacket.track_event: 11, length-delimited */
#define PT_PB_INTERNED 0x62        /* TracePacket.interned_data: 12, length-delimited */
#define PT_PB_EVENT_TYPE 0x48      /* TrackEvent.type: field 9, varint */
#define PT_TYPE_SLICE_BEGIN 1
#define PT_TYPE_SLICE_END 2
#define PT_PF_LONG UINT32_MAX       /* in durations: the call is in longs */
/* Deeper than any Python stack: what a damaged or hostile file's begins without
 * ends can make the open-call stack cost stays bounded (32 MiB). */
#define PT_PF_MAX_DEPTH (1u << 20)

struct pt_pf_open {
    int64_t index;          /* in the thread */
    int64_t start;
    int64_t end;            /* slices pass: as the durations say (its end must agree) */
    int64_t parent;
    uint32_t key;
    uint32_t flags;
};

struct pt_pf_long {
    uint64_t index;
    int64_t duration;
};

/* Durations are kept in chunks of PT_PF_CHUNK calls, made as the calls come (a
 * scan does not know how many there will be; chunks grow without copying). */
#define PT_PF_CHUNK_SHIFT 20
#define PT_PF_CHUNK ((uint64_t)1 << PT_PF_CHUNK_SHIFT)
#define PT_PF_SLOT(t, index) \
    ((t)->durations[(index) >> PT_PF_CHUNK_SHIFT][(index) & (PT_PF_CHUNK - 1)])

static void
pt_pf_free_durations(pt_pf_thread *t)
{
    for (uint64_t i = 0; i < t->n_chunks; i++)
        free(t->durations[i]);
    free(t->durations);
    free(t->longs);
    free(t->ended_open);
    t->durations = NULL;
    t->longs = NULL;
    t->ended_open = NULL;
    t->n_chunks = t->chunks_cap = t->n_long = t->long_cap = 0;
    t->n_ended_open = t->ended_open_cap = 0;
}

/* Room for call index's duration (calls come in index order): its chunk made,
 * of `size` calls at most (the last of a known count is cut to size). */
static int
pt_pf_room(pt_pf_thread *t, uint64_t index, uint64_t size)
{
    uint64_t chunk = index >> PT_PF_CHUNK_SHIFT;
    if (chunk < t->n_chunks)
        return PT_OK;
    if (t->n_chunks == t->chunks_cap) {
        uint64_t cap = t->chunks_cap ? 2 * t->chunks_cap : 16;
        uint32_t **grown = realloc(t->durations, cap * sizeof *grown);
        if (grown == NULL)
            return PT_ERR_NOMEM;
        t->durations = grown;
        t->chunks_cap = cap;
    }
    if (size > PT_PF_CHUNK || size == 0)
        size = PT_PF_CHUNK;
    t->durations[t->n_chunks] = malloc(size * sizeof **t->durations);
    if (t->durations[t->n_chunks] == NULL)
        return PT_ERR_NOMEM;
    t->n_chunks++;
    return PT_OK;
}

pt_pf_thread *
pt_pf_thread_new(uint32_t sequence_id, int mode, uint64_t calls)
{
    pt_pf_thread *t = calloc(1, sizeof *t);
    if (t == NULL)
        return NULL;
    t->sequence_id = sequence_id;
    t->mode = mode;
    if (mode == PT_PF_SCAN)
        t->keep_limit = calls;
    else
        t->durations_cap = calls;
    return t;
}

void
pt_pf_thread_free(pt_pf_thread *t)
{
    if (t == NULL)
        return;
    free(t->open);
    pt_pf_free_durations(t);
    pt_pf_interned_free(t);
    free(t);
}

int
pt_pf_thread_kept(pt_pf_thread *t)
{
    pt_pf_interned_free(t);         /* its slices pass interns again from the start */
    if (t->mode != PT_PF_SCAN || !t->keep_limit || t->n_open) {
        pt_pf_free_durations(t);
        t->keep_limit = 0;
        return 0;
    }
    uint64_t used = t->n & (PT_PF_CHUNK - 1);
    if (used && t->n_chunks) {
        uint32_t **last = &t->durations[t->n_chunks - 1];
        uint32_t *cut = realloc(*last, used * sizeof **last);
        if (cut != NULL)
            *last = cut;
    }
    t->durations_cap = t->n;
    return 1;
}

static int
pt_pf_by_index(const void *a, const void *b)
{
    uint64_t x = ((const pt_pf_long *)a)->index, y = ((const pt_pf_long *)b)->index;
    return (x > y) - (x < y);
}

static int
pt_pf_by_value(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

int
pt_pf_thread_slices(pt_pf_thread *t, pt_line_thread *out)
{
    /* a slices pass again: its durations were whole when it began */
    int kept = t->mode == PT_PF_SCAN && t->keep_limit;
    if (t->mode != PT_PF_SLICES && ((t->mode != PT_PF_DURATIONS && !kept) || t->n_open ||
                                    t->n != t->durations_cap))
        return PT_ERR_STATE;
    t->n_open = 0;
    /* qsort's array must be valid even for no elements: these stay NULL until
     * their first entry */
    if (t->n_long)
        qsort(t->longs, t->n_long, sizeof *t->longs, pt_pf_by_index);
    if (t->n_ended_open)
        qsort(t->ended_open, t->n_ended_open, sizeof *t->ended_open, pt_pf_by_value);
    t->next_ended_open = 0;
    t->mode = PT_PF_SLICES;
    t->out = out;
    t->n = 0;
    t->next_long = 0;
    t->open_at_stop = 0;
    t->max_depth = 0;
    t->digest = 0;
    t->clock_ready = 0;
    t->track_ready = 0;
    pt_pf_interned_clear(t);
    return PT_OK;
}

/* The duration the durations pass found for call index (slices pass: calls come
 * in index order, and so do the long ones once sorted). */
static int64_t
pt_pf_duration(pt_pf_thread *t, uint64_t index)
{
    if (index >= t->durations_cap)
        return -1;
    uint32_t d = PT_PF_SLOT(t, index);
    if (d != PT_PF_LONG)
        return d;
    while (t->next_long < t->n_long && t->longs[t->next_long].index < index)
        t->next_long++;
    if (t->next_long < t->n_long && t->longs[t->next_long].index == index)
        return t->longs[t->next_long].duration;
    return -1;
}

int
pt_pf_begin(pt_pf_thread *t, int64_t ts, uint32_t key, uint32_t flags)
{
    if (ts < t->now)
        return PT_ERR_ARG;
    if (t->mode != PT_PF_SCAN && t->n >= t->durations_cap)
        return PT_ERR_STATE;            /* more calls than the scan counted */
    if (t->mode == PT_PF_SCAN && t->keep_limit) {
        if (t->n >= t->keep_limit) {
            pt_pf_free_durations(t);    /* more than it may keep: none kept */
            t->keep_limit = 0;
        } else if (pt_pf_room(t, t->n, 0) != PT_OK) {
            return PT_ERR_NOMEM;
        }
    } else if (t->mode == PT_PF_DURATIONS &&
               pt_pf_room(t, t->n, t->durations_cap - (t->n & ~(PT_PF_CHUNK - 1))) != PT_OK) {
        return PT_ERR_NOMEM;
    }
    if (t->n_open >= PT_PF_MAX_DEPTH)
        return PT_ERR_ARG;
    if (t->n_open == t->open_cap) {
        uint64_t cap = t->open_cap ? 2 * t->open_cap : 64;
        pt_pf_open *grown = realloc(t->open, cap * sizeof *grown);
        if (grown == NULL)
            return PT_ERR_NOMEM;
        t->open = grown;
        t->open_cap = cap;
    }
    int64_t parent = t->n_open ? t->open[t->n_open - 1].index : -1;
    if (t->mode == PT_PF_SLICES && t->next_ended_open < t->n_ended_open &&
        t->ended_open[t->next_ended_open] == t->n) {
        flags |= PT_SLICE_OPEN_AT_STOP;         /* its end says so */
        t->next_ended_open++;
    }
    int64_t end = 0;
    if (t->mode == PT_PF_SLICES) {
        int64_t duration = pt_pf_duration(t, t->n);
        if (duration < 0 || ts > INT64_MAX - duration)
            return PT_ERR_STATE;
        end = ts + duration;
        int status = pt_line_thread_push(t->out, ts, end, key, flags, parent);
        if (status != PT_OK)
            return status == PT_ERR_NOMEM ? status : PT_ERR_STATE;
    }
    if (t->n_open > t->max_depth)
        t->max_depth = (uint32_t)t->n_open;
    t->open[t->n_open++] = (pt_pf_open){(int64_t)t->n, ts, end, parent, key, flags};
    if (flags & PT_SLICE_OPEN_AT_STOP)
        t->open_at_stop++;
    if (t->mode == PT_PF_SCAN) {
        if (flags & PT_SLICE_SEEDED)
            t->open_at_start++;
        if (!t->n)
            t->first_start = ts;
    }
    t->now = ts;
    t->n++;
    return PT_OK;
}

int
pt_pf_end(pt_pf_thread *t, int64_t ts, uint32_t flags)
{
    if (ts < t->now || !t->n_open)
        return PT_ERR_ARG;
    pt_pf_open *call = &t->open[--t->n_open];
    /* The slices pass checks each end against the durations it was given (a
     * scan's, or a durations pass's): a file changed since is caught here. */
    if (t->mode == PT_PF_SLICES &&
        (ts != call->end ||
         ((flags & PT_SLICE_OPEN_AT_STOP) && !(call->flags & PT_SLICE_OPEN_AT_STOP))))
        return PT_ERR_STATE;
    if ((flags & PT_SLICE_OPEN_AT_STOP) && !(call->flags & PT_SLICE_OPEN_AT_STOP)) {
        call->flags |= PT_SLICE_OPEN_AT_STOP;
        if (t->mode != PT_PF_SLICES)
            t->open_at_stop++;          /* the slices pass counts it at the begin */
        if (t->mode == PT_PF_DURATIONS || (t->mode == PT_PF_SCAN && t->keep_limit)) {
            if (t->n_ended_open == t->ended_open_cap) {
                uint64_t cap = t->ended_open_cap ? 2 * t->ended_open_cap : 16;
                uint64_t *grown = realloc(t->ended_open, cap * sizeof *grown);
                if (grown == NULL)
                    return PT_ERR_NOMEM;
                t->ended_open = grown;
                t->ended_open_cap = cap;
            }
            t->ended_open[t->n_ended_open++] = (uint64_t)call->index;
        }
    }
    int64_t duration = ts - call->start;
    if (call->parent < 0 && t->mode == PT_PF_SCAN)
        t->last_root_end = ts;          /* roots end in order: the last is the latest */
    if (t->mode == PT_PF_DURATIONS || (t->mode == PT_PF_SCAN && t->keep_limit)) {
        if (duration < PT_PF_LONG) {
            PT_PF_SLOT(t, (uint64_t)call->index) = (uint32_t)duration;
        } else {
            if (t->n_long == t->long_cap) {
                uint64_t cap = t->long_cap ? 2 * t->long_cap : 16;
                pt_pf_long *grown = realloc(t->longs, cap * sizeof *grown);
                if (grown == NULL)
                    return PT_ERR_NOMEM;
                t->longs = grown;
                t->long_cap = cap;
            }
            PT_PF_SLOT(t, (uint64_t)call->index) = PT_PF_LONG;
            t->longs[t->n_long++] = (pt_pf_long){(uint64_t)call->index, duration};
        }
    }
    if (t->mode != PT_PF_SLICES)
        t->digest += pt_call_digest(call->start, ts, call->key, call->flags, call->parent,
                                    (uint64_t)call->index);
    t->now = ts;
    return PT_OK;
}

#if defined(__GNUC__)
#define pt_pf_mul_overflow(a, b, out) __builtin_mul_overflow((a), (b), (out))
#define pt_pf_add_overflow(a, b, out) __builtin_add_overflow((a), (b), (out))
#else
static int
pt_pf_mul_overflow(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b && a > UINT64_MAX / b)
        return 1;
    *out = a * b;
    return 0;
}

static int
pt_pf_add_overflow(int64_t a, int64_t b, int64_t *out)
{
    if (b > 0 && a > INT64_MAX - b)
        return 1;
    *out = a + b;
    return 0;
}
#endif

int
pt_pf_read(pt_pf_thread *t, const pt_pf_names *names, const pt_line_keys *keys,
           const char *buffer, uint64_t len, uint64_t *pos)
{
    const unsigned char *base = (const unsigned char *)buffer;
    const unsigned char *end = base + len;
    const unsigned char *p = base + *pos;
    int status = PT_OK;
    while (p < end) {
        const unsigned char *entry = p;
        uint64_t size, value, delta = 0, sequence = 0, te_len = 0, interned_len = 0;
        const unsigned char *te = NULL, *interned = NULL;
        int timed = 0, sequenced = 0;
        if (*p++ != PT_PB_PACKET || !pt_pf_varint(&p, end, &size) ||
            size > (uint64_t)(end - p)) {
            p = entry;
            status = PT_PF_PYTHON;
            break;
        }
        const unsigned char *packet_end = p + size;
        while (p < packet_end) {
            unsigned char tag = *p++;
            if (tag == PT_PB_TIMESTAMP && !timed && pt_pf_varint(&p, packet_end, &delta)) {
                timed = 1;
            } else if (tag == PT_PB_SEQUENCE_ID && !sequenced &&
                       pt_pf_varint(&p, packet_end, &sequence)) {
                sequenced = 1;
            } else if (tag == PT_PB_TRACK_EVENT && te == NULL &&
                       pt_pf_varint(&p, packet_end, &value) &&
                       value <= (uint64_t)(packet_end - p)) {
                te = p;
                te_len = value;
                p += value;
            } else if (tag == PT_PB_INTERNED && interned == NULL &&
                       pt_pf_varint(&p, packet_end, &value) &&
                       value <= (uint64_t)(packet_end - p)) {
                interned = p;
                interned_len = value;
                p += value;
            } else {
                break;                  /* anything else: Python's */
            }
        }
        uint32_t key = 0, flags = 0;
        int kind = 0;
        if (p == packet_end && timed && sequenced && te != NULL && t->clock_ready &&
            t->track_ready && sequence == t->sequence_id && te_len >= 2 &&
            te[0] == PT_PB_EVENT_TYPE) {
            /* names first interned here (the sequence's first begin of them) */
            int taken = interned == NULL ? PT_OK
                                         : pt_pf_take_interned(t, names, (const char *)interned,
                                                               interned_len);
            if (taken == PT_ERR_NOMEM) {
                p = entry;
                status = taken;
                break;
            }
            if (taken == PT_OK && te[1] == PT_TYPE_SLICE_END && te_len == 2)
                kind = PT_TYPE_SLICE_END;
            else if (taken == PT_OK && te[1] == PT_TYPE_SLICE_BEGIN && te_len - 2 <= UINT32_MAX &&
                     pt_line_keys_lookup(keys, (const char *)te + 2, (uint32_t)(te_len - 2),
                                         &key, &flags) &&
                     pt_pf_begin_interned(t, te + 2, te_len - 2))
                kind = PT_TYPE_SLICE_BEGIN;
        }
        /* the clock moves by delta units; a time past INT64_MAX is Python's to report */
        uint64_t step = delta;
        int64_t ts;
        if (!kind || (t->unit_ns != 1 && pt_pf_mul_overflow(delta, t->unit_ns, &step)) ||
            step > (uint64_t)INT64_MAX || pt_pf_add_overflow(t->now, (int64_t)step, &ts)) {
            p = entry;
            status = PT_PF_PYTHON;
            break;
        }
        if (kind == PT_TYPE_SLICE_BEGIN) {
            if (t->mode == PT_PF_SLICES && t->out->count == t->out->cap) {
                p = entry;
                status = PT_PF_FULL;
                break;
            }
            status = pt_pf_begin(t, ts, key, flags);
        } else {
            status = pt_pf_end(t, ts, 0);
        }
        if (status != PT_OK) {
            p = entry;
            break;
        }
        p = packet_end;
    }
    *pos = (uint64_t)(p - base);
    return status;
}

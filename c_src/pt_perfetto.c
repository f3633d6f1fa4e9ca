/* pt_perfetto.c - the per-call bulk of the Perfetto (.pftrace) export.
 *
 * A thread's calls become SLICE_BEGIN / SLICE_END TrackEvent packets on the
 * thread's own packet sequence, timestamps as deltas of an incremental clock.
 * Python encodes everything that is per key once (the event's name iid,
 * category iid and debug annotations; the InternedData entry naming it) and the
 * few packets that are per trace or per thread; this unit only pairs begins with
 * ends in time order, writes varints and copies those bytes. Names are interned
 * lazily: a key's InternedData entry rides on the first packet that uses it on
 * the sequence, as Perfetto's own SDK does, so a thread interns only its names.
 *
 * Wire format (protobuf): a file is a Trace, i.e. repeated field 1 (packet);
 * each packet here is TracePacket { timestamp = 8 (varint delta), track_event =
 * 11 { type = 9, ...the key's bytes }, interned_data = 12, trusted_packet_
 * sequence_id = 10 }.
 */
#include "pt_export_internal.h"
#include "pt_protobuf.h"

#include <string.h>

#define PT_PB_PACKET 0x0a          /* Trace.packet: field 1, length-delimited */
#define PT_PB_TIMESTAMP 0x40       /* TracePacket.timestamp: field 8, varint */
#define PT_PB_SEQUENCE_ID 0x50     /* TracePacket.trusted_packet_sequence_id: 10, varint */
#define PT_PB_TRACK_EVENT 0x5a     /* TracePacket.track_event: field 11, length-delimited */
#define PT_PB_INTERNED 0x62        /* TracePacket.interned_data: field 12, length-delimited */
#define PT_PB_EVENT_TYPE 0x48      /* TrackEvent.type: field 9, varint */
#define PT_TYPE_SLICE_BEGIN 1
#define PT_TYPE_SLICE_END 2
#if defined(__GNUC__)
#define PT_UNLIKELY(x) __builtin_expect(!!(x), 0)
#else
#define PT_UNLIKELY(x) (x)
#endif
/* A slices-mode stack entry: the slice's index, this bit set when it was open at
 * stop (its end carries the mark). */
#define PT_PF_STACK_OPEN_AT_STOP ((int64_t)1 << 62)
/* Everything in a packet besides the key's bytes, with every varint at its widest,
 * plus the slack the fixed-size copies below may write past a packet's end. */
#define PT_PACKET_OVERHEAD (6 * (1 + PT_VARINT_MAX) + 2 + PT_PF_BLOB_PADDING)

/* Copies n bytes from a blob padded with PT_PF_BLOB_PADDING bytes: short runs
 * (the usual per-key bytes) as one fixed-size move, not a libc call. The output
 * keeps that much slack too (see PT_PACKET_OVERHEAD). */
static inline char *
pt_put_padded(char *p, const char *s, uint32_t n)
{
    if (n <= PT_PF_BLOB_PADDING)
        memcpy(p, s, PT_PF_BLOB_PADDING);
    else
        memcpy(p, s, n);
    return p + n;
}

/* The packet's trailing trusted_packet_sequence_id field, the same on every
 * packet of the sequence; returns its length. */
static uint32_t
pt_pf_sequence_field(char seq[1 + PT_VARINT_MAX], uint32_t sequence_id)
{
    seq[0] = PT_PB_SEQUENCE_ID;
    return (uint32_t)(pt_put_varint(seq + 1, sequence_id) - seq);
}

/* TracePacket { timestamp, track_event { type = SLICE_END, marks[mark] },
 * sequence id }: a call open at stop says so at its end, the one moment that is
 * known (an encoder running during the trace wrote its begin long before). */
static inline char *
pt_pf_put_end(char *p, uint64_t delta, uint32_t mark, const char *const *marks,
              const uint32_t *mark_lens, const char *seq, uint32_t seq_len)
{
    uint32_t extra_len = mark ? mark_lens[mark] : 0;
    *p++ = PT_PB_PACKET;
    p = pt_put_varint(p, 1 + pt_varint_len(delta) + 1 + pt_varint_len(2 + extra_len) + 2 +
                         extra_len + seq_len);
    *p++ = PT_PB_TIMESTAMP;
    p = pt_put_varint(p, delta);
    *p++ = PT_PB_TRACK_EVENT;
    p = pt_put_varint(p, 2 + extra_len);
    *p++ = PT_PB_EVENT_TYPE;
    *p++ = PT_TYPE_SLICE_END;
    if (PT_UNLIKELY(extra_len)) {
        memcpy(p, marks[mark], extra_len);
        p += extra_len;
    }
    memcpy(p, seq, 1 + PT_VARINT_MAX);
    return p + seq_len;
}

/* TracePacket { timestamp, track_event { type = SLICE_BEGIN, the key's fields,
 * marks[mark] }, interned_data { the key's name }, sequence id }; NULL when it
 * does not fit before end. */
static inline char *
pt_pf_put_begin(char *p, char *end, uint64_t delta, uint32_t key, uint32_t mark,
                const char *events, const uint32_t *event_offsets,
                const char *interned, const uint32_t *interned_offsets,
                uint8_t *interned_done, const char *const *marks, const uint32_t *mark_lens,
                const char *seq, uint32_t seq_len)
{
    uint32_t event_len = event_offsets[key + 1] - event_offsets[key];
    uint32_t intern_len = interned_done[key] ? 0
                          : interned_offsets[key + 1] - interned_offsets[key];
    uint32_t extra_len = mark ? mark_lens[mark] : 0;
    if ((uint64_t)(end - p) < (uint64_t)PT_PACKET_OVERHEAD + event_len + extra_len + intern_len)
        return NULL;
    uint32_t te_len = 2 + event_len + extra_len;
    uint32_t body = 1 + pt_varint_len(delta) + 1 + pt_varint_len(te_len) + te_len + seq_len;
    if (intern_len)
        body += 1 + pt_varint_len(intern_len) + intern_len;
    *p++ = PT_PB_PACKET;
    p = pt_put_varint(p, body);
    *p++ = PT_PB_TIMESTAMP;
    p = pt_put_varint(p, delta);
    *p++ = PT_PB_TRACK_EVENT;
    p = pt_put_varint(p, te_len);
    p[0] = PT_PB_EVENT_TYPE;
    p[1] = PT_TYPE_SLICE_BEGIN;
    p = pt_put_padded(p + 2, events + event_offsets[key], event_len);
    if (PT_UNLIKELY(extra_len)) {
        memcpy(p, marks[mark], extra_len);
        p += extra_len;
    }
    if (PT_UNLIKELY(intern_len)) {
        *p++ = PT_PB_INTERNED;
        p = pt_put_varint(p, intern_len);
        p = pt_put_padded(p, interned + interned_offsets[key], intern_len);
        interned_done[key] = 1;
    }
    memcpy(p, seq, 1 + PT_VARINT_MAX);
    return p + seq_len;
}

int
pt_pftrace_slices(const pt_slice *slices, uint64_t n, uint64_t first_index, int last_batch,
                  pt_pf_cursor *cursor, int64_t *stack, int64_t *stack_end, uint32_t stack_cap,
                  const char *events, const uint32_t *event_offsets,
                  const char *interned, const uint32_t *interned_offsets,
                  uint8_t *interned_done, uint32_t n_keys,
                  const char *const *marks, const uint32_t *mark_lens,
                  uint32_t sequence_id, char *out, uint64_t cap, uint64_t *written)
{
    char *p = out;
    char *end = out + cap;
    uint64_t next = cursor->next;
    uint32_t open = cursor->open;
    int64_t last_ns = cursor->last_ns;
    int status = PT_OK;
    char seq[1 + PT_VARINT_MAX];
    uint32_t seq_len = pt_pf_sequence_field(seq, sequence_id);
    for (;;) {
        const pt_slice *s = next < n ? &slices[next] : NULL;
        /* The slice on top of the stack ends before s begins unless it is s's
         * parent: slices come parent first, children in start order. The stack
         * keeps each open slice's index and end, as its record may lie in an
         * earlier batch; at a batch's end the open slices wait for the next. */
        if (open && (s ? (stack[open - 1] & ~PT_PF_STACK_OPEN_AT_STOP) != s->parent
                       : last_batch)) {
            int64_t t = stack_end[open - 1];
            uint32_t mark = stack[open - 1] & PT_PF_STACK_OPEN_AT_STOP
                            ? PT_PF_MARK_OPEN_AT_STOP : 0;
            if ((uint64_t)(end - p) < PT_PACKET_OVERHEAD + (mark ? mark_lens[mark] : 0))
                break;
            if (t < last_ns) {
                status = PT_ERR_ARG;    /* out of time order: not a replayed thread */
                break;
            }
            p = pt_pf_put_end(p, (uint64_t)(t - last_ns), mark, marks, mark_lens, seq,
                              seq_len);
            last_ns = t;
            open--;
            continue;
        }
        if (!s)
            break;
        if (s->key >= n_keys || open >= stack_cap || s->start < last_ns || s->end < s->start) {
            status = PT_ERR_ARG;
            break;
        }
        char *after = pt_pf_put_begin(p, end, (uint64_t)(s->start - last_ns), s->key,
                                      s->flags & PT_SLICE_SEEDED ? PT_PF_MARK_OPEN_AT_START : 0,
                                      events, event_offsets, interned, interned_offsets,
                                      interned_done, marks, mark_lens, seq, seq_len);
        if (!after)
            break;
        p = after;
        last_ns = s->start;
        stack[open] = (int64_t)(first_index + next) |
                      (s->flags & PT_SLICE_OPEN_AT_STOP ? PT_PF_STACK_OPEN_AT_STOP : 0);
        stack_end[open++] = s->end;
        next++;
    }
    cursor->next = next;
    cursor->open = open;
    cursor->last_ns = last_ns;
    *written = (uint64_t)(p - out);
    return status;
}

int
pt_pftrace_records(const pt_walk_record *records, uint64_t n, uint64_t *next, int64_t *last_ns,
                   const char *events, const uint32_t *event_offsets,
                   const char *interned, const uint32_t *interned_offsets,
                   uint8_t *interned_done, uint32_t n_keys,
                   const char *const *marks, const uint32_t *mark_lens,
                   uint32_t sequence_id, char *out, uint64_t cap, uint64_t *written)
{
    char *p = out;
    char *end = out + cap;
    uint64_t i = *next;
    int64_t last = *last_ns;
    int status = PT_OK;
    char seq[1 + PT_VARINT_MAX];
    uint32_t seq_len = pt_pf_sequence_field(seq, sequence_id);
    for (; i < n; i++) {
        const pt_walk_record *r = &records[i];
        if (r->ts < last || r->key >= n_keys) {
            status = PT_ERR_ARG;
            break;
        }
        uint64_t delta = (uint64_t)(r->ts - last);
        if (r->flags & PT_RECORD_END) {
            uint32_t mark = r->flags & PT_RECORD_OPEN_AT_STOP ? PT_PF_MARK_OPEN_AT_STOP : 0;
            if ((uint64_t)(end - p) < PT_PACKET_OVERHEAD + (mark ? mark_lens[mark] : 0))
                break;
            p = pt_pf_put_end(p, delta, mark, marks, mark_lens, seq, seq_len);
        } else {
            char *after = pt_pf_put_begin(p, end, delta, r->key,
                                          r->flags & PT_RECORD_OPEN_AT_START
                                              ? PT_PF_MARK_OPEN_AT_START : 0,
                                          events, event_offsets, interned, interned_offsets,
                                          interned_done, marks, mark_lens, seq,
                                          seq_len);
            if (!after)
                break;
            p = after;
        }
        last = r->ts;
    }
    *next = i;
    *last_ns = last;
    *written = (uint64_t)(p - out);
    return status;
}

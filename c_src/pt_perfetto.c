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
#include "pt_internal.h"

#include <string.h>

#define PT_PB_PACKET 0x0a          /* Trace.packet: field 1, length-delimited */
#define PT_PB_TIMESTAMP 0x40       /* TracePacket.timestamp: field 8, varint */
#define PT_PB_SEQUENCE_ID 0x50     /* TracePacket.trusted_packet_sequence_id: 10, varint */
#define PT_PB_TRACK_EVENT 0x5a     /* TracePacket.track_event: field 11, length-delimited */
#define PT_PB_INTERNED 0x62        /* TracePacket.interned_data: field 12, length-delimited */
#define PT_PB_EVENT_TYPE 0x48      /* TrackEvent.type: field 9, varint */
#define PT_TYPE_SLICE_BEGIN 1
#define PT_TYPE_SLICE_END 2
#define PT_VARINT_MAX 10
/* Everything in a packet besides the key's bytes, with every varint at its widest. */
#define PT_PACKET_OVERHEAD (4 * (1 + PT_VARINT_MAX) + 2 * (1 + PT_VARINT_MAX) + 2)

static uint32_t
pt_varint_len(uint64_t v)
{
    uint32_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static char *
pt_put_varint(char *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (char)(v | 0x80);
        v >>= 7;
    }
    *p++ = (char)v;
    return p;
}

static char *
pt_put_bytes(char *p, const char *s, uint32_t n)
{
    memcpy(p, s, n);
    return p + n;
}

/* One packet: a TrackEvent of `type` made of track_event[0..te_len) parts, with
 * an optional InternedData entry. Sizes are known before writing, so nothing is
 * moved after the fact. */
static char *
pt_put_event_packet(char *p, uint64_t delta, uint32_t type,
                    const char *event, uint32_t event_len,
                    const char *extra, uint32_t extra_len,
                    const char *interned, uint32_t interned_len,
                    uint32_t sequence_id)
{
    uint32_t te_len = 2 + event_len + extra_len;
    uint32_t body = 1 + pt_varint_len(delta) + 1 + pt_varint_len(te_len) + te_len
                    + 1 + pt_varint_len(sequence_id);
    if (interned_len)
        body += 1 + pt_varint_len(interned_len) + interned_len;
    *p++ = PT_PB_PACKET;
    p = pt_put_varint(p, body);
    *p++ = PT_PB_TIMESTAMP;
    p = pt_put_varint(p, delta);
    *p++ = PT_PB_TRACK_EVENT;
    p = pt_put_varint(p, te_len);
    *p++ = PT_PB_EVENT_TYPE;
    *p++ = (char)type;
    p = pt_put_bytes(p, event, event_len);
    p = pt_put_bytes(p, extra, extra_len);
    if (interned_len) {
        *p++ = PT_PB_INTERNED;
        p = pt_put_varint(p, interned_len);
        p = pt_put_bytes(p, interned, interned_len);
    }
    *p++ = PT_PB_SEQUENCE_ID;
    return pt_put_varint(p, sequence_id);
}

int
pt_pftrace_slices(const pt_slice *slices, uint64_t n, pt_pf_cursor *cursor,
                  int64_t *stack, uint32_t stack_cap,
                  const char *const *events, const uint32_t *event_lens,
                  const char *const *interned, const uint32_t *interned_lens,
                  uint8_t *interned_done, uint32_t n_keys,
                  const char *open_mark, uint32_t open_mark_len,
                  uint32_t sequence_id, char *out, uint64_t cap, uint64_t *written)
{
    char *p = out;
    char *end = out + cap;
    uint64_t next = cursor->next;
    uint32_t open = cursor->open;
    int64_t last_ns = cursor->last_ns;
    int status = PT_OK;
    for (;;) {
        const pt_slice *s = next < n ? &slices[next] : NULL;
        /* The slice on top of the stack ends before s begins unless it is s's
         * parent: slices come parent first, children in start order. */
        if (open && (!s || stack[open - 1] != s->parent)) {
            int64_t t = slices[stack[open - 1]].end;
            if ((uint64_t)(end - p) < PT_PACKET_OVERHEAD)
                break;
            if (t < last_ns) {
                status = PT_ERR_ARG;    /* out of time order: not a replayed thread */
                break;
            }
            p = pt_put_event_packet(p, (uint64_t)(t - last_ns), PT_TYPE_SLICE_END, NULL, 0,
                                    NULL, 0, NULL, 0, sequence_id);
            last_ns = t;
            open--;
            continue;
        }
        if (!s)
            break;
        uint32_t key = s->key;
        if (key >= n_keys || open >= stack_cap || s->start < last_ns || s->end < s->start) {
            status = PT_ERR_ARG;
            break;
        }
        uint32_t intern_len = interned_done[key] ? 0 : interned_lens[key];
        uint32_t extra_len = (s->flags & PT_SLICE_OPEN_AT_STOP) ? open_mark_len : 0;
        if ((uint64_t)(end - p) < (uint64_t)PT_PACKET_OVERHEAD + event_lens[key] + extra_len
                                  + intern_len)
            break;
        p = pt_put_event_packet(p, (uint64_t)(s->start - last_ns), PT_TYPE_SLICE_BEGIN,
                                events[key], event_lens[key], open_mark, extra_len,
                                interned[key], intern_len, sequence_id);
        interned_done[key] = 1;
        last_ns = s->start;
        stack[open++] = (int64_t)next;
        next++;
    }
    cursor->next = next;
    cursor->open = open;
    cursor->last_ns = last_ns;
    *written = (uint64_t)(p - out);
    return status;
}

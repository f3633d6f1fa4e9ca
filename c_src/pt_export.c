/* pt_export.c - the numeric bulk of the Chrome Trace Event JSON export.
 *
 * Python escapes each name once and hands over the escaped bytes; this unit only
 * copies them and formats numbers, so no string escaping happens in C.
 */
#include "pt_export_internal.h"

#include <stdlib.h>
#include <string.h>

/* Writes v in decimal at p; returns the end. */
static char *
pt_put_u64(char *p, uint64_t v)
{
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n)
        *p++ = digits[--n];
    return p;
}

/* Nanoseconds as microseconds with exactly three decimals; a negative time (a
 * merge's call before torch's base) with its sign. */
static char *
pt_put_us(char *p, int64_t ns)
{
    uint64_t magnitude = (uint64_t)ns;
    if (ns < 0) {
        *p++ = '-';
        magnitude = 0 - magnitude;
    }
    p = pt_put_u64(p, magnitude / 1000);
    uint32_t frac = (uint32_t)(magnitude % 1000);
    *p++ = '.';
    *p++ = (char)('0' + frac / 100);
    *p++ = (char)('0' + frac / 10 % 10);
    *p++ = (char)('0' + frac % 10);
    return p;
}

static char *
pt_put(char *p, const char *s, size_t n)
{
    memcpy(p, s, n);
    return p + n;
}

#define PT_PUT_LITERAL(p, s) pt_put((p), (s), sizeof(s) - 1)

int
pt_format_slices_from(const pt_slice *slices, uint64_t n, uint64_t *next,
                      const char *const *names, const uint32_t *name_lens,
                      const char *const *extras, const uint32_t *extra_lens, uint32_t n_keys,
                      const char *prefix, uint32_t prefix_len, int64_t base_ns,
                      uint64_t first_id, uint64_t index_base, uint32_t thread_index,
                      char *out, uint64_t cap, uint64_t *written)
{
    char *p = out;
    char *end = out + cap;
    uint64_t i = *next;
    for (; i < n; i++) {
        const pt_slice *s = &slices[i];
        uint32_t key = s->key < n_keys ? s->key : 0;
        /* numbers and punctuation need well under 256 bytes */
        if ((uint64_t)(end - p) < (uint64_t)prefix_len + name_lens[key] + extra_lens[key] + 256)
            break;
        p = pt_put(p, prefix, prefix_len);
        p = pt_put(p, names[key], name_lens[key]);
        p = PT_PUT_LITERAL(p, ",\"ts\":");
        p = pt_put_us(p, s->start - base_ns);
        p = PT_PUT_LITERAL(p, ",\"dur\":");
        p = pt_put_us(p, s->end - s->start);
        p = PT_PUT_LITERAL(p, ",\"args\":{\"Python id\":");
        p = pt_put_u64(p, first_id + index_base + i);
        p = PT_PUT_LITERAL(p, ",\"Python parent id\":");
        if (s->parent < 0)
            p = PT_PUT_LITERAL(p, "null");
        else
            p = pt_put_u64(p, first_id + (uint64_t)s->parent);
        p = PT_PUT_LITERAL(p, ",\"Python thread\":");
        p = pt_put_u64(p, thread_index);
        p = pt_put(p, extras[key], extra_lens[key]);
        if (s->flags & PT_SLICE_SEEDED)
            p = PT_PUT_LITERAL(p, ",\"open at start\":true");
        p = PT_PUT_LITERAL(p, "}}");
    }
    *next = i;
    *written = (uint64_t)(p - out);
    return PT_OK;
}

/* Python's round() of a double: half to even. Exact for the few-microsecond
 * values it gets here; needs no libm. */
static int64_t
pt_round_half_even(double x)
{
    int64_t i = (int64_t)x;
    double frac = x - (double)i;
    if (frac > 0.5 || (frac == 0.5 && (i & 1)))
        i++;
    else if (frac < -0.5 || (frac == -0.5 && (i & 1)))
        i--;
    return i;
}

int64_t
pt_one_to_realtime(int64_t ns, int64_t mono0, int64_t off0, int64_t mono1, int64_t off1)
{
    int64_t span = mono1 - mono0;
    if (span <= 0)
        return ns + off0;
    /* the same double arithmetic as _clock.monotonic_to_realtime, so a slice and
     * an event mapped there land on the same nanosecond */
    double fraction = (double)(ns - mono0) / (double)span;
    if (fraction < 0.0)
        fraction = 0.0;
    if (fraction > 1.0)
        fraction = 1.0;
    return ns + off0 + pt_round_half_even((double)(off1 - off0) * fraction);
}

void
pt_slices_to_realtime(pt_slice *slices, uint64_t n, int64_t mono0, int64_t off0,
                      int64_t mono1, int64_t off1, int64_t *first_start, int64_t *last_end)
{
    int64_t first = INT64_MAX, last = INT64_MIN;
    for (uint64_t i = 0; i < n; i++) {
        pt_slice *s = &slices[i];
        s->start = pt_one_to_realtime(s->start, mono0, off0, mono1, off1);
        s->end = pt_one_to_realtime(s->end, mono0, off0, mono1, off1);
        if (s->start < first)
            first = s->start;
        if (s->end > last)
            last = s->end;
    }
    *first_start = first;
    *last_end = last;
}

int
pt_format_slices(const pt_slice *slices, uint64_t n, uint64_t *next,
                 const char *const *names, const uint32_t *name_lens,
                 const char *const *extras, const uint32_t *extra_lens, uint32_t n_keys,
                 const char *prefix, uint32_t prefix_len, int64_t base_ns,
                 uint64_t first_id, uint32_t thread_index, char *out, uint64_t cap,
                 uint64_t *written)
{
    return pt_format_slices_from(slices, n, next, names, name_lens, extras, extra_lens, n_keys,
                                 prefix, prefix_len, base_ns, first_id, 0, thread_index, out,
                                 cap, written);
}

/* speedscope's evented profile: a thread's slices (start order, parents
 * numbered over the thread) as open ("O") and close ("C") events of their
 * frames, in time order, the calls open at a slice's start closed first. */
struct pt_evented {
    uint64_t open, open_cap;    /* the open calls, outermost first */
    int64_t *open_index;        /* thread-wide slice index */
    uint64_t open_index_cap;
    int64_t *open_end;
    uint64_t open_end_cap;
    uint32_t *open_frame;
    uint64_t events;            /* written so far: the first has no comma */
    int64_t first_at, last_at;  /* ns from base, of the first and last events */
    int64_t base_ns;
};

pt_evented *
pt_evented_new(int64_t base_ns)
{
    pt_evented *e = calloc(1, sizeof *e);
    if (e != NULL) {
        e->base_ns = base_ns;
        e->last_at = INT64_MIN;
    }
    return e;
}

void
pt_evented_free(pt_evented *e)
{
    if (e == NULL)
        return;
    free(e->open_index);
    free(e->open_end);
    free(e->open_frame);
    free(e);
}

#define PT_EVENT_ROOM 96        /* one event's bytes, at most */

static char *
pt_put_i64(char *p, int64_t v)
{
    if (v < 0) {
        *p++ = '-';
        return pt_put_u64(p, 0 - (uint64_t)v);
    }
    return pt_put_u64(p, (uint64_t)v);
}

static char *
pt_put_event(pt_evented *e, char *p, char type, uint32_t frame, int64_t ns)
{
    /* Times never go back in the file (speedscope refuses that): a call that
     * starts before its previous sibling ended, which only a damaged or
     * hand-made trace holds, is drawn from that end. */
    int64_t at = ns - e->base_ns;
    if (at < e->last_at)
        at = e->last_at;
    e->last_at = at;
    if (!e->events)
        e->first_at = at;
    if (e->events++)
        *p++ = ',';
    p = PT_PUT_LITERAL(p, "{\"type\":\"");
    *p++ = type;
    p = PT_PUT_LITERAL(p, "\",\"frame\":");
    p = pt_put_u64(p, frame);
    p = PT_PUT_LITERAL(p, ",\"at\":");
    p = pt_put_i64(p, at);
    *p++ = '}';
    return p;
}

int
pt_evented_format(pt_evented *e, const pt_slice *slices, uint64_t n, uint64_t first_index,
                  uint64_t *next, const uint32_t *frame_of_key, uint32_t n_keys,
                  char *out, uint64_t cap, uint64_t *written)
{
    char *p = out;
    char *end = out + cap;
    int status = PT_OK;
    uint64_t i = *next;
    for (; i < n; i++) {
        const pt_slice *s = &slices[i];
        if (s->key >= n_keys) {
            status = PT_ERR_ARG;
            break;
        }
        while (e->open && e->open_index[e->open - 1] != s->parent
               && (uint64_t)(end - p) >= PT_EVENT_ROOM) {
            e->open--;
            p = pt_put_event(e, p, 'C', e->open_frame[e->open], e->open_end[e->open]);
        }
        if ((uint64_t)(end - p) < PT_EVENT_ROOM)
            break;                      /* resumed from this slice: its closes go on */
        if (s->parent >= 0 && !e->open) {
            status = PT_ERR_ARG;
            break;
        }
        if (pt_grow((void **)&e->open_index, &e->open_index_cap, e->open + 1,
                    sizeof *e->open_index)
            || pt_grow((void **)&e->open_end, &e->open_end_cap, e->open + 1,
                       sizeof *e->open_end)
            || pt_grow((void **)&e->open_frame, &e->open_cap, e->open + 1,
                       sizeof *e->open_frame)) {
            status = PT_ERR_NOMEM;
            break;
        }
        uint32_t frame = frame_of_key[s->key];
        p = pt_put_event(e, p, 'O', frame, s->start);
        e->open_index[e->open] = (int64_t)(first_index + i);
        e->open_end[e->open] = s->end;
        e->open_frame[e->open++] = frame;
    }
    *next = i;
    *written = (uint64_t)(p - out);
    return status;
}

uint64_t
pt_evented_close(pt_evented *e, char *out, uint64_t cap, uint64_t *written)
{
    char *p = out;
    while (e->open && (uint64_t)(out + cap - p) >= PT_EVENT_ROOM) {
        e->open--;
        p = pt_put_event(e, p, 'C', e->open_frame[e->open], e->open_end[e->open]);
    }
    *written = (uint64_t)(p - out);
    return e->open;
}

uint64_t
pt_evented_span(const pt_evented *e, int64_t *first_at, int64_t *last_at)
{
    *first_at = e->events ? e->first_at : 0;
    *last_at = e->events ? e->last_at : 0;
    return e->events;
}

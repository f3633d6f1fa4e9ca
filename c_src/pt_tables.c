/* pt_tables.c - what is done to whole runs of events or slices besides pairing
 * them: counts over a slice table, the checks of events and slices read back from
 * a saved or spilled trace (a damaged or hostile file must not reach the
 * encoders), and the remapping of a process's slices into a joined trace. Pairing
 * events into calls is the streaming walk's (pt_walk.c).
 */
#include "pt_export_internal.h"

#include <stdlib.h>

static uint64_t
pt_count_flag(const pt_slice *slices, uint64_t n, uint32_t flag)
{
    uint64_t found = 0;
    for (uint64_t i = 0; i < n; i++)
        if (slices[i].flags & flag)
            found++;
    return found;
}

uint64_t
pt_open_at_stop(const pt_slice *slices, uint64_t n)
{
    return pt_count_flag(slices, n, PT_SLICE_OPEN_AT_STOP);
}

uint64_t
pt_open_at_start(const pt_slice *slices, uint64_t n)
{
    return pt_count_flag(slices, n, PT_SLICE_SEEDED);
}

int64_t
pt_validate_events(const pt_event *events, uint64_t n, uint32_t n_keys, uint32_t n_tags,
                   uint32_t n_args)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t word = events[i].key_kind, kind = word & PT_KIND_MASK;
        if (kind <= PT_EV_PY_SEED ? word >> PT_KEY_SHIFT >= n_keys
            : kind != PT_EV_AUX ||         /* 5, 6: reserved */
              (pt_is_aux(word, PT_AUX_TAG) && pt_aux_payload(word) >= n_tags) ||
              (pt_is_aux(word, PT_AUX_ARGS) && pt_aux_payload(word) >= n_args))
            return (int64_t)i;
    }
    return -1;
}

uint64_t
pt_events_ticks(const pt_event *events, uint64_t n)
{
    /* unsigned: a damaged file's deltas may add past 2^63; callers compare mod 2^64 */
    uint64_t ticks = 0;
    for (uint64_t i = 0; i < n; i++)
        ticks += pt_event_ticks(&events[i]);
    return ticks;
}

void
pt_events_extent(const pt_event *events, uint64_t n, uint64_t needed[3])
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t word = events[i].key_kind;
        int which = (word & PT_KIND_MASK) <= PT_EV_PY_SEED ? 0
            : pt_is_aux(word, PT_AUX_TAG) ? 1 : pt_is_aux(word, PT_AUX_ARGS) ? 2 : -1;
        if (which < 0)
            continue;
        uint64_t index = (uint64_t)(which ? pt_aux_payload(word) : word >> PT_KEY_SHIFT) + 1;
        if (index > needed[which])
            needed[which] = index;
    }
}

/* Version 1's kinds that are now aux events (pt_record.h) */
#define PT_V1_TAG 5
#define PT_V1_ARGS 6
#define PT_V1_TIME 7

int64_t
pt_events_from_v1(pt_event *events, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint32_t kind = events[i].key_kind & PT_KIND_MASK;
        uint32_t payload = events[i].key_kind >> PT_KEY_SHIFT;
        if (kind <= PT_EV_PY_SEED)
            continue;                   /* calls and returns are as they were */
        if (payload >= PT_AUX_PAYLOADS)
            return (int64_t)i;
        uint32_t sub_kind = kind == PT_V1_TAG ? PT_AUX_TAG
            : kind == PT_V1_ARGS ? PT_AUX_ARGS : PT_AUX_TIME;
        events[i].key_kind = pt_aux_word(sub_kind, payload);
    }
    return -1;
}

int64_t
pt_validate_slices(const pt_slice *slices, uint64_t n, uint32_t n_keys)
{
    const uint32_t known_flags = PT_SLICE_C | PT_SLICE_SEEDED | PT_SLICE_OPEN_AT_STOP;
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *s = &slices[i];
        if (s->key >= n_keys || (s->flags & ~known_flags) || s->start > s->end ||
            s->parent < -1 || s->parent >= (int64_t)i)
            return (int64_t)i;
        if (s->parent >= 0) {
            const pt_slice *p = &slices[s->parent];
            if (s->start < p->start || s->end > p->end || s->depth != p->depth + 1)
                return (int64_t)i;
        } else if (s->depth != 0) {
            return (int64_t)i;
        }
    }
    return -1;
}

/* ---- checking slices that stream by ------------------------------------------
 *
 * A saved thread's slices are checked batch by batch as load() reads them, so
 * that the table need not be held: the enclosing calls of the slice at hand
 * (its ancestors, the only ones a later slice may name as parent, as a thread's
 * calls come parent first with each subtree whole) wait on a stack. */

typedef struct {
    int64_t index;
    int64_t start;
    int64_t end;
    uint32_t depth;
} pt_open_slice;

struct pt_slice_check {
    uint64_t count;             /* slices checked */
    uint64_t open_at_stop;
    uint32_t max_depth;
    uint32_t open;              /* ancestors on the stack */
    uint32_t cap;
    pt_open_slice *stack;
};

/* Returns a new checker (pt_slice_check_free it), NULL when out of memory. */
pt_slice_check *
pt_slice_check_new(void)
{
    return (pt_slice_check *)calloc(1, sizeof(pt_slice_check));
}

void
pt_slice_check_free(pt_slice_check *check)
{
    if (check) {
        free(check->stack);
        free(check);
    }
}

int64_t
pt_slice_check_feed(pt_slice_check *check, const pt_slice *slices, uint64_t n, uint32_t n_keys)
{
    const uint32_t known_flags = PT_SLICE_C | PT_SLICE_SEEDED | PT_SLICE_OPEN_AT_STOP;
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *s = &slices[i];
        int64_t index = (int64_t)check->count;
        if (s->key >= n_keys || (s->flags & ~known_flags) || s->start > s->end ||
            s->parent < -1 || s->parent >= index)
            return index;
        /* Whatever is not s's parent or above it has ended before s. */
        while (check->open && check->stack[check->open - 1].index != s->parent)
            check->open--;
        if (s->parent >= 0) {
            if (!check->open)
                return index;       /* its parent is no open ancestor */
            const pt_open_slice *p = &check->stack[check->open - 1];
            if (s->start < p->start || s->end > p->end || s->depth != p->depth + 1)
                return index;
        } else if (s->depth != 0) {
            return index;
        }
        if (check->open == check->cap) {
            uint32_t cap = check->cap ? 2 * check->cap : 64;
            pt_open_slice *grown = (pt_open_slice *)realloc(check->stack,
                                                            cap * sizeof(pt_open_slice));
            if (!grown)
                return -2;
            check->stack = grown;
            check->cap = cap;
        }
        pt_open_slice *top = &check->stack[check->open++];
        top->index = index;
        top->start = s->start;
        top->end = s->end;
        top->depth = s->depth;
        if (s->depth > check->max_depth)
            check->max_depth = s->depth;
        if (s->flags & PT_SLICE_OPEN_AT_STOP)
            check->open_at_stop++;
        check->count++;
    }
    return -1;
}

void
pt_slice_check_stats(const pt_slice_check *check, uint64_t *count, uint64_t *open_at_stop,
                     uint32_t *max_depth)
{
    *count = check->count;
    *open_at_stop = check->open_at_stop;
    *max_depth = check->max_depth;
}

int
pt_remap_slices(const pt_slice *in, uint64_t n, const uint32_t *key_map, uint32_t n_map,
                int64_t shift_ns, pt_slice *out)
{
    /* Checked before anything is written for a slice, so a bad batch leaves out
     * holding only remapped slices. A shift that would overflow a time is refused
     * as a bad key is: the caller's tables do not fit the slices. */
    for (uint64_t i = 0; i < n; i++) {
        pt_slice s = in[i];
        if (s.key >= n_map)
            return PT_ERR_ARG;
        if (shift_ns > 0 ? (s.start > INT64_MAX - shift_ns || s.end > INT64_MAX - shift_ns)
                         : (s.start < INT64_MIN - shift_ns || s.end < INT64_MIN - shift_ns))
            return PT_ERR_ARG;
        s.key = key_map[s.key];
        s.start += shift_ns;
        s.end += shift_ns;
        s.tag = 0;
        out[i] = s;
    }
    return PT_OK;
}

uint32_t
pt_max_depth(const pt_slice *slices, uint64_t n)
{
    uint32_t deepest = 0;
    for (uint64_t i = 0; i < n; i++)
        if (slices[i].depth > deepest)
            deepest = slices[i].depth;
    return deepest;
}

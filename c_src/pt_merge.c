/* pt_merge.c - our calls strictly nested around torch.profiler's regions.
 *
 * merge_torch puts our calls on the thread tracks where torch's record_function
 * regions (user_annotation) lie. Ours has each such region too (TorchRegions),
 * and torch's begins inside the call that opened it (record_function's enter op)
 * and ends inside the one that closed it: kept as they are, viewers would show
 * the region twice and slices overlapping without nesting. One slice per region
 * is kept, torch's (its timing and ids tie it to torch's ops): a region of ours
 * with a region of torch's of the same name within it goes, and so does each call
 * of ours that crosses a region's edge (begins outside it and ends inside, or the
 * other way round), alone: its callees stay, under its nearest kept ancestor.
 * torch's ops on the thread (name PT_EDGE_OP) are edges too: our clock and torch's
 * are mapped onto CLOCK_REALTIME apart, and a call of ours holds the aten op it
 * runs by a few hundred ns only, so a clock reading off by that much (an
 * interrupt between its two reads) would make them cross. Such a call goes too,
 * counted apart (crossing_ops).
 * Slices stream through in start order, parents first, a batch at a time; the
 * kept ones are moved up in place and numbered as the kept sequence.
 */
#include "pt_export_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t old;            /* the slice's index as given (over the thread) */
    int64_t kept;           /* its new index, or its nearest kept ancestor's (-1: none) */
    uint32_t depth;         /* kept slices open down to and including it */
} pt_edge_open;

struct pt_region_edges {
    uint64_t n;
    int64_t *start, *end;   /* by start */
    uint32_t *name;
    uint64_t *by_end;       /* indices into the above, by end */
    pt_edge_open *open;
    uint64_t n_open, cap_open;
    uint64_t kept, replaced, crossing, crossing_ops;
    int on_monotonic;       /* pt_region_edges_on_monotonic: the slices' clock, mapped */
    int64_t clocks[4];      /* mono0, off0, mono1, off1 */
};

typedef struct {
    int64_t end;
    uint64_t index;
} pt_end_of;

/* By time, then index: one order whatever qsort does with ties. */
static int
pt_by_end(const void *a, const void *b)
{
    const pt_end_of *p = a, *q = b;
    if (p->end != q->end)
        return (p->end > q->end) - (p->end < q->end);
    return (p->index > q->index) - (p->index < q->index);
}

pt_region_edges *
pt_region_edges_new(const int64_t *starts, const int64_t *ends, const uint32_t *names,
                    uint64_t n)
{
    pt_region_edges *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    uint64_t size = n ? n : 1;
    e->start = malloc(size * sizeof *e->start);
    e->end = malloc(size * sizeof *e->end);
    e->name = malloc(size * sizeof *e->name);
    e->by_end = malloc(size * sizeof *e->by_end);
    if (!e->start || !e->end || !e->name || !e->by_end) {
        pt_region_edges_free(e);
        return NULL;
    }
    /* given in any order: sorted by start here (ties by index), and by_end */
    e->n = n;
    pt_end_of *ends_of = malloc(size * sizeof *ends_of);
    if (!ends_of) {
        pt_region_edges_free(e);
        return NULL;
    }
    for (uint64_t i = 0; i < n; i++) {
        ends_of[i].end = starts[i];
        ends_of[i].index = i;
    }
    qsort(ends_of, n, sizeof *ends_of, pt_by_end);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t from = ends_of[i].index;
        e->start[i] = starts[from];
        e->end[i] = ends[from];
        e->name[i] = names[from];
    }
    for (uint64_t i = 0; i < n; i++) {
        ends_of[i].end = e->end[i];
        ends_of[i].index = i;
    }
    qsort(ends_of, n, sizeof *ends_of, pt_by_end);
    for (uint64_t i = 0; i < n; i++)
        e->by_end[i] = ends_of[i].index;
    free(ends_of);
    return e;
}

void
pt_region_edges_free(pt_region_edges *e)
{
    if (!e)
        return;
    free(e->start);
    free(e->end);
    free(e->name);
    free(e->by_end);
    free(e->open);
    free(e);
}

void
pt_region_edges_on_monotonic(pt_region_edges *e, int64_t mono0, int64_t off0, int64_t mono1,
                             int64_t off1)
{
    e->on_monotonic = 1;
    e->clocks[0] = mono0;
    e->clocks[1] = off0;
    e->clocks[2] = mono1;
    e->clocks[3] = off1;
}

/* The first region whose start is > t. */
static uint64_t
pt_first_start_after(const pt_region_edges *e, int64_t t)
{
    uint64_t lo = 0, hi = e->n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (e->start[mid] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The first region (in by_end order) whose end is > t. */
static uint64_t
pt_first_end_after(const pt_region_edges *e, int64_t t)
{
    uint64_t lo = 0, hi = e->n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        if (e->end[e->by_end[mid]] <= t)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* 1: [a, b] crosses a region's edge; 3: an op's edge only; 2: a region named
 * `name` (> 0) lies within it, and it crosses none; 0: neither. */
static int
pt_edges_meet(const pt_region_edges *e, int64_t a, int64_t b, uint32_t name)
{
    int holds = 0, op = 0;
    for (uint64_t i = pt_first_start_after(e, a); i < e->n && e->start[i] < b; i++) {
        if (e->end[i] > b) {            /* begins inside, ends after */
            if (e->name[i] != PT_EDGE_OP)
                return 1;
            op = 1;
        }
        if (name && e->name[i] == name)
            holds = 1;
    }
    for (uint64_t k = pt_first_end_after(e, a); k < e->n; k++) {
        uint64_t i = e->by_end[k];
        if (e->end[i] >= b)
            break;
        if (e->start[i] < a) {          /* begins before, ends inside */
            if (e->name[i] != PT_EDGE_OP)
                return 1;
            op = 1;
        }
    }
    if (op)
        return 3;
    if (name && !holds)                 /* a region of that name starting with it */
        for (uint64_t i = pt_first_start_after(e, a - 1); i < e->n && e->start[i] == a; i++)
            if (e->name[i] == name && e->end[i] <= b)
                holds = 1;
    return holds ? 2 : 0;
}

uint64_t
pt_region_edges_filter(pt_region_edges *e, pt_slice *slices, uint64_t n, uint64_t first_index,
                       const uint32_t *region_name_of_key, uint32_t n_keys)
{
    uint64_t kept_before = e->kept;
    for (uint64_t i = 0; i < n; i++) {
        pt_slice s = slices[i];
        while (e->n_open && e->open[e->n_open - 1].old != s.parent)
            e->n_open--;
        int64_t parent = e->n_open ? e->open[e->n_open - 1].kept : -1;
        uint32_t depth = e->n_open ? e->open[e->n_open - 1].depth : 0;
        uint32_t name = s.key < n_keys ? region_name_of_key[s.key] : 0;
        int64_t a = s.start, b = s.end;
        if (e->on_monotonic) {
            const int64_t *c = e->clocks;
            a = pt_one_to_realtime(a, c[0], c[1], c[2], c[3]);
            b = pt_one_to_realtime(b, c[0], c[1], c[2], c[3]);
        }
        int meet = pt_edges_meet(e, a, b, name);
        int64_t kept = parent;
        if (meet == 1) {
            e->crossing++;
        } else if (meet == 3) {
            e->crossing_ops++;
        } else if (meet == 2) {
            e->replaced++;
        } else {
            kept = (int64_t)e->kept++;
            s.parent = parent;
            s.depth = depth;
            slices[kept - (int64_t)kept_before] = s;
            depth++;
        }
        if (e->n_open == e->cap_open) {
            uint64_t cap = e->cap_open ? 2 * e->cap_open : 64;
            pt_edge_open *grown = realloc(e->open, cap * sizeof *grown);
            if (!grown)
                return UINT64_MAX;
            e->open = grown;
            e->cap_open = cap;
        }
        e->open[e->n_open].old = (int64_t)(first_index + i);
        e->open[e->n_open].kept = kept;
        e->open[e->n_open++].depth = depth;
    }
    return e->kept - kept_before;
}

void
pt_region_edges_counts(const pt_region_edges *e, uint64_t *replaced, uint64_t *crossing,
                       uint64_t *crossing_ops)
{
    *replaced = e->replaced;
    *crossing = e->crossing;
    *crossing_ops = e->crossing_ops;
}

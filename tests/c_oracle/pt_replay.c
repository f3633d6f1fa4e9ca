/* pt_replay.c - the tests' independent reference for the streaming walk
 * (c_src/pt_walk.c), which is what the package pairs events with. A test oracle,
 * not part of the package: tests/oracle_build.py compiles it into a test-only
 * module against the package's public headers, so that tests hold the walk to a
 * second, simpler machine on real traces (tests/replay_reference.py drives it).
 *
 * Replay pairs a thread's calls and returns into a slice table with parent
 * links, in one pass over its events (a stopped tracer's chunks or a spill file's
 * blocks, joined by the caller), without touching Python. A return closes the
 * innermost open call with the same key; calls left open above it (their return
 * was never seen) close at the same instant. A return with no open call of its
 * key (a frame entered before tracing and deeper than the seeded stack) is
 * ignored. Calls still open at the end close at stop time. Then the slice
 * pipeline works on the whole table: torch regions inserted (pt_insert_regions),
 * tagged calls found (pt_tagged_slices, named in Python), short calls dropped
 * (pt_drop_short_slices), carriers dropped (pt_drop_keys). The walk does all of
 * it incrementally, in time order.
 */
#include "pt_read.h"
#include "pt_replay.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    int64_t slice;          /* index in out, or -1 when not emitted */
    int64_t child_parent;   /* what this frame's callees point to */
    uint32_t key;
    uint8_t is_c;
    uint8_t hides_subtree;
} pt_open_call;

typedef struct {
    int64_t ticks;          /* clock at the current event */
    int64_t tick0;          /* ns = ns0 + (ticks - tick0) * ns_per_tick */
    int64_t ns0;
    double ns_per_tick;
    const uint8_t *hidden;
    uint32_t n_hidden;
    pt_slice *out;
    uint64_t cap;
    uint64_t n;
    pt_open_call *stack;
    uint64_t depth;
    uint64_t stack_cap;
    uint64_t hiding;        /* open calls that hide their callees */
} pt_replay_state;

static void
pt_replay_pop(pt_replay_state *st, int64_t ts, uint32_t extra_flags)
{
    pt_open_call *call = &st->stack[--st->depth];
    if (call->slice >= 0) {
        st->out[call->slice].end = ts;
        st->out[call->slice].flags |= extra_flags;
    }
    if (call->hides_subtree)
        st->hiding--;
}

static inline int64_t
pt_replay_ns(const pt_replay_state *st, int64_t ticks)
{
    return st->ns0 + (int64_t)((double)(ticks - st->tick0) * st->ns_per_tick);
}

static int
pt_replay_push(pt_replay_state *st, uint32_t kind, uint32_t key, int64_t ts)
{
    if (st->depth == st->stack_cap) {
        uint64_t cap = st->stack_cap ? st->stack_cap * 2 : 256;
        pt_open_call *stack = realloc(st->stack, cap * sizeof *stack);
        if (!stack)
            return PT_ERR_NOMEM;
        st->stack = stack;
        st->stack_cap = cap;
    }
    int seeded = kind == PT_EV_PY_SEED;
    int is_c = kind == PT_EV_C_CALL;
    uint8_t hide = key < st->n_hidden ? st->hidden[key] : 0;
    if (((hide == PT_HIDE_SEEDED || hide == PT_HIDE_STARTUP) && !seeded) ||
        hide == PT_HIDE_CARRIER)
        hide = 0;
    int hidden_key = hide != 0;
    int64_t parent = st->depth ? st->stack[st->depth - 1].child_parent : -1;
    int64_t slice = -1;
    if (!hidden_key && !st->hiding) {
        if (st->n == st->cap)
            return PT_ERR_ARG;
        slice = (int64_t)st->n++;
        pt_slice *out = &st->out[slice];
        out->start = ts;
        out->end = ts;
        out->key = key;
        /* seeded when the trace began (not when a thread born later attached) */
        int open_at_start = seeded && st->ticks == st->tick0;
        out->flags = (is_c ? PT_SLICE_C : 0) | (open_at_start ? PT_SLICE_SEEDED : 0);
        out->parent = parent;
        out->tag = 0;
        out->depth = parent >= 0 ? st->out[parent].depth + 1 : 0;
    }
    pt_open_call *call = &st->stack[st->depth++];
    call->slice = slice;
    call->child_parent = slice >= 0 ? slice : parent;
    call->key = key;
    call->is_c = (uint8_t)is_c;
    call->hides_subtree = (uint8_t)((hide == PT_HIDE_SUBTREE && !seeded) ||
                                         hide == PT_HIDE_STARTUP);
    if (call->hides_subtree)
        st->hiding++;
    return PT_OK;
}

static void
pt_replay_return(pt_replay_state *st, uint32_t kind, uint32_t key, int64_t ts)
{
    uint8_t is_c = kind == PT_EV_C_RETURN;
    uint64_t i = st->depth;
    while (i > 0) {
        const pt_open_call *call = &st->stack[i - 1];
        if (call->key == key && call->is_c == is_c)
            break;
        i--;
    }
    if (i == 0)
        return;
    while (st->depth >= i)
        pt_replay_pop(st, ts, 0);
}

static int
pt_replay_visit(pt_replay_state *st, const pt_event *events, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        const pt_event *ev = &events[i];
        uint32_t kind = ev->key_kind & PT_KIND_MASK;
        uint32_t key = ev->key_kind >> PT_KEY_SHIFT;
        st->ticks += ev->delta;
        if (kind == PT_EV_AUX) {
            /* aux: its key is payload and sub-kind; unknown sub-kinds name nothing */
            uint32_t sub_kind = key & PT_AUX_MASK, payload = key >> PT_AUX_SHIFT;
            if (sub_kind == PT_AUX_TIME)
                st->ticks += (int64_t)((uint64_t)payload << 32);
            else if ((sub_kind == PT_AUX_TAG || sub_kind == PT_AUX_ARGS) &&
                     st->depth && st->stack[st->depth - 1].slice >= 0)
                st->out[st->stack[st->depth - 1].slice].tag =
                    sub_kind == PT_AUX_ARGS ? payload | PT_TAG_ARGS_BIT : payload;
            continue;
        }
        int64_t ts = pt_replay_ns(st, st->ticks);
        if (kind == PT_EV_PY_RETURN || kind == PT_EV_C_RETURN) {
            pt_replay_return(st, kind, key, ts);
        } else if (kind <= PT_EV_PY_SEED) {
            int rc = pt_replay_push(st, kind, key, ts);
            if (rc != PT_OK)
                return rc;
        }
    }
    return PT_OK;
}

/* Prepares a replay starting at `ticks`. */
static void
pt_replay_init(pt_replay_state *st, int64_t ticks, const uint8_t *hidden, uint32_t n_hidden,
               int64_t tick0, int64_t ns0, double ns_per_tick, pt_slice *out, uint64_t cap)
{
    memset(st, 0, sizeof *st);
    st->ticks = ticks;
    st->tick0 = tick0;
    st->ns0 = ns0;
    st->ns_per_tick = ns_per_tick;
    st->hidden = hidden;
    st->n_hidden = n_hidden;
    st->out = out;
    st->cap = cap;
}

/* Closes the calls still open at stop time and releases the replay's stack. */
static void
pt_replay_finish(pt_replay_state *st, int rc, int64_t stop_ticks, uint64_t *n_out)
{
    if (rc == PT_OK) {
        int64_t stop_ns = pt_replay_ns(st, stop_ticks);
        while (st->depth > 0)
            pt_replay_pop(st, stop_ns, PT_SLICE_OPEN_AT_STOP);
        *n_out = st->n;
    }
    free(st->stack);
}

int
pt_replay_buffer(const pt_event *events, uint64_t n, int64_t base_ticks, int64_t stop_ticks,
                 const uint8_t *hidden, uint32_t n_hidden, int64_t tick0, int64_t ns0,
                 double ns_per_tick, pt_slice *out, uint64_t cap, uint64_t *n_out)
{
    pt_replay_state st;
    pt_replay_init(&st, base_ticks, hidden, n_hidden, tick0, ns0, ns_per_tick, out, cap);
    int rc = pt_replay_visit(&st, events, n);
    pt_replay_finish(&st, rc, stop_ticks, n_out);
    return rc;
}

uint64_t
pt_count_calls(const pt_event *events, uint64_t n)
{
    uint64_t calls = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t kind = events[i].key_kind & PT_KIND_MASK;
        calls += kind == PT_EV_PY_CALL || kind == PT_EV_C_CALL || kind == PT_EV_PY_SEED;
    }
    return calls;
}

uint64_t
pt_tagged_slices(const pt_slice *slices, uint64_t n, uint64_t *out, uint64_t cap)
{
    uint64_t found = 0;
    for (uint64_t i = 0; i < n; i++)
        if (slices[i].tag) {
            if (found < cap)
                out[found] = i;
            found++;
        }
    return found;
}

uint64_t
pt_drop_short_slices(pt_slice *slices, uint64_t n, int64_t min_ns, int64_t *new_index)
{
    /* A call shorter than min_ns has only shorter callees: its whole subtree
     * goes, and every kept call's parent is kept, so parents only renumber. */
    uint64_t kept = 0;
    for (uint64_t i = 0; i < n; i++) {
        pt_slice s = slices[i];
        if (s.end - s.start < min_ns || (s.parent >= 0 && new_index[s.parent] < 0)) {
            new_index[i] = -1;
            continue;
        }
        new_index[i] = (int64_t)kept;
        if (s.parent >= 0)
            s.parent = new_index[s.parent];
        slices[kept++] = s;
    }
    return kept;
}

uint64_t
pt_drop_keys(pt_slice *slices, uint64_t n, const uint8_t *drop, uint32_t n_drop,
             int64_t *new_index)
{
    /* A parent comes before its children: when a child is met, its parent's new
     * index is known (a dropped slice's is its own nearest kept ancestor's). */
    uint64_t kept = 0;
    for (uint64_t i = 0; i < n; i++) {
        pt_slice s = slices[i];
        int64_t parent = s.parent >= 0 && (uint64_t)s.parent < i ? new_index[s.parent] : -1;
        if (s.key < n_drop && drop[s.key]) {
            new_index[i] = parent;
            continue;
        }
        s.parent = parent;
        s.depth = parent >= 0 ? slices[parent].depth + 1 : 0;
        new_index[i] = (int64_t)kept;
        slices[kept++] = s;
    }
    return kept;
}

uint64_t
pt_insert_regions(const pt_slice *in, uint64_t n, const uint32_t *region_keys, uint32_t n_tags,
                  pt_slice *out, uint64_t cap, int64_t *scratch)
{
    /* Counting pass: one region per opening call. */
    if (!out) {
        uint64_t openers = 0;
        for (uint64_t i = 0; i < n; i++) {
            uint32_t tag = in[i].tag;
            openers += tag < n_tags && region_keys[tag] && region_keys[tag] != PT_REGION_EXIT;
        }
        return openers;
    }
    /* scratch: map old index -> new, then the open regions' (old parent of the
     * opening call, new index of the region), innermost last. A region stays
     * open while the calls met descend from its opener's parent: those are
     * exactly the direct children of that parent and the calls whose parent
     * was emitted after the region (a call started after the opener that is
     * not inside the parent cannot be inside anything emitted since). */
    uint64_t max_open = cap > n ? cap - n : 0;      /* one per region at most */
    int64_t *map = scratch;
    int64_t *open_parent = scratch + n;
    int64_t *open_region = scratch + n + max_open;
    uint64_t n_open = 0, m = 0;
    int64_t thread_end = 0;
    for (uint64_t i = 0; i < n; i++)
        if (in[i].end > thread_end || i == 0)
            thread_end = in[i].end;
    for (uint64_t i = 0; i <= n; i++) {
        int64_t parent = i < n ? in[i].parent : -2;     /* -2: past the end, all close */
        while (n_open) {
            int64_t enclosing = open_parent[n_open - 1], region = open_region[n_open - 1];
            if (parent == enclosing || (parent >= 0 && map[parent] > region))
                break;
            out[region].end = enclosing >= 0 ? in[enclosing].end : thread_end;
            n_open--;
        }
        if (i == n)
            break;
        if (m >= cap)
            return UINT64_MAX;
        int64_t new_parent = n_open && parent == open_parent[n_open - 1]
            ? open_region[n_open - 1] : (parent >= 0 ? map[parent] : -1);
        uint32_t tag = in[i].tag;
        uint32_t region_key = tag < n_tags ? region_keys[tag] : 0;
        if (region_key && region_key != PT_REGION_EXIT) {
            if (m + 1 >= cap || n_open >= max_open)
                return UINT64_MAX;
            pt_slice *r = &out[m];
            r->start = in[i].start;
            r->end = in[i].end;
            r->key = region_key;
            r->flags = 0;
            r->parent = new_parent;
            r->tag = 0;
            r->depth = new_parent >= 0 ? out[new_parent].depth + 1 : 0;
            open_parent[n_open] = parent;
            open_region[n_open] = (int64_t)m;
            n_open++;
            new_parent = (int64_t)m++;
        }
        pt_slice *s = &out[m];
        *s = in[i];
        s->parent = new_parent;
        s->depth = new_parent >= 0 ? out[new_parent].depth + 1 : 0;
        map[i] = (int64_t)m++;
        if (region_key == PT_REGION_EXIT && n_open && parent == open_parent[n_open - 1]) {
            out[open_region[n_open - 1]].end = in[i].end;
            n_open--;
        }
    }
    return m;
}

/* pt_summary.c - calls, total and self time per function over a thread's slices,
 * and per distinct stack (pt_stacks: collapsed stacks and pprof).
 *
 * The summary runs over every call of a trace, millions of them for the HTML page
 * and the summary command, so its per-call loop lives here rather than in Python.
 * Total time counts a function once however deep it recurses: a call made while
 * the same function is open adds to its calls and self time only. A frame that
 * was running when the trace began (PT_SLICE_SEEDED: at start(), or a forked
 * child's frames continued from its parent) adds its time but is no call.
 * pt_summarize_slices takes a whole slice table (the tests' oracle); summaries
 * stream through a pt_summarizer, batch by batch.
 */
#include "pt_export_internal.h"

#include <stdlib.h>
#include <string.h>

int
pt_summarize_slices(const pt_slice *slices, uint64_t n, const uint32_t *name_of_key,
                    uint32_t n_keys, uint32_t n_names, uint64_t *calls, int64_t *total_ns,
                    int64_t *self_ns, uint32_t *times_open)
{
    /* The open calls, outermost first: slices come parent first, so the calls
     * above a slice's parent on this stack have ended. */
    uint64_t open = 0, open_cap = 64;
    int64_t *stack = malloc(open_cap * sizeof *stack);
    uint32_t *stack_names = malloc(open_cap * sizeof *stack_names);
    int status = PT_OK;
    if (stack == NULL || stack_names == NULL) {
        status = PT_ERR_NOMEM;
        goto done;
    }
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *s = &slices[i];
        if (s->key >= n_keys || name_of_key[s->key] >= n_names) {
            status = PT_ERR_ARG;
            goto done;
        }
        while (open && stack[open - 1] != s->parent) {
            open--;
            times_open[stack_names[open]]--;
        }
        uint32_t name = name_of_key[s->key];
        int64_t duration = s->end - s->start;
        calls[name] += !(s->flags & PT_SLICE_SEEDED);
        self_ns[name] += duration;
        if (open)
            self_ns[stack_names[open - 1]] -= duration;
        if (!times_open[name])
            total_ns[name] += duration;
        if (open == open_cap) {
            int64_t *grown = realloc(stack, 2 * open_cap * sizeof *stack);
            if (grown == NULL) {
                status = PT_ERR_NOMEM;
                goto done;
            }
            stack = grown;
            uint32_t *grown_names = realloc(stack_names, 2 * open_cap * sizeof *stack_names);
            if (grown_names == NULL) {
                status = PT_ERR_NOMEM;
                goto done;
            }
            stack_names = grown_names;
            open_cap *= 2;
        }
        stack[open] = (int64_t)i;
        stack_names[open++] = name;
        times_open[name]++;
    }
done:
    /* times_open is the caller's, zeroed for the next thread */
    while (open) {
        open--;
        times_open[stack_names[open]]--;
    }
    free(stack);
    free(stack_names);
    return status;
}

/* The streaming form, for traces summarized from their events without a slice
 * table: the open calls carry over from one batch to the next. */
struct pt_summarizer {
    uint32_t *name_of_key;
    uint32_t n_keys, n_names;
    uint32_t *times_open;       /* per name: how many of its calls are open */
    uint64_t open, open_cap;    /* the open calls, outermost first */
    int64_t *open_index;        /* thread-wide slice index */
    uint32_t *open_name;
};

pt_summarizer *
pt_summarizer_new(const uint32_t *name_of_key, uint32_t n_keys, uint32_t n_names)
{
    pt_summarizer *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->n_keys = n_keys;
    s->n_names = n_names;
    s->name_of_key = malloc((n_keys ? n_keys : 1) * sizeof *s->name_of_key);
    s->times_open = calloc(n_names ? n_names : 1, sizeof *s->times_open);
    if (s->name_of_key == NULL || s->times_open == NULL) {
        pt_summarizer_free(s);
        return NULL;
    }
    if (n_keys)
        memcpy(s->name_of_key, name_of_key, n_keys * sizeof *s->name_of_key);
    return s;
}

void
pt_summarizer_free(pt_summarizer *s)
{
    if (s == NULL)
        return;
    free(s->name_of_key);
    free(s->times_open);
    free(s->open_index);
    free(s->open_name);
    free(s);
}

void
pt_summarizer_end_thread(pt_summarizer *s)
{
    while (s->open) {
        s->open--;
        s->times_open[s->open_name[s->open]]--;
    }
}

/* Pops the calls that ended before slice, so that its parent is on top;
 * PT_ERR_ARG for a key or name out of range, or a parent that is no open call.
 * Sets *name to the slice's name. */
static int
summarizer_enter(pt_summarizer *s, const pt_slice *slice, uint32_t *name)
{
    if (slice->key >= s->n_keys || s->name_of_key[slice->key] >= s->n_names)
        return PT_ERR_ARG;
    while (s->open && s->open_index[s->open - 1] != slice->parent) {
        s->open--;
        s->times_open[s->open_name[s->open]]--;
    }
    if (slice->parent >= 0 && !s->open)
        return PT_ERR_ARG;
    *name = s->name_of_key[slice->key];
    return PT_OK;
}

/* Opens the slice at thread-wide index as the innermost call. */
static int
summarizer_push(pt_summarizer *s, uint64_t index, uint32_t name)
{
    if (s->open == s->open_cap) {
        uint64_t cap = s->open_cap ? 2 * s->open_cap : 64;
        int64_t *indices = realloc(s->open_index, cap * sizeof *indices);
        if (indices == NULL)
            return PT_ERR_NOMEM;
        s->open_index = indices;
        uint32_t *names = realloc(s->open_name, cap * sizeof *names);
        if (names == NULL)
            return PT_ERR_NOMEM;
        s->open_name = names;
        s->open_cap = cap;
    }
    s->open_index[s->open] = (int64_t)index;
    s->open_name[s->open++] = name;
    s->times_open[name]++;
    return PT_OK;
}

int
pt_summarizer_feed(pt_summarizer *s, const pt_slice *slices, uint64_t n, uint64_t first_index,
                   uint64_t *calls, int64_t *total_ns, int64_t *self_ns)
{
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *slice = &slices[i];
        uint32_t name;
        int status = summarizer_enter(s, slice, &name);
        if (status != PT_OK)
            return status;
        int64_t duration = slice->end - slice->start;
        calls[name] += !(slice->flags & PT_SLICE_SEEDED);
        self_ns[name] += duration;
        if (s->open)
            self_ns[s->open_name[s->open - 1]] -= duration;
        if (!s->times_open[name])
            total_ns[name] += duration;
        status = summarizer_push(s, first_index + i, name);
        if (status != PT_OK)
            return status;
    }
    return PT_OK;
}

/* Self time inside time windows only (the steps of `summary --steps`): each
 * call's time clipped to each window it overlaps, less its direct callees' time
 * clipped alike, added to the table of the window's group. A call spanning
 * several windows (the loop around the steps) is visited once per window. */
int
pt_summarizer_feed_windows(pt_summarizer *s, const pt_slice *slices, uint64_t n,
                           uint64_t first_index, const int64_t *bounds, const uint32_t *groups,
                           uint32_t n_windows, int64_t *self_ns)
{
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *slice = &slices[i];
        uint32_t name;
        int status = summarizer_enter(s, slice, &name);
        if (status != PT_OK)
            return status;
        /* the first window ending after the call starts: windows are sorted */
        uint32_t low = 0, high = n_windows;
        while (low < high) {
            uint32_t middle = low + (high - low) / 2;
            if (bounds[2 * middle + 1] <= slice->start)
                low = middle + 1;
            else
                high = middle;
        }
        for (uint32_t w = low; w < n_windows && bounds[2 * w] < slice->end; w++) {
            int64_t from = slice->start > bounds[2 * w] ? slice->start : bounds[2 * w];
            int64_t to = slice->end < bounds[2 * w + 1] ? slice->end : bounds[2 * w + 1];
            if (to <= from)
                continue;
            int64_t *table = self_ns + (uint64_t)groups[w] * s->n_names;
            table[name] += to - from;
            if (s->open)
                table[s->open_name[s->open - 1]] -= to - from;
        }
        status = summarizer_push(s, first_index + i, name);
        if (status != PT_OK)
            return status;
    }
    return PT_OK;
}

/* Per distinct stack, for the flame-graph outputs (collapsed stacks, pprof): a
 * tree of nodes, one per (parent node, frame), with the calls whose innermost
 * frame it is and their self time, as the summarizer counts them (a frame open
 * at start adds time, no call; self time is a call's time less its direct
 * callees'). The caller makes each thread's root (pt_stacks_node: its thread,
 * under its process for a job) and feeds the thread's slices under it. */
struct pt_stacks {
    uint32_t *frame_of_key;
    uint32_t n_keys;
    pt_stack_node *nodes;
    uint64_t n_nodes, nodes_cap;
    uint32_t *slots;            /* (parent, frame) -> node + 1, open addressing; 0: empty */
    uint64_t slot_mask;         /* slots - 1, a power of two less one */
    uint32_t root;              /* this thread's */
    uint64_t open, open_cap;    /* the open calls, outermost first */
    int64_t *open_index;        /* thread-wide slice index */
    uint64_t open_index_cap;
    uint32_t *open_node;
};

pt_stacks *
pt_stacks_new(const uint32_t *frame_of_key, uint32_t n_keys)
{
    pt_stacks *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->n_keys = n_keys;
    s->frame_of_key = malloc((n_keys ? n_keys : 1) * sizeof *s->frame_of_key);
    s->slot_mask = 1023;
    s->slots = calloc(s->slot_mask + 1, sizeof *s->slots);
    s->root = PT_NO_NODE;
    if (s->frame_of_key == NULL || s->slots == NULL) {
        pt_stacks_free(s);
        return NULL;
    }
    if (n_keys)
        memcpy(s->frame_of_key, frame_of_key, n_keys * sizeof *s->frame_of_key);
    return s;
}

void
pt_stacks_free(pt_stacks *s)
{
    if (s == NULL)
        return;
    free(s->frame_of_key);
    free(s->nodes);
    free(s->slots);
    free(s->open_index);
    free(s->open_node);
    free(s);
}

static uint64_t
pt_stacks_slot(uint32_t parent, uint32_t frame, uint64_t mask)
{
    uint64_t pair = (uint64_t)parent << 32 | frame;
    return (pair * 0x9E3779B97F4A7C15ull >> 32) & mask;
}

/* Twice the slots, the nodes placed again: kept under half full. */
static int
pt_stacks_rehash(pt_stacks *s)
{
    uint64_t mask = 2 * s->slot_mask + 1;
    uint32_t *slots = calloc(mask + 1, sizeof *slots);
    if (slots == NULL)
        return PT_ERR_NOMEM;
    for (uint64_t node = 0; node < s->n_nodes; node++) {
        uint64_t at = pt_stacks_slot(s->nodes[node].parent, s->nodes[node].frame_id, mask);
        while (slots[at])
            at = (at + 1) & mask;
        slots[at] = (uint32_t)node + 1;
    }
    free(s->slots);
    s->slots = slots;
    s->slot_mask = mask;
    return PT_OK;
}

uint32_t
pt_stacks_node(pt_stacks *s, uint32_t parent, uint32_t frame)
{
    uint64_t at = pt_stacks_slot(parent, frame, s->slot_mask);
    for (uint32_t found; (found = s->slots[at]) != 0; at = (at + 1) & s->slot_mask) {
        const pt_stack_node *node = &s->nodes[found - 1];
        if (node->parent == parent && node->frame_id == frame)
            return found - 1;
    }
    /* node + 1 must fit a slot, and PT_NO_NODE stays no node */
    if (s->n_nodes >= PT_NO_NODE - 1
        || pt_grow((void **)&s->nodes, &s->nodes_cap, s->n_nodes + 1, sizeof *s->nodes))
        return PT_NO_NODE;
    if (2 * (s->n_nodes + 1) > s->slot_mask + 1) {
        if (pt_stacks_rehash(s))
            return PT_NO_NODE;
        at = pt_stacks_slot(parent, frame, s->slot_mask);
        while (s->slots[at])
            at = (at + 1) & s->slot_mask;
    }
    uint32_t made = (uint32_t)s->n_nodes++;
    s->nodes[made] = (pt_stack_node){.parent = parent, .frame_id = frame};
    s->slots[at] = made + 1;
    return made;
}

int
pt_stacks_begin_thread(pt_stacks *s, uint32_t root)
{
    if (root >= s->n_nodes)
        return PT_ERR_ARG;
    s->root = root;
    s->open = 0;
    return PT_OK;
}

int
pt_stacks_feed(pt_stacks *s, const pt_slice *slices, uint64_t n, uint64_t first_index)
{
    if (s->root == PT_NO_NODE)
        return PT_ERR_STATE;
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *slice = &slices[i];
        if (slice->key >= s->n_keys)
            return PT_ERR_ARG;
        while (s->open && s->open_index[s->open - 1] != slice->parent)
            s->open--;
        if (slice->parent >= 0 && !s->open)
            return PT_ERR_ARG;
        uint32_t parent = s->open ? s->open_node[s->open - 1] : s->root;
        uint32_t node = pt_stacks_node(s, parent, s->frame_of_key[slice->key]);
        if (node == PT_NO_NODE)
            return PT_ERR_NOMEM;
        int64_t duration = slice->end - slice->start;
        s->nodes[node].calls += !(slice->flags & PT_SLICE_SEEDED);
        s->nodes[node].self_ns += duration;
        if (s->open)        /* a root call's time is no part of its thread's node */
            s->nodes[parent].self_ns -= duration;
        if (pt_grow((void **)&s->open_index, &s->open_index_cap, s->open + 1,
                    sizeof *s->open_index)
            || pt_grow((void **)&s->open_node, &s->open_cap, s->open + 1,
                       sizeof *s->open_node))
            return PT_ERR_NOMEM;
        s->open_index[s->open] = (int64_t)(first_index + i);
        s->open_node[s->open++] = node;
    }
    return PT_OK;
}

void
pt_stacks_end_thread(pt_stacks *s)
{
    s->open = 0;
    s->root = PT_NO_NODE;
}

uint64_t
pt_stacks_nodes(const pt_stacks *s, const pt_stack_node **nodes)
{
    *nodes = s->nodes;
    return s->n_nodes;
}

/* A node as pt_stacks_preorder sorts them: siblings together, most total first. */
typedef struct {
    uint32_t parent, frame_id, node;
    int64_t total;
} pt_stack_rank;

static int
pt_stack_rank_compare(const void *left, const void *right)
{
    const pt_stack_rank *a = left, *b = right;
    if (a->parent != b->parent)
        return a->parent < b->parent ? -1 : 1;
    if (a->total != b->total)
        return a->total > b->total ? -1 : 1;
    if (a->frame_id != b->frame_id)
        return a->frame_id < b->frame_id ? -1 : 1;
    return a->node < b->node ? -1 : a->node > b->node;
}

int
pt_stacks_preorder(const pt_stacks *s, uint32_t *order, uint32_t *depth, uint32_t *span,
                   int64_t *total, uint32_t *position)
{
    uint64_t n = s->n_nodes;
    if (n == 0)
        return PT_OK;
    /* totals by node first (in total[], reused by position once placed): a node
     * is made after its parent, so children come later */
    int64_t *by_node = malloc(n * sizeof *by_node);
    pt_stack_rank *ranked = malloc(n * sizeof *ranked);
    uint64_t *first_child = malloc((n + 1) * sizeof *first_child);
    uint64_t *pending = malloc(n * sizeof *pending);       /* a stack of ranked indices */
    int status = PT_ERR_NOMEM;
    if (by_node == NULL || ranked == NULL || first_child == NULL || pending == NULL)
        goto done;
    for (uint64_t i = 0; i < n; i++)
        by_node[i] = s->nodes[i].self_ns;
    for (uint64_t i = n; i-- > 0;)
        if (s->nodes[i].parent != PT_NO_NODE)
            by_node[s->nodes[i].parent] += by_node[i];
    for (uint64_t i = 0; i < n; i++)
        ranked[i] = (pt_stack_rank){.parent = s->nodes[i].parent,
                                    .frame_id = s->nodes[i].frame_id,
                                    .node = (uint32_t)i, .total = by_node[i]};
    qsort(ranked, n, sizeof *ranked, pt_stack_rank_compare);
    /* node p's children: ranked[first_child[p] .. first_child[p + 1]); the roots
     * (parent PT_NO_NODE) sort last, from first_child[n] */
    uint64_t at = 0;
    for (uint64_t p = 0; p <= n; p++) {
        first_child[p] = at;
        while (at < n && ranked[at].parent == p)
            at++;
    }
    uint64_t placed = 0, open = 0;
    for (uint64_t r = n; r-- > first_child[n];)    /* pushed last first: popped in order */
        pending[open++] = r;
    while (open) {
        const pt_stack_rank *next = &ranked[pending[--open]];
        uint32_t node = next->node;
        uint64_t here = placed++;
        order[here] = node;
        position[node] = (uint32_t)here;
        total[here] = next->total;
        depth[here] = next->parent == PT_NO_NODE ? 0 : depth[position[next->parent]] + 1;
        span[here] = 0;
        for (uint64_t r = first_child[node + 1]; r-- > first_child[node];)
            pending[open++] = r;
    }
    /* a subtree ends where the next position at its depth or above begins */
    for (uint64_t p = n; p-- > 0;) {
        uint64_t end = p + 1;
        while (end < n && depth[end] > depth[p])
            end += (uint64_t)span[end] + 1;
        span[p] = (uint32_t)(end - p - 1);
    }
    status = PT_OK;
done:
    free(by_node);
    free(ranked);
    free(first_child);
    free(pending);
    return status;
}

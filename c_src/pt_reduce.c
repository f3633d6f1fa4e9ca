/* pt_reduce.c - the calls a size-bounded view (the HTML page) keeps of a thread.
 *
 * A page that embeds millions of calls is neither small nor fast, and at full
 * zoom-out most of them are far under a pixel wide. The view keeps the calls that
 * last at least min_ns (a pixel at full zoom-out) and the whole top levels; as a
 * parent lasts at least as long as its callees and is shallower, the kept calls
 * are closed under "parent of", so they nest exactly as in the full trace.
 * pt_reduce_slices works on a whole slice table (the tests' oracle); the page
 * streams through a pt_reducer, batch by batch, and never needs the table.
 */
#include "pt_export_internal.h"

#include <stdlib.h>

typedef struct {
    int64_t slice;          /* index in the thread's slices */
    uint64_t position;      /* where it went in the kept output */
} pt_kept_open;

int64_t
pt_reduce_slices(const pt_slice *slices, uint64_t n, int64_t min_ns, uint32_t top_levels,
                 uint64_t *kept, int64_t *self_ns, uint64_t cap)
{
    /* The kept calls still open at slice i, outermost first: its kept ancestors.
     * Slices come parent first, so everything above i's parent has ended. */
    uint64_t open = 0, open_cap = 64, count = 0;
    pt_kept_open *stack = malloc(open_cap * sizeof *stack);
    if (stack == NULL)
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *s = &slices[i];
        int64_t duration = s->end - s->start;
        while (open && stack[open - 1].slice > s->parent)
            open--;
        int parent_kept = open && stack[open - 1].slice == s->parent;
        /* Self time counts every callee, kept or not. */
        if (parent_kept && stack[open - 1].position < cap)
            self_ns[stack[open - 1].position] -= duration;
        if (!(duration >= min_ns || s->depth < top_levels) || (s->parent >= 0 && !parent_kept))
            continue;
        if (open == open_cap) {
            pt_kept_open *grown = realloc(stack, 2 * open_cap * sizeof *stack);
            if (grown == NULL) {
                free(stack);
                return -1;
            }
            stack = grown;
            open_cap *= 2;
        }
        if (count < cap) {
            kept[count] = i;
            self_ns[count] = duration;
        }
        stack[open].slice = (int64_t)i;
        stack[open].position = count++;
        open++;
    }
    free(stack);
    return (int64_t)count;
}

/* The streaming form: the same rule over a thread's slices fed in batches (start
 * order, parents numbered over the whole thread), so a page of any trace needs
 * neither its slice table nor a pass per threshold tried. */

#define PT_REDUCE_INF INT64_MAX     /* a call kept whatever the threshold */

struct pt_reducer {
    int64_t min_ns;
    uint32_t top_levels;
    /* The open calls, outermost first (every call for counting, the kept ones
     * when keeping): their thread-wide index, and per entry either, counting, the
     * shortest own duration on its path per top_levels 0..levels (kept at a
     * threshold iff that is at least it), or, keeping, where it went in out. */
    uint64_t open, open_cap;
    int64_t *open_index;
    int64_t *open_value;
    uint32_t values_per_entry;
    pt_reduced *out;            /* the kept calls, grown with realloc */
    uint64_t n_out, out_cap;
};

pt_reducer *
pt_reducer_new(int64_t min_ns, uint32_t top_levels)
{
    pt_reducer *r = calloc(1, sizeof *r);
    if (r == NULL)
        return NULL;
    r->min_ns = min_ns;
    r->top_levels = top_levels;
    /* counting keeps one value per candidate top_levels, keeping one position */
    r->values_per_entry = top_levels + 1;
    return r;
}

void
pt_reducer_free(pt_reducer *r)
{
    if (r == NULL)
        return;
    free(r->open_index);
    free(r->open_value);
    free(r->out);
    free(r);
}

void
pt_reducer_end_thread(pt_reducer *r)
{
    r->open = 0;
}

static int
pt_reducer_push(pt_reducer *r)
{
    if (r->open < r->open_cap)
        return PT_OK;
    uint64_t cap = r->open_cap ? 2 * r->open_cap : 64;
    int64_t *index = realloc(r->open_index, cap * sizeof *index);
    if (index == NULL)
        return PT_ERR_NOMEM;
    r->open_index = index;
    int64_t *value = realloc(r->open_value, cap * r->values_per_entry * sizeof *value);
    if (value == NULL)
        return PT_ERR_NOMEM;
    r->open_value = value;
    r->open_cap = cap;
    return PT_OK;
}

/* The bucket of a path minimum: 0 under base, 1 + k for [base << k, base << k+1),
 * PT_REDUCE_BUCKETS - 1 when kept at any threshold. */
static uint32_t
pt_reduce_bucket(int64_t value, int64_t base)
{
    if (value == PT_REDUCE_INF)
        return PT_REDUCE_BUCKETS - 1;
    if (value < base)
        return 0;
    uint32_t k = 0;
    int64_t edge = base;
    /* edge * 2 <= value without overflow */
    while (edge <= value / 2 && k < PT_REDUCE_BUCKETS - 3) {
        edge *= 2;
        k++;
    }
    return 1 + k;
}

int
pt_reducer_count(pt_reducer *r, const pt_slice *slices, uint64_t n, uint64_t first_index,
                 uint64_t *buckets)
{
    uint32_t levels = r->values_per_entry;
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *s = &slices[i];
        int64_t duration = s->end - s->start;
        while (r->open && r->open_index[r->open - 1] != s->parent)
            r->open--;
        if (s->parent >= 0 && !r->open)
            return PT_ERR_ARG;          /* a parent that is not an open call */
        if (pt_reducer_push(r) != PT_OK)
            return PT_ERR_NOMEM;
        const int64_t *up = r->open ? &r->open_value[(r->open - 1) * levels] : NULL;
        int64_t *mine = &r->open_value[r->open * levels];
        for (uint32_t t = 0; t < levels; t++) {
            int64_t own = s->depth < t ? PT_REDUCE_INF : duration;
            mine[t] = up != NULL && up[t] < own ? up[t] : own;
            buckets[t * PT_REDUCE_BUCKETS + pt_reduce_bucket(mine[t], r->min_ns)]++;
        }
        r->open_index[r->open++] = (int64_t)(first_index + i);
    }
    return PT_OK;
}

int
pt_reducer_keep(pt_reducer *r, const pt_slice *slices, uint64_t n, uint64_t first_index)
{
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *s = &slices[i];
        int64_t duration = s->end - s->start;
        while (r->open && r->open_index[r->open - 1] > s->parent)
            r->open--;
        int parent_kept = r->open && r->open_index[r->open - 1] == s->parent;
        /* Self time counts every callee, kept or not. */
        if (parent_kept)
            r->out[r->open_value[(r->open - 1) * r->values_per_entry]].self_ns -= duration;
        if (!(duration >= r->min_ns || s->depth < r->top_levels) ||
                (s->parent >= 0 && !parent_kept))
            continue;
        if (pt_reducer_push(r) != PT_OK)
            return PT_ERR_NOMEM;
        if (r->n_out == r->out_cap) {
            uint64_t cap = r->out_cap ? 2 * r->out_cap : 1024;
            pt_reduced *grown = realloc(r->out, cap * sizeof *grown);
            if (grown == NULL)
                return PT_ERR_NOMEM;
            r->out = grown;
            r->out_cap = cap;
        }
        pt_reduced *kept = &r->out[r->n_out];
        kept->index = first_index + i;
        kept->start = s->start;
        kept->end = s->end;
        kept->self_ns = duration;
        kept->key = s->key;
        kept->depth = s->depth;
        r->open_index[r->open] = (int64_t)(first_index + i);
        r->open_value[r->open * r->values_per_entry] = (int64_t)r->n_out++;
        r->open++;
    }
    return PT_OK;
}

uint64_t
pt_reducer_take(pt_reducer *r, const pt_reduced **kept)
{
    *kept = r->out;
    uint64_t n = r->n_out;
    r->n_out = 0;           /* the caller reads them before the next feed */
    return n;
}

/* ---- the page's numbers of the kept calls ---- */

struct pt_reduced_text {
    int64_t previous_start;
    uint64_t previous_index;        /* of the last call taken, + 1 (0 before any) */
    uint64_t taken;
    int filter;
    int64_t min_ns;
    uint32_t top_levels;
    uint8_t *taken_at;              /* per depth: whether the latest call there is taken */
    uint64_t n_taken_at;
    uint64_t taken_at_cap;
};

pt_reduced_text *
pt_reduced_text_new(int64_t start_ns, int filter, int64_t min_ns, uint32_t top_levels)
{
    pt_reduced_text *text = calloc(1, sizeof *text);
    if (text == NULL)
        return NULL;
    text->previous_start = start_ns;
    text->filter = filter;
    text->min_ns = min_ns;
    text->top_levels = top_levels;
    return text;
}

void
pt_reduced_text_free(pt_reduced_text *text)
{
    if (text == NULL)
        return;
    free(text->taken_at);
    free(text);
}

uint64_t
pt_reduced_text_taken(const pt_reduced_text *text)
{
    return text->taken;
}

/* Decimal digits of value at out; how many. */
static int
pt_decimal(char *out, uint64_t value)
{
    char digits[20];
    int n = 0;
    do {
        digits[n++] = (char)('0' + value % 10);
        value /= 10;
    } while (value);
    for (int i = 0; i < n; i++)
        out[i] = digits[n - 1 - i];
    return n;
}

/* a - b in decimal, exact for any int64 pair (as Python's ints print it). */
static int
pt_difference(char *out, int64_t a, int64_t b)
{
    if (a >= b)
        return pt_decimal(out, (uint64_t)a - (uint64_t)b);
    out[0] = '-';
    return 1 + pt_decimal(out + 1, (uint64_t)b - (uint64_t)a);
}

int
pt_reduced_text_write(pt_reduced_text *text, const pt_reduced *kept, uint64_t count,
                      uint64_t *next, char *out, uint64_t cap, uint64_t *written)
{
    uint64_t at = *written;
    uint64_t i = *next;
    for (; i < count && cap - at >= PT_REDUCED_TEXT_MAX; i++) {
        const pt_reduced *call = &kept[i];
        if (text->filter) {
            /* as _reduced_text's Python did: whether its parent, the latest call
             * one level up, was taken (kept holds every kept call's parent) */
            int take = call->depth < text->top_levels;
            if (!take && call->end - call->start >= text->min_ns) {
                if (call->depth == 0)
                    take = 1;
                else if (call->depth - 1 < text->n_taken_at)
                    take = text->taken_at[call->depth - 1];
                else
                    return PT_ERR_ARG;      /* a kept call whose parent is not */
            }
            if (call->depth < text->n_taken_at)
                text->n_taken_at = call->depth;
            if (text->n_taken_at == text->taken_at_cap &&
                pt_grow((void **)&text->taken_at, &text->taken_at_cap, text->n_taken_at + 1,
                        1) != PT_OK)
                return PT_ERR_NOMEM;
            text->taken_at[text->n_taken_at++] = (uint8_t)take;
            if (!take)
                continue;
        }
        char *p = out + at;
        if (text->taken)
            *p++ = ',';
        p += pt_difference(p, call->start, text->previous_start);
        *p++ = ',';
        p += pt_difference(p, call->end, call->start);
        *p++ = ',';
        p += pt_decimal(p, call->key);
        *p++ = ',';
        p += pt_decimal(p, call->depth);
        *p++ = ',';
        /* calls left out since the last taken: index - (its index + 1) */
        p += pt_difference(p, (int64_t)(call->index - text->previous_index), 0);
        *p++ = ',';
        p += pt_difference(p, call->self_ns, 0);
        at = (uint64_t)(p - out);
        text->previous_start = call->start;
        text->previous_index = call->index + 1;
        text->taken++;
    }
    *next = i;
    *written = at;
    return PT_OK;
}

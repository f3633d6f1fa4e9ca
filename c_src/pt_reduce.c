/* pt_reduce.c - the calls a size-bounded view (the HTML page) keeps of a thread.
 *
 * A page that embeds millions of calls is neither small nor fast, and at full
 * zoom-out most of them are far under a pixel wide. The view keeps the calls that
 * last at least min_ns (a pixel at full zoom-out) and the whole top levels; as a
 * parent lasts at least as long as its callees and is shallower, the kept calls
 * are closed under "parent of", so they nest exactly as in the full trace.
 */
#include "pt_internal.h"

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

/* pt_summary.c - calls, total and self time per function over a thread's slices.
 *
 * The summary runs over every call of a trace, millions of them for the HTML page
 * and the summary command, so its per-call loop lives here rather than in Python.
 * Total time counts a function once however deep it recurses: a call made while
 * the same function is open adds to its calls and self time only.
 */
#include "pt_internal.h"

#include <stdlib.h>

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
        calls[name]++;
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

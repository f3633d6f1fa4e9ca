/* pt_summary.c - calls, total and self time per function over a thread's slices.
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
#include "pt_internal.h"

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

int
pt_summarizer_feed(pt_summarizer *s, const pt_slice *slices, uint64_t n, uint64_t first_index,
                   uint64_t *calls, int64_t *total_ns, int64_t *self_ns)
{
    for (uint64_t i = 0; i < n; i++) {
        const pt_slice *slice = &slices[i];
        if (slice->key >= s->n_keys || s->name_of_key[slice->key] >= s->n_names)
            return PT_ERR_ARG;
        while (s->open && s->open_index[s->open - 1] != slice->parent) {
            s->open--;
            s->times_open[s->open_name[s->open]]--;
        }
        if (slice->parent >= 0 && !s->open)
            return PT_ERR_ARG;
        uint32_t name = s->name_of_key[slice->key];
        int64_t duration = slice->end - slice->start;
        calls[name] += !(slice->flags & PT_SLICE_SEEDED);
        self_ns[name] += duration;
        if (s->open)
            self_ns[s->open_name[s->open - 1]] -= duration;
        if (!s->times_open[name])
            total_ns[name] += duration;
        if (s->open == s->open_cap) {
            uint64_t cap = s->open_cap ? 2 * s->open_cap : 64;
            int64_t *index = realloc(s->open_index, cap * sizeof *index);
            if (index == NULL)
                return PT_ERR_NOMEM;
            s->open_index = index;
            uint32_t *names = realloc(s->open_name, cap * sizeof *names);
            if (names == NULL)
                return PT_ERR_NOMEM;
            s->open_name = names;
            s->open_cap = cap;
        }
        s->open_index[s->open] = (int64_t)(first_index + i);
        s->open_name[s->open++] = name;
        s->times_open[name]++;
    }
    return PT_OK;
}

/* pt_replay.c - pairs each thread's calls and returns into slices with parent
 * links, in one pass over the chunks, without touching Python.
 *
 * A return closes the innermost open call with the same key; calls left open
 * above it (their return was never seen) close at the same instant. A return
 * with no open call of its key (a frame entered before tracing and deeper than
 * the seeded stack) is ignored. Calls still open at the end close at stop time.
 */
#include "pt_internal.h"

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

static int
pt_replay_push(pt_replay_state *st, const pt_event *ev)
{
    if (st->depth == st->stack_cap) {
        uint64_t cap = st->stack_cap ? st->stack_cap * 2 : 256;
        pt_open_call *stack = realloc(st->stack, cap * sizeof *stack);
        if (!stack)
            return PT_ERR_NOMEM;
        st->stack = stack;
        st->stack_cap = cap;
    }
    int seeded = ev->kind == PT_EV_PY_SEED;
    int is_c = ev->kind == PT_EV_C_CALL;
    int hidden_key = ev->key < st->n_hidden && st->hidden[ev->key];
    int64_t parent = st->depth ? st->stack[st->depth - 1].child_parent : -1;
    int64_t slice = -1;
    if (!hidden_key && !st->hiding) {
        if (st->n == st->cap)
            return PT_ERR_ARG;
        slice = (int64_t)st->n++;
        pt_slice *out = &st->out[slice];
        out->start = ev->ts;
        out->end = ev->ts;
        out->key = ev->key;
        out->flags = (is_c ? PT_SLICE_C : 0) | (seeded ? PT_SLICE_SEEDED : 0);
        out->parent = parent;
    }
    pt_open_call *call = &st->stack[st->depth++];
    call->slice = slice;
    call->child_parent = slice >= 0 ? slice : parent;
    call->key = ev->key;
    call->is_c = (uint8_t)is_c;
    call->hides_subtree = (uint8_t)(hidden_key && !seeded);
    if (call->hides_subtree)
        st->hiding++;
    return PT_OK;
}

static void
pt_replay_return(pt_replay_state *st, const pt_event *ev)
{
    uint8_t is_c = ev->kind == PT_EV_C_RETURN;
    uint64_t i = st->depth;
    while (i > 0) {
        const pt_open_call *call = &st->stack[i - 1];
        if (call->key == ev->key && call->is_c == is_c)
            break;
        i--;
    }
    if (i == 0)
        return;
    while (st->depth >= i)
        pt_replay_pop(st, ev->ts, 0);
}

static int
pt_replay_visit(void *ctx, const pt_event *events, uint64_t n)
{
    pt_replay_state *st = ctx;
    for (uint64_t i = 0; i < n; i++) {
        const pt_event *ev = &events[i];
        if (ev->kind == PT_EV_PY_RETURN || ev->kind == PT_EV_C_RETURN) {
            pt_replay_return(st, ev);
        } else {
            int rc = pt_replay_push(st, ev);
            if (rc != PT_OK)
                return rc;
        }
    }
    return PT_OK;
}

int
pt_thread_replay(pt_tracer *tracer, int index, const uint8_t *hidden,
                 uint32_t n_hidden, pt_slice *out, uint64_t cap, uint64_t *n_out)
{
    pt_replay_state st;
    memset(&st, 0, sizeof st);
    st.hidden = hidden;
    st.n_hidden = n_hidden;
    st.out = out;
    st.cap = cap;
    int rc = pt_thread_events_each(tracer, index, pt_replay_visit, &st);
    if (rc == PT_OK) {
        while (st.depth > 0)
            pt_replay_pop(&st, tracer->stop_ns, PT_SLICE_OPEN_AT_STOP);
        *n_out = st.n;
    } else if (rc == PT_ERR_NOMEM) {
        pt_set_error(tracer, rc, "out of memory during replay");
    } else if (rc == PT_ERR_ARG) {
        pt_set_error(tracer, rc, "slice buffer too small");
    }
    free(st.stack);
    return rc;
}

/* pt_clock.c - the event clock (the invariant TSC or CLOCK_MONOTONIC) and its
 * anchors: monotonic/TSC pairs for replay and realtime/monotonic pairs so traces
 * of different hosts can be aligned. */
#include "pt_record_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <errno.h>
#include <signal.h>
#include <time.h>

/* ======================================================================== */
/* Clock                                                                    */
/* ======================================================================== */


int
pt_tsc_supported(void)
{
    return PT_HAVE_TSC;
}

/* A simultaneous reading of the event clock and CLOCK_MONOTONIC: the tick
 * reading is the midpoint of two around the nanosecond one. */
void
pt_clock_pair(int use_tsc, int64_t *ticks, int64_t *ns)
{
    pt_tracer probe;
    probe.flags = use_tsc && PT_HAVE_TSC ? PT_FLAG_TSC : 0;
    int64_t before = pt_ticks(&probe);
    *ns = pt_clock();
    int64_t after = pt_ticks(&probe);
    *ticks = before + (after - before) / 2;
}

static int64_t
pt_timespec_ns(const struct timespec *t)
{
    return (int64_t)t->tv_sec * 1000000000 + t->tv_nsec;
}

#define PT_ANCHOR_PAIRS 7

/* Puts the trace on wall-clock time (torch.profiler's timeline) without
 * touching the event clock: each CLOCK_REALTIME reading sits between two
 * CLOCK_MONOTONIC ones; of PT_ANCHOR_PAIRS such pairs the one with the median
 * offset wins (a preemption inside one pair moves only that pair), and the
 * spread (range of the offsets, at least the winner's bracket) says how far
 * to trust it. */
void
pt_take_anchor(int64_t out[3])
{
    int64_t mono[PT_ANCHOR_PAIRS], offset[PT_ANCHOR_PAIRS], width[PT_ANCHOR_PAIRS];
    int64_t sorted[PT_ANCHOR_PAIRS];
    for (int i = 0; i < PT_ANCHOR_PAIRS; i++) {
        struct timespec before, real, after;
        clock_gettime(CLOCK_MONOTONIC, &before);
        clock_gettime(CLOCK_REALTIME, &real);
        clock_gettime(CLOCK_MONOTONIC, &after);
        int64_t b = pt_timespec_ns(&before), a = pt_timespec_ns(&after);
        mono[i] = b + (a - b) / 2;
        width[i] = a - b;
        offset[i] = pt_timespec_ns(&real) - mono[i];
        sorted[i] = offset[i];
    }
    for (int i = 1; i < PT_ANCHOR_PAIRS; i++)
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            int64_t t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    int64_t median = sorted[PT_ANCHOR_PAIRS / 2];
    int chosen = 0;
    while (offset[chosen] != median)
        chosen++;
    int64_t spread = sorted[PT_ANCHOR_PAIRS - 1] - sorted[0];
    out[0] = mono[chosen];
    out[1] = mono[chosen] + median;
    out[2] = spread > width[chosen] ? spread : width[chosen];
}

int
pt_realtime_anchor(pt_tracer *tracer, int at_stop, int64_t *monotonic_ns, int64_t *realtime_ns,
                   int64_t *spread_ns)
{
    if (tracer->state == PT_STATE_NEW || (at_stop && tracer->state != PT_STATE_STOPPED)) {
        pt_set_error(tracer, "no clock anchor before start (at start) or stop (at stop)");
        return PT_ERR_STATE;
    }
    const int64_t *anchor = tracer->anchor[at_stop ? 1 : 0];
    *monotonic_ns = anchor[0];
    *realtime_ns = anchor[1];
    *spread_ns = anchor[2];
    return PT_OK;
}

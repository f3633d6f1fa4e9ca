/* pt_signals.c - the SIGTERM relay followed children use (processes.py). */
#include "pt_internal.h"

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
/* SIGTERM relay (processes.py)                                             */
/* ======================================================================== */

/* A Python-level SIGTERM handler only notes the signal for the eval loop. If the
 * signal lands just before the main thread blocks in a C call that is not
 * interrupted later (multiprocessing's semaphore wait: the idle Pool worker that
 * Pool.terminate() signals), the handler never runs and the process never exits.
 * The relay runs Python's C handler, then re-sends SIGTERM every 200 ms: one of
 * those interrupts the wait and the Python handler runs (it ends the process). */
#ifdef __linux__
static void (*pt_python_sigterm)(int);
static timer_t pt_sigterm_timer;
static int pt_sigterm_timer_made;

static void
pt_sigterm_relay(int sig)
{
    int saved = errno;
    if (pt_python_sigterm)
        pt_python_sigterm(sig);
    if (pt_sigterm_timer_made) {
        struct itimerspec again = {{0, 200000000}, {0, 200000000}};
        timer_settime(pt_sigterm_timer, 0, &again, NULL);    /* async-signal-safe */
    }
    errno = saved;
}

/* Timers are not inherited by fork: the child makes its own. */
void
pt_sigterm_after_fork(void)
{
    pt_sigterm_timer_made = 0;
}
#else
void pt_sigterm_after_fork(void) {}
#endif

int
pt_sigterm_guard(int on)
{
#ifdef __linux__
    if (!on) {
        if (pt_sigterm_timer_made) {
            timer_delete(pt_sigterm_timer);
            pt_sigterm_timer_made = 0;
        }
        return PT_OK;
    }
    struct sigaction current;
    if (sigaction(SIGTERM, NULL, &current) != 0 || (current.sa_flags & SA_SIGINFO) ||
        current.sa_handler == SIG_DFL || current.sa_handler == SIG_IGN)
        return PT_ERR_STATE;
    if (!pt_sigterm_timer_made) {
        struct sigevent event;
        memset(&event, 0, sizeof event);
        event.sigev_notify = SIGEV_SIGNAL;
        event.sigev_signo = SIGTERM;
        if (timer_create(CLOCK_MONOTONIC, &event, &pt_sigterm_timer) != 0)
            return PT_ERR_STATE;
        pt_sigterm_timer_made = 1;
    }
    if (current.sa_handler != pt_sigterm_relay) {
        pt_python_sigterm = current.sa_handler;
        current.sa_handler = pt_sigterm_relay;
        if (sigaction(SIGTERM, &current, NULL) != 0)
            return PT_ERR_STATE;
    }
    return PT_OK;
#else
    (void)on;
    return PT_OK;
#endif
}

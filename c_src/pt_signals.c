/* pt_signals.c - the exit guards of follow/exits.py that must be C: the SIGTERM
 * relay and the audit hook that sees an exec or a launch coming. */
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
#include <unistd.h>

/* ======================================================================== */
/* SIGTERM relay (processes.py)                                             */
/* ======================================================================== */

/* A Python-level SIGTERM handler only notes the signal for the eval loop. If the
 * signal lands just before the main thread blocks in a C call that is not
 * interrupted later (multiprocessing's semaphore wait: the idle Pool worker that
 * Pool.terminate() signals), the handler never runs and the process never exits.
 * The relay runs Python's C handler, then re-sends SIGTERM every 200 ms: one of
 * those interrupts the wait and the Python handler runs (it ends the process).
 *
 * It serves only the process that armed it. A child forked with the handler
 * in place and not yet armed itself gets SIGTERM's default action, as it would
 * untraced (we only ever replace the default): on 3.9 a subprocess or a
 * multiprocessing "spawn" child runs in a fork()ed copy of its parent until
 * its exec, and a SIGTERM there (Pool.terminate() of a worker just started)
 * would only note the signal for a Python that the exec then replaces: the
 * signal was lost and the worker waited for ever. */
#ifdef __linux__
static void (*pt_python_sigterm)(int);
static timer_t pt_sigterm_timer;
static int pt_sigterm_timer_made;
static pid_t pt_sigterm_owner;
/* The relay's patience (pt_record.h): re-sends without the Python handler run,
 * and whether a save under way holds it off. Untraced, SIGTERM ends a process
 * stuck in C at once; traced, 2 s later: it is not saved (its events spilled so
 * far stay, for `run` to recover), and last_words say so. */
#define PT_SIGTERM_PATIENCE 10          /* re-sends, 200 ms apart */
static volatile sig_atomic_t pt_sigterm_unheard;
static volatile sig_atomic_t pt_sigterm_held;
static char pt_sigterm_words[1024];
static volatile sig_atomic_t pt_sigterm_words_len;

/* From the relay: sig's default action back, and sig sent again, delivered as
 * the relay returns (async-signal-safe). */
static void
pt_resend_as_default(int sig)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    sigaction(sig, &action, NULL);
    kill(getpid(), sig);
}

void
pt_sigterm_say_last_words(void)
{
    if (pt_sigterm_words_len > 0) {
        ssize_t put = write(STDERR_FILENO, pt_sigterm_words, (size_t)pt_sigterm_words_len);
        (void)put;
    }
}

static void
pt_sigterm_give_up(int sig)
{
    pt_sigterm_say_last_words();
    pt_resend_as_default(sig);
}

static void
pt_sigterm_relay(int sig)
{
    int saved = errno;
    if (getpid() != pt_sigterm_owner) {
        pt_resend_as_default(sig);
        errno = saved;
        return;
    }
    if (pt_python_sigterm)
        pt_python_sigterm(sig);
    pt_flight_on_sigterm();     /* the flight recorder's thread serves it too */
    if (pt_sigterm_timer_made) {
        if (!pt_sigterm_held && ++pt_sigterm_unheard > PT_SIGTERM_PATIENCE) {
            pt_sigterm_give_up(sig);
            errno = saved;
            return;
        }
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
    pt_sigterm_unheard = 0;
    pt_sigterm_held = 0;
}

int
pt_sigterm_last_words(const char *last_words, size_t n)
{
    if (n >= sizeof pt_sigterm_words)
        return PT_ERR_ARG;
    pt_sigterm_words_len = 0;       /* (the relay may run meanwhile) */
    memcpy(pt_sigterm_words, last_words, n);
    pt_sigterm_words_len = (sig_atomic_t)n;
    return PT_OK;
}

void
pt_sigterm_heard(void)
{
    pt_sigterm_unheard = 0;
}

void
pt_sigterm_hold(int on)
{
    pt_sigterm_held = on;
    pt_sigterm_unheard = 0;
}
#else
void pt_sigterm_after_fork(void) {}
int pt_sigterm_last_words(const char *last_words, size_t n) { (void)last_words; (void)n; return PT_OK; }
void pt_sigterm_heard(void) {}
void pt_sigterm_hold(int on) { (void)on; }
void pt_sigterm_say_last_words(void) {}
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
    pt_sigterm_owner = getpid();
    pt_sigterm_unheard = 0;
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

/* The process dies of sig as it would have without a handler, from any thread
 * (Python's signal.signal is the main thread's only): its default action back,
 * unblocked here, sent to the process. */
int
pt_die_of_signal(int sig)
{
    struct sigaction action;
    memset(&action, 0, sizeof action);
    action.sa_handler = SIG_DFL;
    sigemptyset(&action.sa_mask);
    if (sigaction(sig, &action, NULL) != 0)
        return PT_ERR_STATE;
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, sig);
    pthread_sigmask(SIG_UNBLOCK, &mask, NULL);
    kill(getpid(), sig);
    return PT_OK;
}

/* ======================================================================== */
/* The audit hook (follow/exits.py)                                         */
/* ======================================================================== */

/* A Python audit hook runs Python code for every audit event of the process,
 * "sys.setprofile" included. On CPython 3.10 and 3.11, _PyEval_SetProfile holds a
 * process-wide "being installed" flag while that event's hooks run; Python code
 * there lets other threads run, and a thread that sets its profile function then
 * (threading's new-thread hook does, in Thread._bootstrap_inner) fails with
 * "Cannot install a profile function while another profile function is being
 * installed" and dies before running its target. So our hook is a C one: it
 * calls the Python callable only for the few events that launch or replace a
 * program, and sys.excepthook (an uncaught exception), none of which a profile
 * setting raises. Installed once per process
 * (audit hooks cannot be removed); the callable gets (event, args) and must not
 * raise (an exception is reported as unraisable, the audited call goes on). */
static PyObject *pt_audit_callable;
static const char *const pt_audited_events[] = {
    "os.exec", "subprocess.Popen", "os.posix_spawn", "os.spawn", NULL};

static int
pt_audit_hook(const char *event, PyObject *args, void *data)
{
    (void)data;
    if (pt_audit_callable == NULL)
        return 0;
    if (event[0] == 's' && event[1] == 'y') {  /* sys.*: the common case, decided at once */
        if (strcmp(event, "sys.excepthook") != 0)
            return 0;
        /* an uncaught exception, before the program's hook: the flight recorder dumps */
        PyObject *result = PyObject_CallFunction(pt_audit_callable, "sO", event, args);
        if (result == NULL)
            PyErr_WriteUnraisable(pt_audit_callable);
        Py_XDECREF(result);
        return 0;
    }
    for (int i = 0; pt_audited_events[i]; i++) {
        if (strcmp(event, pt_audited_events[i]) == 0) {
            PyObject *result = PyObject_CallFunction(pt_audit_callable, "sO", event, args);
            if (result == NULL)
                PyErr_WriteUnraisable(pt_audit_callable);
            Py_XDECREF(result);
            return 0;
        }
    }
    return 0;
}

int
pt_audit_guard(void *py_callable)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    int rc = PT_OK;
    PyObject *callable = (PyObject *)py_callable;
    if (pt_audit_callable == NULL) {
        if (PySys_AddAuditHook(pt_audit_hook, NULL) < 0) {
            PyErr_Clear();              /* another audit hook refused ours */
            rc = PT_ERR_STATE;
        }
    }
    if (rc == PT_OK) {
        PyObject *old = pt_audit_callable;
        Py_INCREF(callable);
        pt_audit_callable = callable;
        Py_XDECREF(old);
    }
    PyGILState_Release(gil);
    return rc;
}

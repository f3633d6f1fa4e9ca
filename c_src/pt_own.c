/* pt_own.c - pytrace_cffi's own threads, which no trace ever records.
 *
 * run's windows are opened and closed by timer threads of ours (--delay,
 * --duration). Those threads exist while a window records, so without this they
 * would be seeded at start, followed by the profile hook, or met by sys.monitoring,
 * and show as lanes of the program's trace. A thread of ours says so first thing
 * (pt_own_thread_begin); pt_start and pt_attach_current_thread then leave it
 * alone, and the hooks' cold thread lookup caches "no buffer" for it, which the
 * hot path already treats as nothing to record. Keyed by the thread state's
 * unique id (never reused), changed and read under the GIL only.
 *
 * Every thread of ours, Python's and the C ones (the .pftrace encoder, the flight
 * recorder's), also carries the OS name PT_OWN_OS_NAME: 3.12+ warns at os.fork()
 * when the process has more than one OS thread, and _own_threads.py keeps that
 * warning from a program that has one thread but for ours.
 */
#include "pt_record_internal.h"

#include <pthread.h>
#include <signal.h>

#if defined(__linux__)
#include <sys/prctl.h>
#endif

#define PT_OWN_MAX 16

static uint64_t pt_own_tstates[PT_OWN_MAX];     /* 0: a free slot */

int
pt_is_own_tstate(uint64_t tstate_id)
{
    for (int i = 0; i < PT_OWN_MAX; i++)
        if (pt_own_tstates[i] == tstate_id && tstate_id)
            return 1;
    return 0;
}

/* A C thread of ours, born with every signal blocked: the program's signals go to
 * its own threads, as untraced (blocking them first thing would be too late:
 * until it runs, a busy machine may hand it one the program's threads block).
 * 0 when it started, as pthread_create. */
int
pt_own_thread_create(pthread_t *thread, void *(*main)(void *), void *arg)
{
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &before);
    int rc = pthread_create(thread, NULL, main, arg);
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    return rc;
}

void
pt_own_os_thread_name(void)
{
#if defined(__linux__)
    prctl(PR_SET_NAME, PT_OWN_OS_NAME, 0, 0, 0);
#endif
}

int
pt_own_thread_begin(void)
{
    pt_own_os_thread_name();
    PyGILState_STATE gil = PyGILState_Ensure();
    uint64_t id = PyThreadState_GetID(PyThreadState_Get());
    int rc = PT_ERR_NOMEM;
    if (pt_is_own_tstate(id)) {
        rc = PT_OK;
    } else {
        for (int i = 0; i < PT_OWN_MAX; i++)
            if (!pt_own_tstates[i]) {
                pt_own_tstates[i] = id;
                rc = PT_OK;
                break;
            }
    }
    PyGILState_Release(gil);
    return rc;
}

void
pt_own_thread_end(void)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    uint64_t id = PyThreadState_GetID(PyThreadState_Get());
    for (int i = 0; i < PT_OWN_MAX; i++)
        if (pt_own_tstates[i] == id)
            pt_own_tstates[i] = 0;
    PyGILState_Release(gil);
}

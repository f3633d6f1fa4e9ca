/* pt_flight.c - the flight recorder's dumps: the ring (max_events without a
 * spill file) of every thread written to a directory while the program goes on.
 *
 * A dump is written by a clone of the process (raw clone(2) without SIGCHLD: the
 * program's wait() and SIGCHLD handler never see it; __WCLONE reaps it). The
 * clone holds the ring as it was at that instant, whatever the program's threads
 * do next, so the program pays for the clone only, never for the writing; and a
 * clone that crashes on a half-linked chunk loses its dump, never the program.
 * The clone writes dump.json, copies process.json and journal.json from the
 * journal directory (the names the recorder's thread wrote, flight/recorder.py),
 * writes threads.json (each thread's index, ident and OS id), then the ring's
 * files (pt_flight_files.c: stacks.tsv, the open calls; keys.jsonl and
 * key_sources.tsv, the names of the keys written; last events.bin, compressed):
 * on a disk that fills, the stacks outlive the big ring; then lines.tsv, the
 * line each frame is on (pt_flight_lines.c), by a clone of the clone: its crash
 * loses that file alone; done.json last. The directory is then a
 * process directory that
 * follow/recover.py reads. The clone calls no malloc and takes no lock: another
 * thread of the program may have held one at the clone.
 *
 * A C thread (pt_flight_arm) serves the triggers that Python may be unable to
 * serve: a signal (its handler only posts a semaphore), a request file (`dump`
 * writes it, pt_flight_watch_requests: looked for at each wake, every 250 ms
 * at most, so that a request reaches this thread alone, never interrupting a
 * call of the program as a signal does) and a watchdog (no
 * pt_flight_step for watchdog_ns, once a first step came: start-up is no stall). It asks Python first, by a semaphore (a
 * Python thread of the recorder waits on it and dumps with names and stacks), and
 * when Python has not claimed the request within grace_ns (a thread stuck in C
 * holding the GIL), dumps itself, without the GIL. A request is claimed once,
 * by Python or by this thread (pt_flight_claim).
 */
#define _GNU_SOURCE
#include "pt_record_internal.h"
#include "pt_flight_files.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PT_FLIGHT_PATH 4096
#define PT_SIGTERM_GRACE_NS (500 * 1000 * 1000)  /* Python's time to claim a SIGTERM */
#define PT_FLIGHT_CHILDREN 16

/* ------------------------------------------------------------------------ */
/* Writing, in the clone: syscalls only (pt_flight_put, pt_flight_files.h)    */
/* ------------------------------------------------------------------------ */

/* dir + "/" + name into out (PT_FLIGHT_PATH bytes); 0 when too long. */
static int
pt_join(char *out, const char *dir, const char *name)
{
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b + 1 > PT_FLIGHT_PATH)
        return 0;
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return 1;
}

/* Decimal digits of v (negative with a sign) at the end of buf; returns the start. */
static char *
pt_decimal(char *end, int64_t value)
{
    uint64_t v = value < 0 ? (uint64_t)0 - (uint64_t)value : (uint64_t)value;
    char *p = end;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (value < 0)
        *--p = '-';
    return p;
}

static int
pt_write_text(int fd, const char *text)
{
    return pt_flight_put(fd, text, strlen(text));
}

/* threads.json: [{"index": i, "ident": n, "native_id": n, "dropped": n}, ...] */
static int
pt_write_threads(pt_tracer *tracer, const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return 0;
    int ok = pt_write_text(fd, "[");
    for (pt_thread *t = tracer->threads; ok && t; t = t->next) {
        ok = pt_write_text(fd, t == tracer->threads ? "{\"index\": " : ", {\"index\": ") &&
             pt_flight_put_number(fd, t->index) && pt_write_text(fd, ", \"ident\": ") &&
             pt_flight_put_number(fd, (int64_t)t->ident) &&
             pt_write_text(fd, ", \"native_id\": ") &&
             pt_flight_put_number(fd, (int64_t)t->native_id) &&
             pt_write_text(fd, ", \"dropped\": ") && pt_flight_put_number(fd, (int64_t)t->dropped) &&
             pt_write_text(fd, "}");
    }
    ok = ok && pt_write_text(fd, "]\n");
    return close(fd) == 0 && ok;
}

static int
pt_copy_named(const char *from_dir, const char *to_dir, const char *name)
{
    char from[PT_FLIGHT_PATH], to[PT_FLIGHT_PATH], buf[65536];
    if (!pt_join(from, from_dir, name) || !pt_join(to, to_dir, name))
        return 0;
    int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return errno == ENOENT;     /* nothing named yet */
    int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = out >= 0;
    while (ok) {
        ssize_t n = read(in, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            ok = n == 0;
            break;
        }
        ok = pt_flight_put(out, buf, (size_t)n);
    }
    close(in);
    return (out < 0 || close(out) == 0) && ok;
}

static int
pt_write_file(const char *dir, const char *name, const char *text)
{
    char path[PT_FLIGHT_PATH];
    if (!pt_join(path, dir, name))
        return 0;
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return 0;
    int ok = pt_write_text(fd, text);
    return close(fd) == 0 && ok;
}

/* lines.tsv (pt_flight_lines.c), written by a clone of the clone: it reads the
 * interpreter's frames, which a thread may have been changing at the clone; a
 * crash there loses lines.tsv alone, never done.json. Waited for, so that a
 * reader of a whole dump finds lines.tsv when there is one. */
static void
pt_write_lines_apart(pt_tracer *tracer, const char *dir)
{
    long pid = syscall(SYS_clone, 0L, NULL, NULL, NULL, 0L);
    if (pid == 0)
        syscall(SYS_exit_group, pt_flight_write_lines(tracer, dir) ? 0 : 1);
    while (pid > 0 && waitpid((pid_t)pid, NULL, __WCLONE) < 0 && errno == EINTR)
        ;
}

/* Everything the clone writes into dir: the small files first (on a disk that
 * fills, the stacks of dump.json outlive the big ring), then lines.tsv (left
 * out when it fails), done.json last: the dump is whole. Returns 0, or the
 * errno of the first failure. */
static int
pt_write_dump(pt_tracer *tracer, const char *dir, const char *journal_dir,
              const char *dump_json, int64_t until_ticks)
{
    char path[PT_FLIGHT_PATH];
    errno = 0;
    int ok = (!dump_json || pt_write_file(dir, "dump.json", dump_json)) &&
             pt_copy_named(journal_dir, dir, "process.json") &&
             pt_copy_named(journal_dir, dir, "journal.json") &&
             pt_join(path, dir, "threads.json") && pt_write_threads(tracer, path) &&
             pt_flight_write_ring(tracer, dir, journal_dir, until_ticks);
    if (ok)
        pt_write_lines_apart(tracer, dir);
    ok = ok && pt_write_file(dir, "done.json", "{\"whole\": true}\n");
    return ok ? 0 : errno > 0 && errno < 256 ? errno : EIO;
}

/* ------------------------------------------------------------------------ */
/* The clone                                                                */
/* ------------------------------------------------------------------------ */

static pid_t pt_children[PT_FLIGHT_CHILDREN];
static pthread_mutex_t pt_children_lock = PTHREAD_MUTEX_INITIALIZER;
/* The clones reaped last, with their exit codes (0, or an errno: pt_write_dump),
 * for pt_flight_status: a dump that failed is said so. */
#define PT_FLIGHT_ENDED 64
static struct { pid_t pid; int code; } pt_ended[PT_FLIGHT_ENDED];
static int pt_ended_next;

/* Reaps the dump clones that have ended. Returns how many still run. */
int
pt_flight_reap(void)
{
    int running = 0;
    pthread_mutex_lock(&pt_children_lock);
    for (int i = 0; i < PT_FLIGHT_CHILDREN; i++) {
        if (!pt_children[i])
            continue;
        int status = 0;
        pid_t done = waitpid(pt_children[i], &status, WNOHANG | __WCLONE);
        if (done == pt_children[i] || (done < 0 && errno == ECHILD)) {
            pt_ended[pt_ended_next].pid = pt_children[i];
            pt_ended[pt_ended_next].code = done < 0 ? -2 : WIFEXITED(status)
                ? WEXITSTATUS(status) : -3;       /* -3: killed, -2: not known */
            pt_ended_next = (pt_ended_next + 1) % PT_FLIGHT_ENDED;
            pt_children[i] = 0;
        }
        else
            running++;
    }
    pthread_mutex_unlock(&pt_children_lock);
    return running;
}

static int
pt_note_child(pid_t pid)
{
    pthread_mutex_lock(&pt_children_lock);
    for (int i = 0; i < PT_FLIGHT_CHILDREN; i++)
        if (!pt_children[i]) {
            pt_children[i] = pid;
            pthread_mutex_unlock(&pt_children_lock);
            return 1;
        }
    pthread_mutex_unlock(&pt_children_lock);
    return 0;
}

/* Writes the dump of tracer's ring into dir (made already), from a clone of the
 * process. Returns the clone's pid, or PT_ERR_STATE when 16 dumps are still being
 * written, or a negative errno when no clone could be made. Safe without the GIL
 * (the clone reads its own copy). */
int
pt_flight_dump(pt_tracer *tracer, const char *dir, const char *journal_dir,
               const char *dump_json, int64_t until_ticks)
{
    if (pt_flight_reap() >= PT_FLIGHT_CHILDREN)
        return PT_ERR_STATE;
    if (strlen(dir) + 32 > PT_FLIGHT_PATH || strlen(journal_dir) + 32 > PT_FLIGHT_PATH)
        return -ENAMETOOLONG;
    /* No SIGCHLD at its end; a copy of the address space, as fork() makes. */
    long pid = syscall(SYS_clone, 0L, NULL, NULL, NULL, 0L);
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        /* The clone: the program's output is not ours to write to. */
        int null = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (null >= 0) {
            dup2(null, 0);
            dup2(null, 1);
            dup2(null, 2);
        }
        signal(SIGINT, SIG_IGN);    /* a Ctrl-C meant for the program */
        syscall(SYS_exit_group, pt_write_dump(tracer, dir, journal_dir, dump_json,
                                                   until_ticks));
        for (;;)
            ;
    }
    if (!pt_note_child((pid_t)pid))
        waitpid((pid_t)pid, NULL, __WCLONE);    /* (cannot happen: reaped above) */
    return (int)pid;
}

int
pt_flight_frames(pt_tracer *tracer, void *py_frames, void *py_out, int64_t *ticks)
{
    PyGILState_STATE gil = PyGILState_Ensure();
    /* (sys._current_frames runs no Python code: no other thread runs until the
     * GIL is released below) */
    PyObject *frames = PyObject_CallObject((PyObject *)py_frames, NULL);
    *ticks = pt_ticks(tracer);
    int ok = frames != NULL && PyList_Append((PyObject *)py_out, frames) == 0;
    Py_XDECREF(frames);
    if (!ok)
        PyErr_Clear();
    PyGILState_Release(gil);
    return ok ? PT_OK : PT_ERR_STATE;
}

/* The dump clone pid's end: -1 while it runs, 0 when it wrote its dump whole,
 * an errno when writing failed, -3 when it was killed, -2 when not known. */
int
pt_flight_status(int pid)
{
    pt_flight_reap();
    int code = -2;
    pthread_mutex_lock(&pt_children_lock);
    for (int i = 0; i < PT_FLIGHT_CHILDREN; i++)
        if (pt_children[i] == pid)
            code = -1;
    for (int i = 0; i < PT_FLIGHT_ENDED && code == -2; i++)
        if (pt_ended[i].pid == pid)
            code = pt_ended[i].code;
    pthread_mutex_unlock(&pt_children_lock);
    return code;
}

/* Waits up to timeout_ns for the dump clones to end; returns how many still run. */
int
pt_flight_wait(int64_t timeout_ns)
{
    int64_t waited = 0;
    int running;
    while ((running = pt_flight_reap()) && waited < timeout_ns) {
        struct timespec pause = {0, 5 * 1000 * 1000};
        nanosleep(&pause, NULL);
        waited += 5 * 1000 * 1000;
    }
    return running;
}

/* ------------------------------------------------------------------------ */
/* The C thread: signal, watchdog, and the dump Python could not make       */
/* ------------------------------------------------------------------------ */

typedef struct {
    pt_tracer *tracer;
    int signum;
    int64_t watchdog_ns;
    int64_t grace_ns;
    char dumps_dir[PT_FLIGHT_PATH];
    char journal_dir[PT_FLIGHT_PATH];
    char dump_json[1024];
    int pid;
} pt_flight_config;

static pt_flight_config pt_flight;
static sem_t pt_flight_wake;
/* The recorder's Python thread waits on this one (pt_flight_wait_python): made
 * once, never destroyed (that thread may wait on it across a disarm). */
static sem_t pt_flight_python;
static pthread_once_t pt_flight_python_once = PTHREAD_ONCE_INIT;

static void
pt_flight_python_init(void)
{
    sem_init(&pt_flight_python, 0, 0);
}

void
pt_flight_wake_python(void)
{
    pthread_once(&pt_flight_python_once, pt_flight_python_init);
    sem_post(&pt_flight_python);
}

/* Called through cffi, which lets the GIL go meanwhile. */
int
pt_flight_wait_python(int64_t timeout_ns)
{
    pthread_once(&pt_flight_python_once, pt_flight_python_init);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + (timeout_ns > 0 ? timeout_ns : 0);
    until.tv_sec += ns / 1000000000;
    until.tv_nsec = ns % 1000000000;
    while (sem_timedwait(&pt_flight_python, &until) != 0)
        if (errno != EINTR)
            return 0;
    while (sem_trywait(&pt_flight_python) == 0)
        ;                   /* (several wakes at once: one look serves them all) */
    return 1;
}
static pthread_t pt_flight_thread;
static int pt_flight_armed;
static atomic_int pt_flight_quit;
static atomic_int pt_flight_signalled;
static atomic_llong pt_flight_last_step;     /* CLOCK_MONOTONIC ns */
static atomic_int pt_flight_stall_dumped;
static atomic_ullong pt_flight_requested;     /* requests made (their numbers) */
static atomic_ullong pt_flight_claimed;       /* the newest request claimed */
static atomic_int pt_flight_reasons[64];      /* request number % 64 -> PT_FLIGHT_* */
static atomic_ullong pt_flight_c_dumps;       /* dumps this thread wrote */
static atomic_int pt_flight_sigterm_watch;    /* SIGTERM's relay tells this thread */
static atomic_int pt_flight_sigterm_pending;
static atomic_int pt_flight_sigterm_served;   /* once: the relay re-sends it */
static struct sigaction pt_flight_previous;
static char pt_flight_request_path[PT_FLIGHT_PATH];  /* "": no request file */
#define PT_FLIGHT_NAME 128
static char pt_flight_names[64][PT_FLIGHT_NAME];     /* request number % 64 -> its name */

static int64_t
pt_monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void
pt_flight_on_signal(int signum)
{
    (void)signum;
    int saved = errno;
    atomic_store(&pt_flight_signalled, 1);
    sem_post(&pt_flight_wake);
    errno = saved;
}

/* SIGTERM came (pt_signals.c's relay, after Python's C handler): the main thread
 * may be unable to run the Python handler (waiting in C with the GIL released),
 * so this thread asks the recorder's Python thread too, once (PT_FLIGHT_SIGTERM).
 * Async-signal-safe. */
void
pt_flight_on_sigterm(void)
{
    if (!atomic_load(&pt_flight_sigterm_watch))
        return;
    int saved = errno;
    atomic_store(&pt_flight_sigterm_pending, 1);
    sem_post(&pt_flight_wake);
    errno = saved;
}

/* on: SIGTERM's relay tells this thread (while armed); off: no more. */
void
pt_flight_watch_sigterm(int on)
{
    atomic_store(&pt_flight_sigterm_watch, on && pt_flight_armed);
}

/* Progress Python counts without a call (a call would show in the trace): the
 * ends of torch's record_function regions the watchdog names, seen by the C
 * thread at its next wake (a quarter of the watchdog's time at most). */
static int64_t pt_flight_progress;

int64_t *
pt_flight_progress_cell(void)
{
    return &pt_flight_progress;
}

void
pt_flight_step(void)
{
    atomic_store(&pt_flight_last_step, pt_monotonic_ns());
    atomic_store(&pt_flight_stall_dumped, 0);
}

/* Python's claim of request number seq (or this thread's): 1 when it is the
 * claimer's to serve, 0 when served already (or superseded by a newer one). */
int
pt_flight_claim(uint64_t seq)
{
    unsigned long long seen = atomic_load(&pt_flight_claimed);
    while (seen < seq)
        if (atomic_compare_exchange_weak(&pt_flight_claimed, &seen, seq))
            return 1;
    return 0;
}

uint64_t
pt_flight_request(void)
{
    return atomic_load(&pt_flight_requested);
}

int
pt_flight_reason(uint64_t seq)
{
    return atomic_load(&pt_flight_reasons[seq % 64]);
}

uint64_t
pt_flight_c_dump_count(void)
{
    return atomic_load(&pt_flight_c_dumps);
}

/* Asks for a dump as the signal does (for tests and `dump` of this process). */
void
pt_flight_ask(void)
{
    pt_flight_on_signal(0);
}

/* The request file's dump directory name into name (PT_FLIGHT_NAME bytes; ""
 * when it names none that is safe: letters, digits, '-' and '.', not first),
 * the file removed: 1 when there was one. */
static int
pt_flight_take_request(char *name)
{
    name[0] = 0;
    if (!pt_flight_request_path[0])
        return 0;
    int fd = open(pt_flight_request_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, name, PT_FLIGHT_NAME - 1);
    close(fd);
    unlink(pt_flight_request_path);
    while (n > 0 && (name[n - 1] == '\n' || name[n - 1] == ' '))
        n--;
    int ok = n > 0 && name[0] != '.' && name[0] != '-';
    for (ssize_t i = 0; ok && i < n; i++) {
        char c = name[i];
        ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             c == '-' || c == '.';
    }
    name[ok ? n : 0] = 0;
    return 1;
}

/* The request file this process's C thread looks for (before pt_flight_arm; ""
 * or NULL: none): a stale one is removed. PT_ERR_ARG when too long. */
int
pt_flight_watch_requests(const char *path)
{
    if (path && strlen(path) >= sizeof pt_flight_request_path)
        return PT_ERR_ARG;
    strcpy(pt_flight_request_path, path ? path : "");
    if (pt_flight_request_path[0])
        unlink(pt_flight_request_path);
    return PT_OK;
}

/* The dump directory name request number seq asked for ("": none). */
const char *
pt_flight_request_name(uint64_t seq)
{
    return pt_flight_names[seq % 64];
}

/* dumps_dir/<UTC yyyymmdd-hhmmss>-<why>-c/proc-<pid> into out, or
 * dumps_dir/<name>/proc-<pid> when a request named the dump directory. */
static int
pt_c_dump_dir(char *out, const char *why, const char *requested)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t days = now.tv_sec / 86400, secs = now.tv_sec % 86400;
    /* civil_from_days (H. Hinnant): the date of a day count since 1970-01-01 */
    int64_t z = days + 719468, era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    int64_t d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
    int64_t y = yoe + era * 400 + (m <= 2);
    int64_t parts[6] = {y, m, d, secs / 3600, secs / 60 % 60, secs % 60};
    char stamp[32];
    char *p = stamp;
    for (int i = 0; i < 6; i++) {
        int width = i == 0 ? 4 : 2;
        int64_t v = parts[i];
        for (int k = width - 1; k >= 0; k--) {
            p[k] = (char)('0' + v % 10);
            v /= 10;
        }
        p += width;
        if (i == 2)
            *p++ = '-';
    }
    *p = 0;
    char name[128], digits[24];
    char *pid = pt_decimal(digits + sizeof digits - 1, pt_flight.pid);
    digits[sizeof digits - 1] = 0;
    size_t n = 0;
    const char *pieces[] = {stamp, "-", why, "-c"};
    for (size_t i = 0; i < 4; i++) {
        size_t len = strlen(pieces[i]);
        memcpy(name + n, pieces[i], len);
        n += len;
    }
    name[n] = 0;
    char job[PT_FLIGHT_PATH];
    if (!pt_join(job, pt_flight.dumps_dir, requested && requested[0] ? requested : name))
        return 0;
    if (mkdir(job, 0755) != 0 && errno != EEXIST)
        return 0;
    char proc[40] = "proc-";
    memcpy(proc + 5, pid, strlen(pid) + 1);
    if (!pt_join(out, job, proc))
        return 0;
    return mkdir(out, 0755) == 0 || errno == EEXIST;
}

/* dump.json of a dump this thread writes: the recorder's text (pt_flight_arm)
 * with the trigger and the moment of the dump, which the report measures how
 * long each call has been running against (the ring's last event can be long
 * before: a thread stuck in C records nothing). */
static void
pt_c_dump_json(char *out, size_t size, const char *why)
{
    struct timespec real;
    clock_gettime(CLOCK_REALTIME, &real);
    int64_t monotonic = pt_monotonic_ns();
    size_t n = strlen(pt_flight.dump_json);
    while (n && pt_flight.dump_json[n - 1] != '}')     /* its object's closing brace */
        n--;
    if (!n) {
        out[0] = 0;
        return;
    }
    memcpy(out, pt_flight.dump_json, n - 1);
    char tail[128], digits[2][24];
    char *realtime = pt_decimal(digits[0] + 23, (int64_t)real.tv_sec * 1000000000 + real.tv_nsec);
    char *mono = pt_decimal(digits[1] + 23, monotonic);
    digits[0][23] = digits[1][23] = 0;
    snprintf(tail, sizeof tail, ", \"trigger\": \"%s\", \"realtime_ns\": %s, "
             "\"monotonic_ns\": %s}\n", why, realtime, mono);
    if (n - 1 + strlen(tail) + 1 > size) {
        out[0] = 0;
        return;
    }
    memcpy(out + n - 1, tail, strlen(tail) + 1);
}

/* One line on stderr per dump this thread writes, as Python's dumps have (after
 * the clone ended: whether done.json, its last file, is there). */
static void
pt_say_c_dump(const char *dir, int clone, const char *why)
{
    for (int waited = 0; clone > 0 && waited < 6000; waited++) {    /* 60 s at most */
        int running = 0;
        pt_flight_reap();
        pthread_mutex_lock(&pt_children_lock);
        for (int i = 0; i < PT_FLIGHT_CHILDREN; i++)
            running |= pt_children[i] == clone;
        pthread_mutex_unlock(&pt_children_lock);
        if (!running)
            break;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    char done[PT_FLIGHT_PATH];
    int whole = clone > 0 && pt_join(done, dir, "done.json") && access(done, F_OK) == 0;
    char line[PT_FLIGHT_PATH + 200];
    int n = whole ? snprintf(line, sizeof line, "pytrace_cffi: flight recorder dump (%s; "
                             "Python did not answer: written by C) -> %s\n", why, dir)
                  : snprintf(line, sizeof line, "pytrace_cffi: the flight recorder's dump "
                             "(%s; Python did not answer) could not be written whole: %s\n",
                             why, dir);
    if (n > 0)
        pt_flight_put(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static const char *
pt_flight_why(int reason)
{
    return reason == PT_FLIGHT_WATCHDOG ? "watchdog" :
           reason == PT_FLIGHT_REQUEST ? "request" :
           reason == PT_FLIGHT_SIGTERM ? "sigterm" : "signal";
}

static void
pt_flight_serve(int reason, const char *name)
{
    /* (only this thread makes requests: the slot is written before its number) */
    uint64_t seq = atomic_load(&pt_flight_requested) + 1;
    snprintf(pt_flight_names[seq % 64], PT_FLIGHT_NAME, "%s", name ? name : "");
    atomic_store(&pt_flight_reasons[seq % 64], reason);
    atomic_store(&pt_flight_requested, seq);
    pt_flight_wake_python();
    /* SIGTERM kills at once untraced: Python's thread, when it can run at all,
     * claims it at once (then gives the main thread its 0.25 s). */
    int64_t grace = reason == PT_FLIGHT_SIGTERM && pt_flight.grace_ns > PT_SIGTERM_GRACE_NS
                    ? PT_SIGTERM_GRACE_NS : pt_flight.grace_ns;
    int64_t until = pt_monotonic_ns() + grace;
    while (atomic_load(&pt_flight_claimed) < seq && pt_monotonic_ns() < until &&
           !atomic_load(&pt_flight_quit)) {
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL);
    }
    if (atomic_load(&pt_flight_quit) || !pt_flight_claim(seq))
        return;             /* Python serves it (or we are stopping) */
    char dir[PT_FLIGHT_PATH];
    const char *why = pt_flight_why(reason);
    if (!pt_c_dump_dir(dir, why, pt_flight_names[seq % 64]))
        return;
    static char dump_json[sizeof pt_flight.dump_json + 128];
    pt_c_dump_json(dump_json, sizeof dump_json, why);
    int clone = pt_flight_dump(pt_flight.tracer, dir, pt_flight.journal_dir, dump_json, 0);
    if (clone > 0)
        atomic_fetch_add(&pt_flight_c_dumps, 1);
    pt_say_c_dump(dir, clone, why);
    /* A thread holds the GIL in C (a deadlock holding it never ends): untraced,
     * SIGTERM would have killed the process at once; only the recorder's handler
     * (it dumps, then dies of it) keeps it alive. Its dump written (or failed:
     * said above), the process dies of SIGTERM now, as it would have; its own
     * trace is not saved (the dump holds its ring). */
    if (reason == PT_FLIGHT_SIGTERM) {
        pt_sigterm_say_last_words();    /* what is not written, and where the rest is */
        pt_die_of_signal(SIGTERM);
    }
}

static void *
pt_flight_main(void *unused)
{
    (void)unused;
    pt_own_os_thread_name();    /* (born with the program's signals blocked) */
    int64_t period = 250 * 1000 * 1000;
    if (pt_flight.watchdog_ns && pt_flight.watchdog_ns / 4 < period)
        period = pt_flight.watchdog_ns / 4 > 10 * 1000 * 1000 ? pt_flight.watchdog_ns / 4
                                                               : 10 * 1000 * 1000;
    int64_t seen_progress = __atomic_load_n(&pt_flight_progress, __ATOMIC_RELAXED);
    while (!atomic_load(&pt_flight_quit)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        int64_t ns = until.tv_nsec + period;
        until.tv_sec += ns / 1000000000;
        until.tv_nsec = ns % 1000000000;
        sem_timedwait(&pt_flight_wake, &until);
        if (atomic_load(&pt_flight_quit))
            break;
        pt_flight_reap();
        if (atomic_exchange(&pt_flight_signalled, 0)) {
            pt_flight_serve(PT_FLIGHT_SIGNAL, NULL);
            continue;
        }
        if (atomic_exchange(&pt_flight_sigterm_pending, 0) &&
            !atomic_exchange(&pt_flight_sigterm_served, 1)) {
            pt_flight_serve(PT_FLIGHT_SIGTERM, NULL);
            continue;
        }
        char requested[PT_FLIGHT_NAME];
        if (pt_flight_take_request(requested)) {
            pt_flight_serve(PT_FLIGHT_REQUEST, requested);
            continue;
        }
        int64_t progress = __atomic_load_n(&pt_flight_progress, __ATOMIC_RELAXED);
        if (progress != seen_progress) {
            seen_progress = progress;
            pt_flight_step();
        }
        int64_t last_step = atomic_load(&pt_flight_last_step);
        if (pt_flight.watchdog_ns && last_step && !atomic_load(&pt_flight_stall_dumped) &&
            pt_monotonic_ns() - last_step > pt_flight.watchdog_ns) {
            atomic_store(&pt_flight_stall_dumped, 1);     /* once per stall */
            pt_flight_serve(PT_FLIGHT_WATCHDOG, NULL);
        }
    }
    return NULL;
}

/* Starts the C thread for tracer (one per process): signum (0: none) dumps, and
 * watchdog_ns (0: none) without pt_flight_step dumps once per stall; Python is
 * woken (pt_flight_wait_python) and has grace_ns to claim. dump_json: what a dump
 * of this thread's says in dump.json. */
int
pt_flight_arm(pt_tracer *tracer, int signum, int64_t watchdog_ns,
              int64_t grace_ns, const char *dumps_dir, const char *journal_dir,
              const char *dump_json)
{
    if (pt_flight_armed)
        return PT_ERR_STATE;
    if (strlen(dumps_dir) + 128 > PT_FLIGHT_PATH || strlen(journal_dir) + 32 > PT_FLIGHT_PATH ||
        strlen(dump_json) >= sizeof pt_flight.dump_json)
        return PT_ERR_ARG;
    pt_flight.tracer = tracer;
    pt_flight.signum = signum;
    pt_flight.watchdog_ns = watchdog_ns;
    pt_flight.grace_ns = grace_ns;
    pt_flight.pid = (int)getpid();
    strcpy(pt_flight.dumps_dir, dumps_dir);
    strcpy(pt_flight.journal_dir, journal_dir);
    strcpy(pt_flight.dump_json, dump_json);
    atomic_store(&pt_flight_quit, 0);
    atomic_store(&pt_flight_signalled, 0);
    atomic_store(&pt_flight_stall_dumped, 0);
    atomic_store(&pt_flight_sigterm_pending, 0);
    atomic_store(&pt_flight_sigterm_served, 0);
    atomic_store(&pt_flight_last_step, 0);     /* the watchdog waits for a first step */
    pt_flight_lines_prepare();
    if (sem_init(&pt_flight_wake, 0, 0) != 0)
        return PT_ERR_NOMEM;
    if (pt_own_thread_create(&pt_flight_thread, pt_flight_main, NULL) != 0) {
        sem_destroy(&pt_flight_wake);
        return PT_ERR_NOMEM;
    }
    pt_flight_armed = 1;
    if (signum > 0) {
        struct sigaction action;
        memset(&action, 0, sizeof action);
        action.sa_handler = pt_flight_on_signal;
        action.sa_flags = SA_RESTART;
        sigemptyset(&action.sa_mask);
        if (sigaction(signum, &action, &pt_flight_previous) != 0) {
            pt_flight.signum = 0;
            return PT_ERR_ARG;
        }
    }
    return PT_OK;
}

/* 1 while the dump signal's handler is ours (or there is no dump signal); 0 once
 * the program installed its own. */
int
pt_flight_signal_ours(void)
{
    struct sigaction now;
    if (!pt_flight_armed || pt_flight.signum <= 0)
        return 1;
    return sigaction(pt_flight.signum, NULL, &now) != 0 || now.sa_handler == pt_flight_on_signal;
}

/* Stops the C thread and puts the signal's handler back (unless the program
 * replaced ours meanwhile). Call before the tracer is freed. */
void
pt_flight_disarm(void)
{
    if (!pt_flight_armed)
        return;
    if (pt_flight.signum > 0) {
        struct sigaction now;
        if (sigaction(pt_flight.signum, NULL, &now) == 0 &&
            now.sa_handler == pt_flight_on_signal)
            sigaction(pt_flight.signum, &pt_flight_previous, NULL);
    }
    atomic_store(&pt_flight_sigterm_watch, 0);
    atomic_store(&pt_flight_quit, 1);
    sem_post(&pt_flight_wake);
    pthread_join(pt_flight_thread, NULL);
    sem_destroy(&pt_flight_wake);
    pt_flight_armed = 0;
    if (pt_flight_request_path[0])
        unlink(pt_flight_request_path);     /* a request that came too late */
    pt_flight_request_path[0] = 0;
}

/* After pt_flight_disarm: what was asked for and not served (a signal the C
 * thread had not turned into a request yet, or a request nobody claimed) as
 * PT_FLIGHT_*, claimed now; 0 when nothing was. Its stop() serves it. */
int
pt_flight_unserved(void)
{
    if (atomic_exchange(&pt_flight_signalled, 0))
        return PT_FLIGHT_SIGNAL;
    uint64_t seq = atomic_load(&pt_flight_requested);
    if (seq && pt_flight_claim(seq))
        return pt_flight_reason(seq);
    return 0;
}

/* A child forked while armed has the state, not the thread: it starts unarmed. */
void
pt_flight_after_fork(void)
{
    pt_flight_armed = 0;
    atomic_store(&pt_flight_sigterm_watch, 0);
    pt_flight_request_path[0] = 0;      /* the parent's, not this child's */
    pthread_mutex_t unlocked = PTHREAD_MUTEX_INITIALIZER;
    pt_children_lock = unlocked;
    memset(pt_children, 0, sizeof pt_children);
}

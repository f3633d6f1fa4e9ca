"""Threads of ours in the program's process, and what they must not change.

They take none of the program's signals: own_thread_begin blocks them all (the
C ones are born so), and a program that blocks SIGTERM keeps it pending, as
untraced, instead of one of ours taking it.

CPython 3.12+ warns at os.fork() when the process has more than one OS thread
("This process (pid=N) is multi-threaded, use of fork() may lead to deadlocks
in the child."): our threads (the flight recorder's, the memory sampler's, the
.pftrace encoder's) would make a program that has one thread print it. Every
thread of ours carries the OS name OWN_OS_NAME (c_src/pt_own.c); a fork with no
thread but ours beside the forking one ignores that warning, and only it (Linux;
on 3.12 for that fork, on 3.13+, which warns after the fork's hooks ran, until
the next fork decides again). A program with threads of its own still sees it.
"""
import os
import signal
import sys
import warnings

OWN_OS_NAME = "pytrace_cffi"        # PT_OWN_OS_NAME in c_src/pt_internal.h
_FORK_WARNING = r"This process \(pid=\d+\) is multi-threaded, use of fork"
_hooked = False
_ignored = None     # the warnings filter entry in force (see _before_fork)


def own_thread_begin():
    """First thing in a thread of ours: no trace records it (pt_own_thread_begin:
    with 16 of ours already, it would be traced), it takes no signal (the program's
    go to its own threads, as untraced: one that blocks SIGTERM keeps it pending),
    and forks stay quiet."""
    from ._core import lib
    lib.pt_own_thread_begin()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    keep_forks_quiet()


def keep_forks_quiet():
    """Where a thread of ours starts; the fork hooks are added once."""
    global _hooked
    if _hooked or sys.version_info < (3, 12) or not sys.platform.startswith("linux"):
        return
    _hooked = True
    os.register_at_fork(before=_before_fork, after_in_parent=_after_in_parent,
                        after_in_child=_warn_again)


def _threads_and_ours():
    """The OS threads of this process, and how many of them are ours."""
    tasks = os.listdir("/proc/self/task")
    ours = 0
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/comm", "rb") as comm:
                ours += comm.read().rstrip(b"\n") == OWN_OS_NAME.encode()
        except OSError:             # that thread has ended meanwhile
            pass
    return len(tasks), ours


def _before_fork():
    """Each fork decides anew: that one warning is ignored while no thread but ours
    runs beside the forking one."""
    try:
        threads, ours = _threads_and_ours()
    except OSError:
        return
    if ours and threads - ours <= 1:
        _ignore_the_warning()
    else:
        _warn_again()


def _after_in_parent():
    # 3.13+ warns after the fork's after-hooks ran: the filter stays until the
    # next fork decides again
    if sys.version_info < (3, 13):
        _warn_again()


def _ignore_the_warning():
    global _ignored
    if _ignored is None or _ignored not in warnings.filters:
        warnings.filterwarnings("ignore", _FORK_WARNING, DeprecationWarning)
        _ignored = warnings.filters[0]


def _warn_again():
    global _ignored
    entry, _ignored = _ignored, None
    if entry is None:
        return
    try:
        warnings.filters.remove(entry)
    except ValueError:              # the program reset the filters meanwhile
        return
    mutated = (getattr(warnings, "_filters_mutated", None)
               or getattr(warnings, "_filters_mutated_lock_held", None))
    if mutated is not None:
        mutated()

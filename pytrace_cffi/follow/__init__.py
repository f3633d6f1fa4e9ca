"""Following child processes, and joining their traces onto one timeline.

``start(follow_children=True, output=DIR)`` (and ``run``, by default) makes DIR a
*trace directory*: every process of the job traces into its own spilled saved
trace ``DIR/proc-<pid>/`` with the parent's options.

- A child made by ``os.fork()`` (multiprocessing "fork", DataLoader workers)
  drops the copy of the parent's events it inherits and traces afresh from the
  fork on, its frames at that moment seeded as ``start()`` seeds them.
- A new Python interpreter (multiprocessing "spawn"/"forkserver", ``subprocess`` /
  ``os.exec*`` / ``os.posix_spawn`` of Python, torchrun ranks) finds the
  ``PYTRACE_CFFI_FOLLOW`` environment variable (JSON: DIR and the options) and
  this package's ``_boot`` directory first on ``PYTHONPATH``; the
  ``sitecustomize`` there runs any other ``sitecustomize`` it shadows, then starts
  tracing before ``__main__`` runs. A failure prints one line and leaves the
  program untraced.
- Each following process notes the Python children it launches (subprocess,
  posix_spawn, exec, multiprocessing "spawn" with pid and name) in
  ``DIR/launched.jsonl``, and those it cannot follow, with why, in
  ``DIR/unfollowed.jsonl``; ``unfollowed(DIR)`` lists the latter and every launch
  that left no process directory (it ended before its bootstrap ran).
- Every process spills each full chunk of events at once (``max_events`` sets
  the chunk size: an eighth of it), after appending the names of new keys to
  ``keys.jsonl``; ``process.json`` is written at start. A process that ends
  normally, by ``os._exit`` (multiprocessing's way) or by SIGTERM (when the
  program has no handler of its own) writes its full trace; one killed by SIGKILL
  is recovered from those files, losing at most one chunk per thread.

``join(inputs, output)`` writes every process onto one timeline, labelled
(``rank N``, ``DataLoader worker N``, multiprocessing's process name, or the
program name), on CLOCK_MONOTONIC (one host; other hosts through their realtime
anchors), in the format output's name picks: Chrome JSON with a pid lane per
process, .pftrace with a process track per process, .html with lanes grouped by
process, or a saved directory of them all (``joined_trace`` gives that Trace of
several processes, streamed from the processes' own traces). It never waits for a
process: one still running is joined as far as its files go and reported as such.

The modules, one concern each (arrows point down):

- boot.py      start_from_environment: the bootstrap of a new interpreter
- finish.py    a job's finish (RunFinish: start(output=OUT)'s OUT written from
               the job, `run`'s windows too)
- join.py      join, joined_trace: the processes on one timeline
- jobs.py      reading a job's directory: process_directories, read_process,
               status, unfollowed
- recover.py   recover: the trace of a process that did not save its own
- session.py   FollowSession and its spill hook (the key journal), forks
- exits.py     the one set of exit guards (os._exit, exec, SIGTERM, exit) and
               what they pay: the output this process owes (OwedOutput)
- launches.py  the children launched: launched.jsonl, unfollowed.jsonl
- identity.py  which process this is; the job directory's names and files

pytrace_cffi/processes.py re-exports the public names for older imports.
"""

"""`run` and a job of several processes: OUT in every format holds the whole job,
what happens to the per-process traces, and one line for every child that was
not followed (processes.unfollowed). Every traced program runs in its own
interpreter, with a timeout."""
import collections
import json
import os
import re
import shutil
import signal
import sys
import textwrap

import pytest

import pytrace_cffi
from pytrace_cffi import processes

from test_children import (TIMEOUT, _env, _env_own_tmp, counts, run_command, run_script,
                           totals)

CHILD = ("import subprocess, sys\n"
         "def unique_root(): pass\n"
         "unique_root()\n"
         "subprocess.run([sys.executable, '-c', 'def unique_sub(): pass\\n"
         "for _ in range(7): unique_sub()'], check=True, timeout=60)\n")


def run_cli(tmp_path, source, *args, check=True):
    """`python -m pytrace_cffi run ARGS prog.py` in tmp_path."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", *map(str, args),
                        str(script)], tmp_path, _env_own_tmp(tmp_path), TIMEOUT)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def process_labels(trace):
    """The labels of a loaded job's processes: from Trace.processes where traces
    keep them, else from the thread names ("MainThread (LABEL, pid N)")."""
    kept = getattr(trace, "processes", None)
    if kept:
        return sorted(facts["label"] for facts in kept.values())
    return sorted(t.name.split(" (", 1)[1].rsplit(", pid", 1)[0] for t in trace.threads)


def left_in_tmp(tmp_path, name):
    """What run_cli's run left in its temporary directory for OUT name."""
    return [d for d in os.listdir(tmp_path / "tmp") if d.startswith(f"pytrace_cffi-{name}-")]


def unique_counts(names):
    return collections.Counter(name.rsplit(": ", 1)[-1] for name in names
                               if re.search(r": unique_\w+$", name))


# -- the program ends as under python: its threads, children and atexit --------

AFTER_MAIN = """
    import atexit, multiprocessing, sys, threading, time

    def unique_tick(i):
        return i

    def unique_thread_work():
        for i in range(20):
            unique_tick(i)
            time.sleep(0.005)

    def unique_child_work():
        for i in range(30):
            unique_tick(i)
            time.sleep(0.005)

    def unique_at_exit():
        unique_tick(-1)

    if __name__ == "__main__":
        atexit.register(unique_at_exit)
        threading.Thread(target=unique_thread_work, name="late").start()
        multiprocessing.get_context("fork").Process(target=unique_child_work).start()
        print("main returns")       # python joins both, then runs unique_at_exit
"""


@pytest.mark.parametrize("follow", [True, False])
def test_what_runs_after_the_programs_code_is_in_the_trace(tmp_path, follow):
    """A thread that is no daemon, a child joined by multiprocessing at exit and
    an atexit handler run after the program's module code returns: python waits
    for them, and so does the trace (it used to end with the module's code and
    lose them without a word)."""
    if not hasattr(os, "fork"):
        pytest.skip("needs fork")
    proc = run_cli(tmp_path, AFTER_MAIN, "-o", tmp_path / "out.json",
                   *([] if follow else ["--no-follow"]))
    assert proc.stdout == "main returns\n"
    trace = pytrace_cffi.load(tmp_path / "out.json")
    names = {t.native_id: t.name for t in trace.threads}
    ticks = collections.Counter(
        "late" if names[call.thread].startswith("late") else
        "main" if names[call.thread].startswith("MainThread") else names[call.thread]
        for call in trace if call.name.endswith(": unique_tick"))
    if follow:      # and the child's 30, on its own main thread
        assert ticks == {"late": 20, "main": 1 + 30}, ticks
        assert "running" not in proc.stderr and proc.stderr.count("complete, ") == 2
    else:           # the child is not followed: this process's 20 and 1
        assert ticks == {"late": 20, "main": 1}, ticks
    # the interpreter's exit on the main thread, after the module's code: the wait
    # for the thread, then the atexit handler
    main = trace.threads[0].native_id
    roots = [call.name.rsplit(": ", 1)[-1] for call in trace
             if call.parent is None and call.thread == main]
    assert roots[0] == "<module>" and "_shutdown" in roots and "unique_at_exit" in roots
    assert roots.index("_shutdown") < roots.index("unique_at_exit")


# -- OUT holds the whole job ----------------------------------------------------

def embedded(text, element_id):
    match = re.search(f'<script type="application/json" id="{element_id}">(.*?)</script>',
                      text, re.S)
    assert match, element_id
    return json.loads(match.group(1))


def test_run_to_html_writes_the_whole_job(tmp_path):
    out = tmp_path / "out.html"
    proc = run_cli(tmp_path, CHILD, "-o", out)
    text = out.read_text(encoding="utf-8")
    meta, slices = embedded(text, "pt-meta"), embedded(text, "pt-slices")
    # Every call of both processes is on the page (the old `run` put the parent's only).
    names = [meta["names"][key] for flat in slices for key in flat[2::4]]
    assert unique_counts(names) == {"unique_root": 1, "unique_sub": 7}
    assert len(meta["threads"]) == 2 and "python -c" in text     # the child's label
    lines = proc.stderr.splitlines()
    assert lines[0] == f"pytrace_cffi: writing {out} ..."
    assert re.fullmatch(rf"pytrace_cffi: 2 processes, \d{{1,3}}(,\d{{3}})* calls -> {re.escape(str(out))} "
                        rf"\(\d+\.\d [kM]B, \d+\.\d\d s\)", lines[1]), lines[1]
    assert len(lines) == 4 and "stay in" not in proc.stderr
    assert not left_in_tmp(tmp_path, "out.html")          # written: the per-process traces went


def test_run_to_pftrace_writes_the_whole_job(tmp_path):
    out = tmp_path / "out.pftrace"
    proc = run_cli(tmp_path, CHILD, "-o", out)
    assert proc.stderr.splitlines()[1].startswith("pytrace_cffi: 2 processes, ")
    assert not left_in_tmp(tmp_path, "out.pftrace")
    assert out.stat().st_size > 0
    decode = pytest.importorskip("test_perfetto").decode      # the perfetto venvs
    decoded = decode(out)
    assert unique_counts(s["name"] for s in decoded["slices"]) == {"unique_root": 1,
                                                                   "unique_sub": 7}


def test_run_to_a_directory_is_one_loadable_trace(tmp_path):
    out = tmp_path / "saved"
    run_cli(tmp_path, CHILD, "-o", out)
    trace = pytrace_cffi.load(out)
    assert unique_counts(call.name for call in trace) == {"unique_root": 1, "unique_sub": 7}
    assert process_labels(trace) == ["prog.py", "python -c"]
    # ... which summary and export take as any saved trace
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "export", str(out), "-o",
                        str(tmp_path / "again.json")], tmp_path, _env(), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    events = json.loads((tmp_path / "again.json").read_text())["traceEvents"]
    assert unique_counts(e["name"] for e in events if e.get("ph") == "X") == {
        "unique_root": 1, "unique_sub": 7}


@pytest.mark.parametrize("name", ["one.html", "one.json", "onedir"])
def test_a_single_process_run_is_unchanged(tmp_path, name):
    out = tmp_path / name
    proc = run_cli(tmp_path, "def unique_only(): pass\nunique_only()\n", "-o", out)
    [start, line] = proc.stderr.splitlines()
    assert start == f"pytrace_cffi: writing {out} ..."
    assert re.fullmatch(rf"pytrace_cffi: \d{{1,3}}(,\d{{3}})* calls on 1 thread -> {re.escape(str(out))} "
                        rf"\(\d+(\.\d [kM]B| bytes), \d+\.\d\d s\)", line), line
    assert out.exists() and not left_in_tmp(tmp_path, name)


# -- the per-process traces afterwards ------------------------------------------

def test_processes_dir_keeps_the_per_process_traces(tmp_path):
    keep = tmp_path / "procs"
    proc = run_cli(tmp_path, CHILD, "-o", tmp_path / "out.html", "--processes-dir", keep)
    assert f"the per-process traces stay in {keep}" in proc.stderr
    found = counts(keep)
    assert sorted(label for label, _, _ in found.values()) == ["prog.py", "python -c"]
    assert totals(found) == {"unique_root": 1, "unique_sub": 7}
    assert all(f"[{keep}{os.sep}proc-" in line for line in proc.stderr.splitlines()[2:4])
    # A directory that holds something already is refused before the program runs.
    proc = run_cli(tmp_path, "open('ran', 'w').close()\n", "-o", tmp_path / "b.json",
                   "--processes-dir", keep, check=False)
    assert proc.returncode == 2 and "it is not empty" in proc.stderr
    assert not (tmp_path / "ran").exists()
    # So is one inside OUT, a saved-trace directory (or holding it).
    for out, inside in (("saved", "saved/procs"), ("in/saved", "in")):
        proc = run_cli(tmp_path, "open('ran', 'w').close()\n", "-o", tmp_path / out,
                       "--processes-dir", tmp_path / inside, check=False)
        assert proc.returncode != 0 and f"cannot keep the per-process traces in " \
            f"{str(tmp_path / inside)!r}: output {str(tmp_path / out)!r} is a directory too, " \
            "and neither may hold the other" in proc.stderr, proc.stderr
        assert not (tmp_path / "ran").exists() and not (tmp_path / out).exists()


def test_a_failed_write_keeps_the_per_process_traces(tmp_path):
    (tmp_path / "sub").mkdir()
    out = tmp_path / "sub" / "out.html"
    proc = run_cli(tmp_path, CHILD + "import shutil\nshutil.rmtree('sub')\n", "-o", out,
                   check=False)
    assert proc.returncode == 0, proc.stderr        # the program's, whatever the trace's fate
    assert f"pytrace_cffi: cannot write the job's trace to {str(out)!r}" in proc.stderr
    said = [line for line in proc.stderr.splitlines() if "the per-process traces stay in" in line]
    assert len(said) == 1
    job = said[0].split(" stay in ")[1].split(" (write them later")[0]
    assert f"python -m pytrace_cffi export {job} -o {out})" in said[0]
    try:
        assert totals(counts(job)) == {"unique_root": 1, "unique_sub": 7}
    finally:
        import shutil
        shutil.rmtree(job)


# -- nothing silent ----------------------------------------------------------------

def not_followed(stderr):
    return [line for line in stderr.splitlines() if "not followed" in line]


def test_spawned_children_ended_before_their_bootstrap_are_listed(tmp_path):
    out = tmp_path / "out.json"
    proc = run_cli(tmp_path, """
        import os, signal, multiprocessing as mp
        def unique_task(i): return i
        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            killed = ctx.Process(target=unique_task, args=(1,))
            killed.start()
            os.kill(killed.pid, signal.SIGKILL)      # long before Python is up in it
            killed.join()
            fine = ctx.Process(target=unique_task, args=(2,))
            fine.start()
            fine.join()
            pool = ctx.Pool(2)
            workers = [p.pid for p in pool._pool]
            pool.terminate()                         # while they start up
            print(killed.pid, fine.pid, *workers)
    """, "-o", out)
    killed, fine, *workers = map(int, proc.stdout.split())
    events = json.loads(out.read_text())["traceEvents"]
    traced = {e["pid"] for e in events if e.get("name") == "process_name"}
    listed = {}
    for line in not_followed(proc.stderr):
        match = re.search(r"\((\S+), spawn, pid (\d+)\) started by pid \d+: it left no trace: "
                          r"it ended before its bootstrap could start tracing", line)
        assert match, line
        listed[int(match.group(2))] = match.group(1)
    assert fine in traced and fine not in listed
    # Every child is either in the trace or listed: none is silently missing.
    assert killed in listed or killed in traced
    assert listed.get(killed, "SpawnProcess-1") == "SpawnProcess-1"
    for pid in workers:
        assert pid in traced or listed.get(pid, "").startswith("SpawnPoolWorker-"), (
            pid, traced, listed, proc.stderr)
    assert not set(listed) & traced
    assert set(listed) <= {killed, *workers}


@pytest.mark.parametrize("flags", [[], ["--no-follow"]], ids=["follow", "no-follow"])
def test_sigterm_in_a_forked_copy_before_its_exec_ends_it_as_untraced(tmp_path, flags):
    """3.9's subprocess and multiprocessing "spawn" run the child in a fork()ed
    copy of the parent until its exec, with the parent's SIGTERM handler (ours,
    under `run`). A SIGTERM there (Pool.terminate() of a worker just started)
    must end it as untraced; noted for a Python the exec then replaces, it was
    lost and the worker waited for ever. Made here without 3.9: fork() through
    ctypes (no Python after-fork hook runs) in a thread that is not the main one
    (no Python handler runs), SIGTERM, then an exec of a program that would wait."""
    proc = run_cli(tmp_path, """
        import ctypes, os, signal, sys, threading, time
        libc = ctypes.PyDLL(None)      # (the GIL kept across fork: the child holds it)
        forked = []
        def fork_then_exec():
            pid = libc.fork()
            if pid == 0:
                os.kill(os.getpid(), signal.SIGTERM)
                os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)"])
            forked.append(pid)
        thread = threading.Thread(target=fork_then_exec)
        thread.start()
        thread.join()
        deadline = time.monotonic() + 20
        while True:
            pid, status = os.waitpid(forked[0], os.WNOHANG)
            if pid:
                print(os.WTERMSIG(status) if os.WIFSIGNALED(status) else "exit")
                break
            if time.monotonic() > deadline:
                os.kill(forked[0], signal.SIGKILL)
                print("still running after its SIGTERM")
                break
            time.sleep(0.05)
    """, "-o", tmp_path / "out.json", *flags)
    assert proc.stdout.split() == [str(int(signal.SIGTERM))], proc.stderr


def test_children_that_cannot_run_the_bootstrap_are_listed(tmp_path):
    shebang = tmp_path / "tool.py"
    shebang.write_text(f"#!{sys.executable}\ndef unique_tool(): pass\nunique_tool()\n")
    shebang.chmod(0o755)
    shell = tmp_path / "tool.sh"
    shell.write_text("#!/bin/sh\nexit 0\n")
    shell.chmod(0o755)
    shim = tmp_path / "python-shim"                 # as pyenv's: a shell script execing Python
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n')
    shim.chmod(0o755)
    proc = run_cli(tmp_path, f"""
        import os, subprocess, sys
        for flag in ("-I", "-S", "-E"):
            subprocess.run([sys.executable, flag, "-c", "pass"], check=True, timeout=60)
        subprocess.run([sys.executable, "-c", "pass"], env={{"PATH": os.environ["PATH"]}},
                       check=True, timeout=60)
        subprocess.run(["true"], check=True, timeout=60)
        subprocess.run("true", shell=True, check=True, timeout=60)
        subprocess.run([{str(shell)!r}], check=True, timeout=60)
        subprocess.run([{str(shebang)!r}], check=True, timeout=60)
        subprocess.run([{str(shim)!r}, "-c", "def unique_shim(): pass\\nunique_shim()"],
                       check=True, timeout=60)
        try:
            subprocess.run(["no-such-program-here"], timeout=60)
        except FileNotFoundError:
            pass
        print(os.getpid())
    """, "-o", tmp_path / "out.json")
    root = int(proc.stdout)
    python = sys.executable
    assert not_followed(proc.stderr) == [
        f"pytrace_cffi:   not followed: '{python} {flag} -c pass' (subprocess) started by "
        f"pid {root}: started with {flag} (no site / PYTHONPATH: the bootstrap cannot load)"
        for flag in ("-I", "-S", "-E")] + [
        f"pytrace_cffi:   not followed: '{python} -c pass' (subprocess) started by pid "
        f"{root}: its environment was replaced without PYTRACE_CFFI_FOLLOW",
        "pytrace_cffi:   not followed (not Python): 3 programs: sh, tool.sh, true"]
    # The #! Python script and the Python behind the shim were followed (and so not
    # listed as having left no trace).
    assert "(tool.py): complete" in proc.stderr and "(python -c): complete" in proc.stderr
    events = json.loads((tmp_path / "out.json").read_text())["traceEvents"]
    assert unique_counts(e["name"] for e in events if e.get("ph") == "X") == {"unique_tool": 1,
                                                                              "unique_shim": 1}


def test_unfollowed_matches_launches_with_what_the_children_wrote(tmp_path):
    """processes.unfollowed on a hand-made trace directory: each launch is answered
    by one directory (by pid when the launch knows it, else by command line; a #!
    script's interpreter line may come first) or by a failed bootstrap's note."""
    job = tmp_path / "job"
    job.mkdir()

    def proc_dir(name, **facts):
        (job / name).mkdir()
        (job / name / "process.json").write_text(json.dumps(facts))

    py = "/usr/bin/python3"
    proc_dir("proc-10", pid=10, root=True, command=[py, "prog.py"])
    proc_dir("proc-11", pid=11, command=[py, "-c", "a"])
    proc_dir("proc-12", pid=12, command=[py, "/opt/bin/tool", "x"])
    proc_dir("proc-13", pid=13, forked=True, command=[py, "-c", "a"])   # a fork: no launch
    proc_dir("proc-14", pid=14, command=[py, "-c", "spawned"])
    proc_dir("proc-16", pid=16, command=["/opt/python3.12", "-c", "shim"])
    proc_dir("proc-10-2", pid=10, command=[py, "-c", "exec'd"])
    launches = [dict(pid=10, how="subprocess", command=[py, "-c", "a"], child_pid=None),
                dict(pid=10, how="subprocess", command=[py, "-c", "a"], child_pid=None),
                dict(pid=10, how="subprocess", command=["tool", "x"], child_pid=None),
                dict(pid=10, how="subprocess", command=["python", "-c", "shim"],
                     child_pid=None),
                dict(pid=10, how="spawn", command=[py, "-c", "spawned"], child_pid=14),
                dict(pid=10, how="spawn", command=[py, "-c", "spawned"], child_pid=99999999),
                dict(pid=10, how="exec", command=[py, "-c", "exec'd"], child_pid=10),
                dict(pid=10, how="exec", command=[py, "-c", "again"], child_pid=10),
                dict(pid=10, how="posix_spawn", command=[py, "-c", "failed"], child_pid=None)]
    (job / "launched.jsonl").write_text("".join(json.dumps(r) + "\n" for r in launches))
    noted = dict(pid=10, command=[py, "-c", "failed"], child_pid=15,
                 reason="its tracing failed to start (boom)")
    (job / "unfollowed.jsonl").write_text(json.dumps(noted) + "\n")
    found = processes.unfollowed(job)
    assert found[0] == noted
    missing = [(r["how"], r["command"][-1], r["child_pid"]) for r in found[1:]]
    # one of the two `-c a` launches has no directory (proc-13 is a fork's)
    assert sorted(missing) == [("exec", "again", 10), ("spawn", "spawned", 99999999),
                               ("subprocess", "a", None)]
    assert all(r["reason"].startswith("it left no trace: it ended before its bootstrap")
               for r in found[1:])


def test_exec_with_the_inherited_environment_keeps_following(tmp_path):
    job = tmp_path / "job"
    run_script(tmp_path, """
        import os, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        os.execv(sys.executable, [sys.executable, "-c",
                 "def unique_after(): pass\\nfor _ in range(3): unique_after()"])
    """, str(job))
    found = counts(job)
    assert sorted(label for label, _, _ in found.values()) == ["prog.py", "python -c"]
    assert totals(found) == {"unique_after": 3}
    assert processes.unfollowed(job) == []


# -- spawn: multiprocessing's, and torch's ----------------------------------------

def test_spawn_context_process_children(tmp_path):
    """multiprocessing.get_context("spawn").Process: each child's calls, labelled
    by its name (on 3.12+ through sys.monitoring, before: PyEval_SetProfile)."""
    out = tmp_path / "out.json"
    proc = run_cli(tmp_path, """
        import multiprocessing as mp, os
        def unique_work(n):
            for _ in range(n): unique_step()
        def unique_step(): pass
        if __name__ == "__main__":
            ctx = mp.get_context("spawn")
            children = [ctx.Process(target=unique_work, args=(n,), name=f"worker{n}")
                        for n in (3, 5)]
            for child in children: child.start()
            for child in children: child.join()
            print(os.getpid(), *(child.pid for child in children))
    """, "-o", out)
    root, three, five = map(int, proc.stdout.split())
    events = json.loads(out.read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert lanes == {root: "prog.py", three: "worker3", five: "worker5"}
    by_pid = collections.Counter((e["pid"], e["name"].rsplit(": ", 1)[-1]) for e in events
                                 if e.get("ph") == "X" and ": unique_" in e["name"])
    assert by_pid == {(three, "unique_work"): 1, (three, "unique_step"): 3,
                      (five, "unique_work"): 1, (five, "unique_step"): 5}
    assert not not_followed(proc.stderr)


# A spawn child terminated once it traces, before its parent sends it anything
# (its name among it): the program's own wrapper of spawnv_passfds (around
# pytrace_cffi's, which notes the launch) terminates it. Prints the root's pid, the
# child's and its exit code.
TERMINATED_WHILE_STARTING = """
        import os, signal, time, multiprocessing as mp
        import multiprocessing.util as util
        def unique_work(): pass
        noting = util.spawnv_passfds
        def spawnv_then_terminate(path, args, passfds):
            pid = noting(path, args, passfds)
            if "--multiprocessing-fork" not in args:
                return pid      # the resource tracker (untraced)
            facts = os.path.join("job", f"proc-{pid}", "process.json")
            deadline = time.monotonic() + 60
            while not os.path.exists(facts) and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.5)     # its start() done: it waits for the data sent after this
            os.kill(pid, signal.SIGTERM)
            return pid
        if __name__ == "__main__":
            util.spawnv_passfds = spawnv_then_terminate
            child = mp.get_context("spawn").Process(target=unique_work, name="unique-name")
            child.start()
            child.join()
            print(os.getpid(), child.pid, child.exitcode)
"""


def test_a_spawned_child_ended_before_it_learned_its_name_has_its_launch_name(tmp_path):
    """A spawn child that ends before its parent sent it its name (a Pool worker
    terminated while it starts up) is labelled by the name its launch was noted
    with in launched.jsonl, not "multiprocessing child". Made certain here: the
    program's own wrapper of spawnv_passfds (around pytrace_cffi's, which notes
    the launch) terminates the child once it traces, before its parent sends it
    anything."""
    out = tmp_path / "out.json"
    proc = run_cli(tmp_path, TERMINATED_WHILE_STARTING, "--processes-dir", "job", "-o", out)
    root, child, exitcode = map(int, proc.stdout.split())
    assert exitcode == -15, proc.stderr
    assert re.search(rf"pid {child} \(unique-name\): ", proc.stderr), proc.stderr
    assert "multiprocessing child" not in proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert lanes == {root: "prog.py", child: "unique-name"}
    assert sorted(r.label for r in processes.status(tmp_path / "job")) == [
        "prog.py", "unique-name"]


def test_a_spawned_child_lost_before_it_recorded_anything_has_its_launch_name(tmp_path):
    """A spawn child lost before it recorded anything - its directory holds nothing,
    not even process.json (a Pool worker terminated while it started: a race, CI
    3.10 met it) - is labelled by the name its launch was noted with in
    launched.jsonl, not "pid N". Made certain here: the child of
    TERMINATED_WHILE_STARTING is terminated, then its directory emptied (#31)."""
    proc = run_cli(tmp_path, TERMINATED_WHILE_STARTING, "--processes-dir", "job", "-o",
                   tmp_path / "out.json")
    root, child, _ = map(int, proc.stdout.split())
    directory = tmp_path / "job" / f"proc-{child}"
    assert directory.is_dir(), proc.stderr
    for leftover in directory.iterdir():
        shutil.rmtree(leftover) if leftover.is_dir() else leftover.unlink()
    results = {r.pid: r for r in processes.status(tmp_path / "job")}
    assert {pid: r.label for pid, r in results.items()} == {root: "prog.py",
                                                          child: "unique-name"}
    assert results[child].state == "lost" and results[child].calls == 0


def test_spawn_pool_workers_are_labelled_by_name_even_when_they_ran_no_task(tmp_path):
    """A spawn Pool's workers, terminated by its __exit__ (one ran no task, perhaps
    still starting up): each is labelled by its name, in the per-process lines
    and the trace, or listed by it as not followed (terminated before tracing)."""
    out = tmp_path / "out.json"
    proc = run_cli(tmp_path, """
        import multiprocessing as mp

        def sq(x):
            return x * x

        if __name__ == "__main__":
            with mp.get_context("spawn").Pool(3) as pool:
                print(pool.map(sq, [1, 2]))
    """, "-o", out)
    assert proc.stdout == "[1, 4]\n"
    lines = dict(re.findall(r"pid (\d+) \((.+?)\): (?:complete|recovered)", proc.stderr))
    # (terminated after its bootstrap made its directory, before it recorded anything)
    lost = re.findall(r"pid \d+ \((.+?)\): lost, 0 calls", proc.stderr)
    listed = dict(re.findall(r"\((\S+), spawn, pid (\d+)\) started by pid \d+", proc.stderr))
    workers = sorted(label for label in lines.values() if label != "prog.py")
    assert sorted(workers + lost + list(listed)) == [
        "SpawnPoolWorker-1", "SpawnPoolWorker-2", "SpawnPoolWorker-3"], proc.stderr
    assert "multiprocessing child" not in proc.stderr
    events = json.loads(out.read_text())["traceEvents"]
    lanes = sorted(e["args"]["name"] for e in events if e.get("name") == "process_name")
    assert lanes == sorted(["prog.py"] + workers)


def test_torch_multiprocessing_spawn(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "out.json"
    proc = run_cli(tmp_path, """
        import os
        import torch.multiprocessing as mp
        def unique_step(): pass
        def unique_rank_main(rank, base):
            for _ in range(base + rank): unique_step()
            print(rank, os.getpid(), flush=True)
        if __name__ == "__main__":
            mp.spawn(unique_rank_main, args=(4,), nprocs=2)
            print("root", os.getpid(), flush=True)
    """, "-o", out)
    pids = dict(line.split() for line in proc.stdout.splitlines())
    root, rank0, rank1 = int(pids["root"]), int(pids["0"]), int(pids["1"])
    events = json.loads(out.read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert lanes[root] == "prog.py"
    # torch.multiprocessing.spawn starts multiprocessing "spawn" Processes in rank order
    assert {lanes[rank0], lanes[rank1]} == {"SpawnProcess-1", "SpawnProcess-2"}, lanes
    assert set(lanes) == {root, rank0, rank1}
    by_pid = collections.Counter((e["pid"], e["name"].rsplit(": ", 1)[-1]) for e in events
                                 if e.get("ph") == "X" and e["name"].endswith(
                                     (": unique_rank_main", ": unique_step")))
    assert by_pid == {(rank0, "unique_rank_main"): 1, (rank0, "unique_step"): 4,
                      (rank1, "unique_rank_main"): 1, (rank1, "unique_step"): 5}
    assert not not_followed(proc.stderr)
    states = [line for line in proc.stderr.splitlines() if line.startswith("pytrace_cffi:   pid ")]
    assert len(states) == 3 and all("): complete, " in line for line in states), proc.stderr


def test_merge_lists_the_children_not_followed(tmp_path):
    job = tmp_path / "job"
    run_script(tmp_path, """
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        subprocess.run(["true"], check=True, timeout=60)
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True, timeout=60)
        pytrace_cffi.stop()
    """, str(job))
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "merge", str(job), "-o",
                        str(tmp_path / "all.json")], tmp_path, _env(), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    lines = not_followed(proc.stderr)
    assert len(lines) == 2 and "-I -c pass' (subprocess) started by pid " in lines[0]
    assert lines[1] == "pytrace_cffi: not followed (not Python): 1 program: true"


def test_processes_dir_needs_following(tmp_path):
    for extra in (["--no-follow"], ["--max-events", "100"]):
        proc = run_cli(tmp_path, "open('ran', 'w').close()\n", "-o", tmp_path / "o.json",
                       "--processes-dir", tmp_path / "procs", *extra, check=False)
        assert proc.returncode == 1 and "--processes-dir" in proc.stderr, proc.stderr
        assert not (tmp_path / "ran").exists() and not (tmp_path / "procs").exists()


def test_the_launch_notes_leave_the_programs_calls_as_they_were(tmp_path):
    """multiprocessing.util is imported through our finder and spawnv_passfds is
    wrapped, while following: the parent's trace has the same multiprocessing
    calls as under --no-follow, and nothing of ours."""
    source = """
        import multiprocessing as mp
        def unique_task(): pass
        if __name__ == "__main__":
            child = mp.get_context("spawn").Process(target=unique_task)
            child.start()
            child.join()
    """
    # (other import calls differ anyway: under --no-follow the program itself
    # imports modules that following has imported before it starts)
    watched = (": spawnv_passfds", "multiprocessing/util.py(1): <module>", "fork_exec")

    def root_calls(*args):
        out = tmp_path / "out.json"
        run_cli(tmp_path, source, "-o", out, *args)
        events = json.loads(out.read_text())["traceEvents"]
        root = min(e["pid"] for e in events if e.get("ph") == "X")   # the parent's pid
        names = [e["name"] for e in events if e.get("ph") == "X" and e["pid"] == root]
        assert not [n for n in names if "pytrace_cffi" in n or "processes.py" in n]
        return collections.Counter(n for n in names if n.endswith(watched))

    following, alone = root_calls(), root_calls("--no-follow")
    assert following == alone
    # (util's import is the program's where it was not imported before the program)
    assert any(name.endswith(": spawnv_passfds") for name in following), following


def test_a_spawned_child_still_starting_is_listed_as_such(tmp_path):
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import json, os, signal, sys, multiprocessing as mp
        import pytrace_cffi
        from pytrace_cffi import processes
        def unique_task(): pass
        if __name__ == "__main__":
            pytrace_cffi.start(follow_children=True, output=sys.argv[1])
            child = mp.get_context("spawn").Process(target=unique_task)
            child.start()
            os.kill(child.pid, signal.SIGSTOP)          # long before Python is up in it
            pytrace_cffi.stop()
            try:
                print(child.pid, json.dumps(processes.unfollowed(sys.argv[1])))
            finally:
                os.kill(child.pid, signal.SIGKILL)
                child.join()
    """, str(job))
    pid, listed = proc.stdout.split(" ", 1)
    listed = json.loads(listed)
    started = any(os.path.basename(r.directory).startswith(f"proc-{pid}")
                  for r in processes.status(job))
    assert started or [(r["child_pid"], r["how"], r["reason"]) for r in listed] == [
        (int(pid), "spawn", "it left no trace yet (still starting up, or stopped before "
                            "tracing)")], listed
    # and once it is gone, it is one that ended before its bootstrap ran
    if not started:
        [gone] = processes.unfollowed(job)
        assert gone["reason"].startswith("it left no trace: it ended before its bootstrap")


def test_processes_are_labelled_by_what_python_ran(tmp_path):
    """`python -m tool` is "tool" (not __main__.py), `python -m pkg.mod` is
    "pkg.mod", torch.distributed.run is "torchrun" (its command's name, not
    run.py); the root run by `run -m` too."""
    for name, text in {
            "tool/__init__.py": "",
            "tool/__main__.py": (
                "import subprocess, sys\n"
                "def unique_root(): pass\n"
                "unique_root()\n"
                "for module in ('tool.worker', 'torch.distributed.run'):\n"
                "    subprocess.run([sys.executable, '-m', module], check=True, timeout=60)\n"),
            "tool/worker.py": "def unique_worker(): pass\nunique_worker()\n",
            "torch/__init__.py": "",             # only what `-m torch.distributed.run` needs
            "torch/distributed/__init__.py": "",
            "torch/distributed/run.py": "def unique_launcher(): pass\nunique_launcher()\n"}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", "-o", "job.json",
                        "-m", "tool"], tmp_path, _env_own_tmp(tmp_path), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    events = json.loads((tmp_path / "job.json").read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    unique = {e["pid"]: e["name"].rsplit(": ", 1)[-1] for e in events
              if re.search(r": unique_\w+$", e["name"])}
    assert sorted((lanes[pid], function) for pid, function in unique.items()) == [
        ("tool", "unique_root"), ("tool.worker", "unique_worker"),
        ("torchrun", "unique_launcher")]


FORKS = """
    import os, sys, threading, time
    def unique_leaf(): pass
    for _ in range(20_000):
        unique_leaf()
    time.sleep(0.4)             # the .pftrace encoder's thread is running by now
    {own_thread}
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    print("forked", file=sys.stderr)
    """


@pytest.mark.parametrize("flags", [("--flight-recorder",), ("--memory-interval", "10"),
                                   ("--duration", "30"), ("--no-follow",), ()])
@pytest.mark.parametrize("own_thread", [False, True])
def test_our_threads_leave_a_forking_programs_stderr_as_pythons(tmp_path, flags, own_thread):
    """3.12+ warns at os.fork() in a process of several OS threads: a program of
    one thread prints no such warning traced (the recorder's, sampler's, timer's
    and encoder's threads are ours), and one with a thread of its own prints it
    as under python (the same line). On 3.9-3.11 neither warns."""
    thread = ("threading.Thread(target=time.sleep, args=(2,), daemon=True).start()"
              if own_thread else "")
    source = FORKS.format(own_thread=thread)
    untraced = run_script(tmp_path, source)
    traced = run_cli(tmp_path, source, *flags, "-o", tmp_path / "out.pftrace")
    def program_lines(stderr):      # the pids differ between the two runs
        return [re.sub(r"pid=\d+", "pid=N", line) for line in stderr.splitlines()
                if not line.startswith("pytrace_cffi: ")]
    assert program_lines(traced.stderr) == program_lines(untraced.stderr), traced.stderr
    warns = sys.version_info >= (3, 12) and own_thread
    assert ("is multi-threaded, use of fork()" in untraced.stderr) == warns

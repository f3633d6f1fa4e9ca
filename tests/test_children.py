"""Following child processes (processes.py): fork, multiprocessing, subprocess,
killed and never-ending children, labels, joining, and `run` end to end. Every
traced program runs in its own interpreter, with a timeout."""
import collections
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pytrace_cffi
from pytrace_cffi import processes
from pytrace_cffi._core import lib
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.summary import calls_begun

TIMEOUT = 120
# Where the pytrace_cffi under test is importable from: the installed wheel in CI,
# the source tree with an in-place build otherwise (the bootstrap adds it to sys.path).
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))


def _env(**extra):
    env = dict(os.environ)
    env.pop(processes.ENV, None)
    env.update(extra)
    return env


def _env_own_tmp(tmp_path):
    """_env() with TMPDIR a directory of the test's own (tmp_path/tmp, made here):
    what a run leaves in its temporary directory is then the run's own."""
    (tmp_path / "tmp").mkdir(exist_ok=True)
    return _env(TMPDIR=str(tmp_path / "tmp"))


def run_script(tmp_path, source, *args, env=None, timeout=TIMEOUT, check=True):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(source))
    proc = run_command([sys.executable, str(script), *args], tmp_path, env or _env(), timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"exit {proc.returncode}\nstdout:\n{proc.stdout}\n"
                             f"stderr:\n{proc.stderr}")
    return proc


def run_command(command, cwd, env, timeout):
    """subprocess.run in its own session; on a timeout, what every process of
    that session was doing goes into the failure, and they are all killed."""
    with subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            ps = subprocess.run(["ps", "-s", str(proc.pid), "-o", "pid,ppid,stat,wchan:24,args"],
                                capture_output=True, text=True).stdout
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            raise AssertionError(f"timed out after {timeout} s:\n{ps}\nstderr:\n{err}")
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def counts(job_dir, marker="unique_"):
    """{pid: (label, state, Counter of function names starting with marker)}: the
    test's own functions (3.14's stdlib has annotationlib's create_unique_name,
    which a pool's import of traceback runs)."""
    out = {}
    for result in processes.status(job_dir):
        trace, facts, state, _ = processes.read_process(result.directory)
        names = collections.Counter(
            name for name, kind in ((call.name.rsplit(": ", 1)[-1], call.kind)
                                    for call in trace or ())
            if name.startswith(marker) and (not marker or kind == "python"))
        key = result.pid if result.pid not in out else os.path.basename(result.directory)
        out[key] = (result.label, state, names)
    return out


def totals(found):
    total = collections.Counter()
    for _, _, names in found.values():
        total.update(names)
    return total


def test_os_fork_child_traced_from_the_fork(tmp_path):
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import os, sys
        import pytrace_cffi
        def unique_parent(): pass
        def unique_child(): pass
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        for _ in range(7): unique_parent()
        pid = os.fork()
        if pid == 0:
            for _ in range(1234): unique_child()
            os._exit(0)
        os.waitpid(pid, 0)
        unique_parent()
        pytrace_cffi.stop()
        print(os.getpid(), pid)
    """, str(job))
    parent, child = map(int, proc.stdout.split())
    found = counts(job)
    assert set(found) == {parent, child}
    assert found[parent][2] == {"unique_parent": 8}
    # The child keeps none of the parent's events and records its own from the fork.
    assert found[child][2] == {"unique_child": 1234}
    assert found[child][:2] == ("prog.py (fork)", "complete")
    # Nothing of the follow machinery shows: the whole of both traces.
    everything = counts(job, marker="")
    assert everything[parent][2] == {"<module>": 1, "unique_parent": 8, "posix.fork": 1,
                                     "posix.waitpid": 1}
    assert everything[child][2] == {"<module>": 1, "unique_child": 1234}
    meta = json.loads((job / f"proc-{child}" / "meta.json").read_text())
    assert meta["ppid"] == parent and meta["argv"][0].endswith("prog.py")
    assert meta["host"] == os.uname().nodename and meta["root"] is False
    # One timeline: the child's calls lie between the parent's fork and its wait.
    out = tmp_path / "all.json"
    results = processes.join(job, out)
    assert [r.pid for r in results] == [parent, child]
    events = json.loads(out.read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert lanes == {parent: "prog.py", child: "prog.py (fork)"}
    fork = [e for e in events if e["pid"] == parent and e.get("name") == "posix.fork"]
    child_calls = [e for e in events if e["pid"] == child and "unique_child" in e["name"]]
    assert len(fork) == 1 and len(child_calls) == 1234
    assert fork[0]["ts"] <= min(e["ts"] for e in child_calls)
    assert max(e["ts"] + e["dur"] for e in child_calls) <= fork[0]["ts"] + 60e6
    # The joined file reads back as one trace of both processes (summary, export).
    from pytrace_cffi.reading import read_trace
    both = read_trace(str(out))
    # the results count calls: the frames running at each start are none
    open_at_start = sum(1 for e in events if e.get("args", {}).get("open at start") is True)
    assert open_at_start == 2                       # the parent's and the child's <module>
    assert len(both) - open_at_start == sum(r.calls for r in results)
    assert len(both.threads) == 2
    assert sum(call.name.endswith(": unique_child") for call in both) == 1234


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing_pool(tmp_path, method):
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import os, sys, multiprocessing as mp
        import pytrace_cffi
        def unique_task(i):
            return os.getpid()
        if __name__ == "__main__":
            pytrace_cffi.start(follow_children=True, output=sys.argv[2])
            with mp.get_context(sys.argv[1]).Pool(2) as pool:
                pids = pool.map(unique_task, range(300), chunksize=5)
            pytrace_cffi.stop()
            print(os.getpid(), " ".join(f"{p}:{pids.count(p)}" for p in set(pids)))
    """, method, str(job))
    root, *ran = proc.stdout.split()
    ran = {int(p): int(n) for p, n in (item.split(":") for item in ran)}
    found = counts(job)
    assert found[int(root)][2] == {}
    prefix = {"fork": "ForkPoolWorker-", "spawn": "SpawnPoolWorker-",
              "forkserver": "ForkServerPoolWorker-"}[method]
    workers = {pid: v for pid, v in found.items() if pid != int(root)}
    assert set(ran) <= set(workers) and 1 <= len(workers) <= 2, (found, ran)
    if method == "fork":
        # A fork worker terminated as it starts (it ran no task) waited for its
        # after-fork hook: never missing, never lost.
        assert len(workers) == 2 and all(state == "complete"
                                         for _, state, _ in workers.values()), found
    for pid, (label, state, _) in workers.items():
        if state == "lost":       # terminated between its fork and its first file
            assert pid not in ran, found
            continue
        # A spawned worker that the pool terminates while it starts up (it ran no
        # task: the other took them all) may not know its name yet, or not even
        # have started tracing: its launch's note names it (a forkserver's child
        # has no such note).
        assert label.startswith(prefix) or (
            label == "multiprocessing child" and method == "forkserver" and pid not in ran), found
    if method == "fork":
        # Named at the fork already, before multiprocessing's _bootstrap names it
        # (process.json is written then): a worker terminated that early keeps it.
        for pid in (pid for pid in workers if workers[pid][1] != "lost"):
            early = json.loads((job / f"proc-{pid}" / "process.json").read_text())["label"]
            assert early.startswith(prefix)
    # Each worker's trace has exactly the tasks it ran, whether it ended by
    # os._exit (fork) or sys.exit, or was terminated by the pool (SIGTERM).
    for pid, (label, state, names) in workers.items():
        # (terminated between its fork and the SIGTERM handler's installation, a
        # worker that ran nothing has only its process.json: "lost")
        assert state == "complete" or (state == "lost" and pid not in ran), found
        assert names.get("unique_task", 0) == ran.get(pid, 0), (pid, names, ran)
    assert totals(found) == {"unique_task": 300}


@pytest.mark.parametrize("method", ["fork", "forkserver"])
def test_forked_children_of_a_flight_recorder_get_a_recorder_each(tmp_path, method):
    """A child forked by the program, or by a forkserver (no session of the parent's
    there to take it from), records into a ring of its own with its own flight
    recorder: handed down from the package's top, never looked up by name."""
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import os, sys, multiprocessing as mp
        import pytrace_cffi
        def unique_task(i):
            return os.getpid()
        if __name__ == "__main__":
            pytrace_cffi.start(flight_recorder="1M", follow_children=True,
                               output=sys.argv[2], dump_signal="none")
            with mp.get_context(sys.argv[1]).Pool(1) as pool:
                pids = set(pool.map(unique_task, range(20)))
            pytrace_cffi.stop()
            print(" ".join(str(pid) for pid in pids))
    """, method, str(job))
    ran = {int(pid) for pid in proc.stdout.split()}
    assert len(ran) == 1, proc.stdout
    [worker] = ran
    with open(job / f"proc-{worker}" / "process.json", encoding="utf-8") as f:
        facts = json.load(f)
    assert facts["flight"]["dumps_dir"] == str(tmp_path / "job-dumps"), facts
    assert facts["flight"]["signal"] == 0, facts
    assert counts(job)[worker][2] == {"unique_task": 20}


def test_children_terminated_right_after_their_fork_keep_their_traces(tmp_path):
    """A SIGTERM sent as fork returns (Pool.terminate of a worker that ran no task)
    waits until the child's after-fork hook has made its directory, process.json
    and SIGTERM handler: the child saves its trace and dies of the signal, never
    missing from the job nor "lost" (both through os.fork and a fork Pool)."""
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import json, os, signal, sys, time, multiprocessing as mp
        import pytrace_cffi
        def unique_child():
            time.sleep(0.01)
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        forked = []
        for _ in range(6):
            pid = os.fork()
            if pid == 0:
                while True:
                    unique_child()
            os.kill(pid, signal.SIGTERM)
            forked.append(pid)
        ends = [os.waitpid(pid, 0)[1] for pid in forked]
        pool = mp.get_context("fork").Pool(3)
        workers = [p.pid for p in pool._pool]
        pool.terminate()
        pytrace_cffi.stop()
        print(json.dumps({"root": os.getpid(), "forked": forked, "ends": ends,
                          "workers": workers}))
    """, str(job))
    facts = json.loads(proc.stdout.splitlines()[-1])
    assert all(os.WIFSIGNALED(end) and os.WTERMSIG(end) == signal.SIGTERM
               for end in facts["ends"]), facts
    found = counts(job)
    assert sorted(found) == sorted([facts["root"], *facts["forked"], *facts["workers"]])
    assert all(state == "complete" for _, state, _ in found.values()), found
    for pid in facts["workers"]:
        assert found[pid][0].startswith("ForkPoolWorker-"), found


def test_a_child_running_that_has_not_spilled_yet_is_running_not_lost(tmp_path):
    """A followed child still running, with nothing spilled yet (its process.json
    written, no events.bin block): status and read_process say it is running and
    where its trace is going, not that it is lost."""
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import json, subprocess, sys
        import pytrace_cffi
        from pytrace_cffi import processes
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        child = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', "
                                  "flush=True); sys.stdin.read()"],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert child.stdout.readline() == "ready\\n"
        found = [(r.pid, r.state, r.note, r.directory, processes.read_process(r.directory)[2])
                 for r in processes.status(sys.argv[1]) if r.pid == child.pid]
        child.communicate("")
        pytrace_cffi.stop()
        print(json.dumps({"child": child.pid, "found": found}))
    """, str(job))
    facts = json.loads(proc.stdout.splitlines()[-1])
    [(pid, state, note, directory, read_state)] = facts["found"]
    assert pid == facts["child"] and state == read_state == "running", facts
    assert "nothing spilled yet" in note and directory in note, note
    assert counts(job)[facts["child"]][1] == "complete"       # and saved at its end


def test_subprocess_of_python(tmp_path):
    job = tmp_path / "job"
    helper = tmp_path / "helper.py"
    helper.write_text("import os\ndef unique_helper(): pass\nfor _ in range(77): unique_helper()\n"
                      "print(os.getpid())\n")
    proc = run_script(tmp_path, """
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        out = subprocess.run([sys.executable, sys.argv[2]], check=True, timeout=60,
                             capture_output=True, text=True).stdout
        pytrace_cffi.stop()
        print(out.strip())
        assert "PYTRACE_CFFI_FOLLOW" not in __import__("os").environ
    """, str(job), str(helper))
    child = int(proc.stdout.split()[-1])
    found = counts(job)
    assert found[child] == ("helper.py", "complete", {"unique_helper": 77})
    assert len(found) == 2


def test_a_childs_trace_starts_with_its_program_not_the_interpreters_start_up(tmp_path):
    """A child traced through the bootstrap starts tracing inside site's import of
    sitecustomize: those frames (site, importlib) and what they run until they
    return are the interpreter's start-up, not the program's, and are left out,
    as `run` leaves out its launcher. Before the script only the interpreter's
    look for an importer of the script's path remains (calls from C, not in any
    frame). The program's calls are as they were, and calls of the same code
    made by the program (an import) are kept."""
    job = tmp_path / "job"
    (tmp_path / "child.py").write_text(
        "import colorsys\ndef unique_child(): pass\nfor _ in range(3): unique_child()\n")
    run_script(tmp_path, """
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        subprocess.run([sys.executable, "child.py"], check=True, timeout=60)
        pytrace_cffi.stop()
    """, str(job))
    [child] = [r for r in processes.status(job) if r.label == "child.py"]
    trace = processes.read_process(child.directory)[0]
    calls = sorted(trace, key=lambda c: (c.start_ns, c.id))
    assert calls_begun(trace) == len(trace)                 # no frame open at start
    assert not [c.name for c in calls if "site" in c.name.split(":")[0]]
    [module] = [c for c in calls if c.name == "child.py(1): <module>"]
    assert module.parent is None
    before = {re.sub(r"\(\d+\)", "", c.name) for c in calls
              if c.start_ns < module.start_ns and c.parent is None}
    assert before <= {"<frozen zipimport>: __init__",          # zipimporter(script)
                      "<frozen importlib._bootstrap_external>: path_hook_for_FileFinder",
                      "<frozen importlib._bootstrap_external>: __init__",   # FileFinder
                      # 3.15: the weakref callback of an earlier import's module lock
                      # (_get_module_lock's cb), run from C when the lock is freed
                      "<frozen importlib._bootstrap>: cb"}, before
    inside = [c for c in calls if module.start_ns <= c.start_ns and c.end_ns <= module.end_ns
              and c.id != module.id]
    assert [c.name for c in inside if c.parent == module.id][-3:] == \
        ["child.py(2): unique_child"] * 3
    # the program's own import (colorsys) runs importlib's code: kept
    assert any(c.name.startswith("<frozen importlib._bootstrap>") for c in inside)


def test_a_child_under_an_include_filter_keeps_its_calls(tmp_path):
    """With include=, the start-up frames a bootstrapped child seeds are code the
    filter leaves out: their returns are never recorded, so they cannot hide what
    they run until they return (the child's whole trace was empty: torchrun's ranks
    under --include had no calls). They are left out alone; the program's calls stay."""
    job = tmp_path / "job"
    (tmp_path / "child.py").write_text(
        "def unique_child(): pass\nfor _ in range(3): unique_child()\n")
    run_script(tmp_path, """
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1], include="*/child.py")
        subprocess.run([sys.executable, "child.py"], check=True, timeout=60)
        pytrace_cffi.stop()
    """, str(job))
    [child] = [r for r in processes.status(job) if r.label == "child.py"]
    trace = processes.read_process(child.directory)[0]
    assert sorted(c.name for c in trace) == ["child.py(1): <module>"] + \
        ["child.py(1): unique_child"] * 3
    assert child.calls == 4


def test_a_child_forked_inside_an_import_keeps_its_calls(tmp_path):
    """The start-up frames a bootstrapped child leaves out are left out of its own
    first trace only: a process it forks inside an import (the same importlib
    code running) keeps the calls it makes there."""
    job = tmp_path / "job"
    (tmp_path / "forks_on_import.py").write_text(textwrap.dedent("""
        import os
        def unique_forked():
            pass
        pid = os.fork()
        if pid == 0:
            unique_forked()
            os._exit(0)
        os.waitpid(pid, 0)
    """))
    run_script(tmp_path, """
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        subprocess.run([sys.executable, "-c", "import forks_on_import"], check=True,
                       timeout=60)
        pytrace_cffi.stop()
    """, str(job))
    found = counts(job)
    assert sorted(state for _, state, _ in found.values()) == ["complete"] * 3, found
    assert totals(found) == {"unique_forked": 1}, found


def test_exec_saves_before_and_traces_after(tmp_path):
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import os, sys
        import pytrace_cffi
        def unique_before_exec(): pass
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        pid = os.fork()
        if pid == 0:
            for _ in range(5): unique_before_exec()
            os.execv(sys.executable, [sys.executable, "-c",
                     "def unique_after_exec(): pass\\nfor _ in range(6): unique_after_exec()"])
        os.waitpid(pid, 0)
        pytrace_cffi.stop()
        print(pid)
    """, str(job))
    child = int(proc.stdout)
    by_dir = {os.path.basename(r.directory): (r.pid, r.label, r.state)
              for r in processes.status(job)}
    assert by_dir[f"proc-{child}"] == (child, "prog.py (fork)", "complete")
    assert by_dir[f"proc-{child}-2"] == (child, "python -c", "complete")
    assert totals(counts(job)) == {"unique_before_exec": 5, "unique_after_exec": 6}
    # Joined, the image before the exec and the one after are two processes, each in
    # a lane of its own (the second's pid moved off the OS pid, which it keeps).
    joined, _ = processes.joined_trace(job)
    info = {lane: (facts["label"], facts.get("os_pid", lane))
            for lane, facts in joined.processes.items()}
    assert len(info) == 3
    assert info[child] == ("prog.py (fork)", child)
    assert info[child + (1 << 22)] == ("python -c", child)
    lane_of_tid = {t.native_id: joined.thread_pid(t) for t in joined.threads}
    assert len(lane_of_tid) == len(joined.threads)        # no tid shared between lanes
    per_lane = collections.defaultdict(collections.Counter)
    for call in joined:
        if call.name.endswith("_exec"):
            per_lane[lane_of_tid[call.thread]][call.name.rsplit(" ", 1)[-1]] += 1
    assert per_lane == {child: {"unique_before_exec": 5},
                        child + (1 << 22): {"unique_after_exec": 6}}
    from pytrace_cffi.render import summary
    text = summary.format_process_totals(joined)
    assert f"pid {child} #1 (prog.py (fork)): " in text
    assert f"pid {child} #2 (python -c): " in text


def test_failed_exec_attempts_leave_tracing_on(tmp_path):
    """os.execvp tries each PATH entry (an audit event each): the entries that do
    not hold the program fail, and must not end the trace; an exec that fails
    outright leaves the program traced to its end."""
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import os, sys
        import pytrace_cffi
        def unique_before_exec(): pass
        def unique_after_failure(): pass
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        pid = os.fork()
        if pid == 0:
            unique_before_exec()
            try:
                os.execv(os.path.join(sys.argv[1], "missing"), ["missing"])
            except OSError:
                unique_after_failure()
            here, name = os.path.split(sys.executable)
            os.environ["PATH"] = os.pathsep.join([sys.argv[1], here])
            os.execvp(name, [name, "-c",
                      "def unique_after_exec(): pass\\nunique_after_exec()"])
        os.waitpid(pid, 0)
        pytrace_cffi.stop()
        print(pid)
    """, str(job))
    child = int(proc.stdout)
    found = counts(job)
    assert found[child] == ("prog.py (fork)", "complete",
                            {"unique_before_exec": 1, "unique_after_failure": 1})
    assert totals(found)["unique_after_exec"] == 1


def test_sigkilled_child_keeps_its_spilled_part(tmp_path):
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import os, subprocess, sys, time
        import pytrace_cffi
        child = '''
        import sys, time
        def unique_victim(i): return i
        for i in range(5000): unique_victim(i)
        open(sys.argv[1], "w").close()
        time.sleep(600)
        '''
        pytrace_cffi.start(follow_children=True, output=sys.argv[1], max_events=4096)
        marker = sys.argv[1] + ".marker"
        p = subprocess.Popen([sys.executable, "-c", child.replace("\\n        ", "\\n"), marker])
        deadline = time.time() + 60
        while not os.path.exists(marker) and time.time() < deadline:
            time.sleep(0.01)
        p.kill()
        p.wait(timeout=30)
        def unique_after(): pass
        unique_after()
        pytrace_cffi.stop()
        print(p.pid, p.returncode)
    """, str(job))
    child, code = map(int, proc.stdout.split())
    assert code == -signal.SIGKILL
    found = counts(job)
    label, state, names = found[child]
    assert state == "recovered" and label == "python -c"
    # max_events=4096: chunks of 512 events, at most one (on its one thread) lost,
    # so of 5000 calls (2 events each) at least 5000 - 256 are kept. (All of them
    # when the chunk lost began after the last: the few events after the loop,
    # open, close and sleep, decide; about 1 run in 100.)
    assert 5000 - 256 <= names["unique_victim"] <= 5000, names
    assert found[proc and int(proc.stdout.split()[0]) and next(
        pid for pid in found if pid != child)][2] == {"unique_after": 1}
    results = {r.pid: r for r in processes.join(job, tmp_path / "all.json.gz")}
    assert results[child].state == "recovered" and "killed" in results[child].note


def test_child_that_never_exits_does_not_hold_the_parent(tmp_path):
    job = tmp_path / "job"
    started = time.monotonic()
    proc = run_script(tmp_path, """
        import os, subprocess, sys, time
        import pytrace_cffi
        from pytrace_cffi import processes
        child = "import sys, time\\ndef unique_forever(): pass\\n" \\
                "for _ in range(3000): unique_forever()\\n" \\
                "open(sys.argv[1], 'w').close()\\nwhile True: time.sleep(1)\\n"
        pytrace_cffi.start(follow_children=True, output=sys.argv[1], max_events=2048)
        marker = sys.argv[1] + ".marker"
        p = subprocess.Popen([sys.executable, "-c", child, marker],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not os.path.exists(marker):
            time.sleep(0.01)
        pytrace_cffi.stop()
        results = processes.join(sys.argv[1], sys.argv[1] + ".json")
        print(p.pid, [r.state for r in results if r.pid == p.pid][0])
        # the parent exits now, leaving the child running
    """, str(job), timeout=60)
    child, state = proc.stdout.split()
    child = int(child)
    try:
        assert time.monotonic() - started < 60
        assert state == "running"
        events = json.loads((tmp_path / "job.json").read_text())["traceEvents"]
        merged = [e for e in events if e["pid"] == child and "unique_forever" in e["name"]]
        # One chunk (512 events, the smallest) at most is not yet spilled. All 3000
        # calls are there when that chunk began after the last of them: only the few
        # events after the loop (open, close, sleep) are in it, about 1 run in 100.
        assert 3000 - 256 <= len(merged) <= 3000
        assert any(e["name"] == "process_name" and e["pid"] == child for e in events)
    finally:
        os.kill(child, signal.SIGKILL)


def test_labels_from_the_torchrun_environment(tmp_path):
    job = tmp_path / "job"
    run_script(tmp_path, """
        import subprocess, sys, os
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        for rank in (1, 0):
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE="2")
            subprocess.run([sys.executable, "-c", "def unique_rank(): pass\\nunique_rank()"],
                           env=env, check=True, timeout=60)
        pytrace_cffi.stop()
    """, str(job))
    results = processes.join(job, tmp_path / "all.json")
    assert [r.label for r in results] == ["prog.py", "rank 0", "rank 1"]
    for r in results[1:]:
        meta = json.loads(open(os.path.join(r.directory, "meta.json")).read())
        rank = int(r.label.split()[1])
        assert (meta["rank"], meta["local_rank"], meta["world_size"]) == (rank, rank, 2)
    joined = json.loads((tmp_path / "all.json").read_text())
    events = joined["traceEvents"]
    order = {e["pid"]: e["args"]["sort_index"] for e in events
             if e["name"] == "process_sort_index"}
    assert [order[r.pid] for r in results] == [0, 1, 2]
    assert totals(counts(job)) == {"unique_rank": 2}
    # the joined trace's processes table keeps each rank's place in the job
    facts = {p["pid"]: p for p in joined["otherData"]["processes"]}
    assert [(facts[r.pid].get("rank"), facts[r.pid].get("local_rank"),
             facts[r.pid].get("world_size")) for r in results] == [
        (None, None, None), (0, 0, 2), (1, 1, 2)]


def test_unfollowed_children_are_reported(tmp_path):
    job = tmp_path / "job"
    run_script(tmp_path, """
        import subprocess, sys, os
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        subprocess.run(["true"], check=True, timeout=60)
        subprocess.run([sys.executable, "-I", "-c", "pass"], check=True, timeout=60)
        subprocess.run([sys.executable, "-c", "pass"], env={"PATH": os.environ["PATH"]},
                       check=True, timeout=60)
        # (torch.compile's subprocesses set a PYTHONPATH of their own)
        subprocess.run([sys.executable, "-E", "-c", "pass"], check=True, timeout=60)
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60,
                       env={**os.environ, "PYTHONPATH": os.getcwd()})
        pytrace_cffi.stop()
    """, str(job))
    reasons = [(child["command"][0 if child["command"][0] == "true" else 1], child["reason"])
               for child in processes.unfollowed(job)]
    assert reasons == [("true", "not a Python interpreter"),
                       ("-I", "started with -I (no site / PYTHONPATH: the bootstrap cannot "
                              "load)"),
                       ("-c", "its environment was replaced without PYTRACE_CFFI_FOLLOW"),
                       ("-E", "started with -E (no site / PYTHONPATH: the bootstrap cannot "
                              "load)"),
                       ("-c", "its environment's PYTHONPATH lacks pytrace_cffi's bootstrap "
                              "directory (the bootstrap cannot load)")]
    assert len(processes.status(job)) == 1


def test_bootstrap_failure_leaves_the_child_running(tmp_path):
    env = _env(PYTRACE_CFFI_FOLLOW="{not json",
               PYTHONPATH=os.pathsep.join([processes.BOOT_DIR, os.environ.get("PYTHONPATH", ""),
                                           ROOT]))
    proc = subprocess.run([sys.executable, "-c", "import pytrace_cffi as p; print(p.is_tracing())"],
                          capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0 and proc.stdout == "False\n"
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pytrace_cffi: not tracing pid ")


def test_bootstrap_failure_is_noted_for_the_parent(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    config = json.dumps({"dir": str(job), "options": {"no_such_option": 1}, "package": ROOT})
    env = _env(PYTRACE_CFFI_FOLLOW=config,
               PYTHONPATH=os.pathsep.join([processes.BOOT_DIR, os.environ.get("PYTHONPATH", ""),
                                           ROOT]))
    proc = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True,
                          text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0 and proc.stdout == "ran\n"
    [noted] = processes.unfollowed(job)
    assert noted["pid"] == os.getpid() and noted["command"][1:] == ["-c", "print('ran')"]
    assert noted["reason"].startswith("its tracing failed to start (TypeError: start() got "
                                      "an unexpected keyword argument 'no_such_option'")


def test_bootstrap_chains_an_existing_sitecustomize(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.UNIQUE_SITE = 42\n")
    job = tmp_path / "job"
    config = json.dumps({"dir": str(job), "options": {"c_calls": True}, "package": ROOT})
    env = _env(PYTRACE_CFFI_FOLLOW=config,
               PYTHONPATH=os.pathsep.join([processes.BOOT_DIR, str(other),
                                           os.environ.get("PYTHONPATH", ""), ROOT]))
    proc = subprocess.run([sys.executable, "-c", "import pytrace_cffi as p; "
                           "print(UNIQUE_SITE, p.is_tracing())"],
                          capture_output=True, text=True, timeout=TIMEOUT, env=env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "42 True\n" and proc.stderr == ""
    [result] = processes.status(job)
    assert result.state == "complete" and result.label == "python -c"


def test_no_follow(tmp_path):
    out = tmp_path / "out.json"
    script = tmp_path / "prog.py"
    script.write_text("import os\npid = os.fork()\nif pid == 0:\n"
                      "    import pytrace_cffi\n    print(pytrace_cffi.is_tracing())\n"
                      "    os._exit(0)\nos.waitpid(pid, 0)\n")
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--no-follow", "-o",
                           str(out), str(script)], capture_output=True, text=True,
                          timeout=TIMEOUT, cwd=tmp_path, env=_env_own_tmp(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "False\n"
    assert os.listdir(tmp_path / "tmp") == []
    pids = {e["pid"] for e in json.loads(out.read_text())["traceEvents"]}
    assert len(pids) == 1


def test_follow_children_needs_output():
    with pytest.raises(ValueError, match="follow_children=True needs output"):
        pytrace_cffi.start(follow_children=True)
    with pytest.raises(TypeError, match="follow_children must be a bool"):
        pytrace_cffi.start(follow_children=1, output="x")
    assert not pytrace_cffi.is_tracing()


def test_run_follows_children_end_to_end(tmp_path):
    out = tmp_path / "out.json"
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import os, subprocess, sys
        def unique_main(): pass
        def unique_forked(): pass
        if __name__ == "__main__":
            unique_main()
            pid = os.fork()
            if pid == 0:
                for _ in range(50): unique_forked()
                os._exit(0)
            os.waitpid(pid, 0)
            subprocess.run([sys.executable, "-c",
                            "def unique_sub(): pass\\nfor _ in range(9): unique_sub()"],
                           check=True, timeout=60)
            subprocess.run(["true"], check=True, timeout=60)
            print(os.getpid(), pid)
    """))
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(out),
                           str(script)], capture_output=True, text=True, timeout=TIMEOUT,
                          cwd=tmp_path, env=_env_own_tmp(tmp_path))
    assert proc.returncode == 0, proc.stderr
    root, forked = map(int, proc.stdout.split())
    events = json.loads(out.read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert len(lanes) == 3 and lanes[root] == "prog.py" and lanes[forked] == "prog.py (fork)"
    [sub] = set(lanes) - {root, forked}
    assert lanes[sub] == "python -c"
    by_pid = collections.Counter((e["pid"], e["name"].rsplit(": ", 1)[-1]) for e in events
                                 if e.get("ph") == "X" and "unique_" in e["name"])
    assert by_pid == {(root, "unique_main"): 1, (forked, "unique_forked"): 50,
                      (sub, "unique_sub"): 9}
    start, *lines = proc.stderr.splitlines()
    assert start == f"pytrace_cffi: writing {out} ..."
    assert lines[0].startswith("pytrace_cffi: 3 processes, ") and re.search(
        rf" -> {re.escape(str(out))} \(\d+\.\d [kM]B, \d+\.\d\d s\)$", lines[0])
    assert sorted(line.split(":")[1].strip() for line in lines[1:4]) == sorted(
        f"pid {pid} ({lanes[pid]})" for pid in lanes)
    assert all("): complete, " in line for line in lines[1:4])
    assert lines[4] == "pytrace_cffi:   not followed (not Python): 1 program: true"
    assert len(lines) == 5
    # Joined and complete: the per-process directories are not left behind.
    assert os.listdir(tmp_path / "tmp") == []


# -- torch (3.11 venv) ---------------------------------------------------------

def _run_cli(tmp_path, *args, timeout=300):
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", *args], tmp_path, _env(),
                       timeout)
    assert proc.returncode == 0, proc.stderr
    return proc


def test_dataloader_workers_labelled(tmp_path):
    pytest.importorskip("torch")
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""
        import torch
        from torch.utils.data import DataLoader, Dataset
        def unique_getitem(i):
            return torch.tensor([float(i)])
        class Items(Dataset):
            def __len__(self): return 40
            def __getitem__(self, i): return unique_getitem(i)
        def unique_consume(batch): return len(batch)
        if __name__ == "__main__":
            n = sum(unique_consume(b) for b in DataLoader(Items(), batch_size=4, num_workers=2))
            print(n)
    """))
    out = tmp_path / "dl.json.gz"
    proc = _run_cli(tmp_path, "--include", "*/train.py", "-o", str(out), str(script))
    assert proc.stdout == "40\n"
    import gzip
    events = json.loads(gzip.open(out).read())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert sorted(lanes.values()) == ["DataLoader worker 0", "DataLoader worker 1", "train.py"]
    calls = collections.Counter((lanes[e["pid"]], e["name"].rsplit(": ", 1)[-1])
                                for e in events if e.get("ph") == "X")
    # Batches of 4 go to the workers in turn: each fetches 5 batches, 20 items.
    assert calls[("train.py", "unique_consume")] == 10
    for worker in ("DataLoader worker 0", "DataLoader worker 1"):
        assert calls[(worker, "unique_getitem")] == 20
        assert calls[(worker, "__getitem__")] == 20
    assert "DataLoader worker 0" in proc.stderr and "DataLoader worker 1" in proc.stderr
    assert "not followed" not in proc.stderr


def test_torchrun_ranks_labelled_and_aligned(tmp_path):
    pytest.importorskip("torch")
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("no torchrun beside this interpreter")
    script = tmp_path / "ddp.py"
    script.write_text(textwrap.dedent("""
        import torch
        import torch.distributed as dist
        def unique_step(model, opt, x):
            opt.zero_grad()
            model(x).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)
            opt.step()
        if __name__ == "__main__":
            dist.init_process_group("gloo")
            torch.manual_seed(dist.get_rank())
            model = torch.nn.Linear(8, 4)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(5):
                unique_step(model, opt, torch.randn(16, 8))
            dist.destroy_process_group()
    """))
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "ddp.json"
    proc = _run_cli(tmp_path, "--include", "*/ddp.py", "--include", "*/distributed_c10d.py",
                    "-o", str(out), torchrun, "--nproc_per_node", "2", "--master_port",
                    str(port), str(script))
    events = json.loads(out.read_text())["traceEvents"]
    lanes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    order = {e["pid"]: e["args"]["sort_index"] for e in events
             if e["name"] == "process_sort_index"}
    assert sorted(lanes.values(), key=lambda name: order[
        next(p for p in lanes if lanes[p] == name)]) == ["torchrun", "rank 0", "rank 1"]
    ranks = {name: pid for pid, name in lanes.items() if name.startswith("rank")}
    per_rank = {}
    for name, pid in ranks.items():
        mine = sorted((e for e in events if e.get("ph") == "X" and e["pid"] == pid),
                      key=lambda e: e["ts"])
        assert sum(e["name"].endswith(": unique_step") for e in mine) == 5
        per_rank[name] = [(e["ts"], e["ts"] + e["dur"]) for e in mine
                          if e["name"].endswith(": all_reduce")]
    # 5 steps x 2 parameters; each all_reduce ends on every rank after it began
    # on every rank (gloo's all_reduce waits for all of them).
    assert [len(v) for v in per_rank.values()] == [10, 10]
    for k in range(10):
        starts = [per_rank[r][k][0] for r in per_rank]
        ends = [per_rank[r][k][1] for r in per_rank]
        assert max(starts) <= min(ends), (k, per_rank)
    for name, pid in ranks.items():
        assert f"pid {pid} ({name}): complete" in proc.stderr
    assert "not followed" not in proc.stderr      # every launch answered: no false alarm


def test_posix_spawn_of_python(tmp_path):
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import os, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        pid = os.posix_spawn(sys.executable, [sys.executable, "-c",
                             "def unique_spawned(): pass\\nfor _ in range(21): unique_spawned()"],
                             os.environ)
        os.waitpid(pid, 0)
        pytrace_cffi.stop()
        print(pid)
    """, str(job))
    found = counts(job)
    assert found[int(proc.stdout)] == ("python -c", "complete", {"unique_spawned": 21})


def test_failed_start_leaves_nothing_behind(tmp_path):
    import threading
    job = tmp_path / "job"
    threading.setprofile(lambda *a: None)       # another tool's hook: start() refuses
    try:
        with pytest.raises(pytrace_cffi.TracerConflictError):
            pytrace_cffi.start(follow_children=True, output=str(job))
    finally:
        threading.setprofile(None)
    assert processes.ENV not in os.environ
    assert processes.BOOT_DIR not in os.environ.get("PYTHONPATH", "")
    assert os._exit is processes._real_exit
    assert os.listdir(job) == []


def test_join_warns_about_several_hosts(tmp_path):
    job = tmp_path / "job"
    run_script(tmp_path, """
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        subprocess.run([sys.executable, "-c", "pass"], check=True, timeout=60)
        pytrace_cffi.stop()
    """, str(job))
    [child] = [r for r in processes.status(job) if r.label == "python -c"]
    meta_path = os.path.join(child.directory, "meta.json")
    meta = json.loads(open(meta_path).read())
    meta["host"] = "elsewhere"
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    with pytest.warns(pytrace_cffi.TraceWarning, match="2 hosts.*aligned through"):
        processes.join(job, tmp_path / "same.json")
    # The other host's clocks: CLOCK_MONOTONIC 5 s behind, CLOCK_REALTIME the same.
    shift = 5_000_000_000
    for point in meta["realtime_anchor"].values():
        point["realtime_ns"] += shift
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    with pytest.warns(pytrace_cffi.TraceWarning, match="2 hosts"):
        processes.join(job, tmp_path / "shifted.json")

    def child_starts(name):
        with open(tmp_path / name, encoding="utf-8") as f:
            data = json.load(f)
        base = data["otherData"]["start_monotonic_ns"]
        return base, sorted(round(e["ts"] * 1000) + base for e in data["traceEvents"]
                            if e["ph"] == "X" and e["pid"] == child.pid)
    _, same = child_starts("same.json")
    _, shifted = child_starts("shifted.json")
    assert same and len(same) == len(shifted)
    assert all(abs(b - a - shift) <= 1 for a, b in zip(same, shifted))

    del meta["realtime_anchor"]
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    with pytest.warns(pytrace_cffi.TraceWarning, match="not aligned"):
        processes.join(job, tmp_path / "unaligned.json")


def test_run_to_a_directory_writes_the_whole_job(tmp_path):
    out = tmp_path / "outdir"
    script = tmp_path / "prog.py"
    script.write_text("import subprocess, sys\ndef unique_root(): pass\nunique_root()\n"
                      "subprocess.run([sys.executable, '-c', 'def unique_sub(): pass\\n"
                      "for _ in range(4): unique_sub()'], check=True, timeout=60)\n")
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(out),
                        str(script)], tmp_path, _env_own_tmp(tmp_path), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    # OUT is one saved trace of both processes (as `export JOB -o OUT` writes it).
    trace = pytrace_cffi.load(out)
    assert collections.Counter(call.name.rsplit(": ", 1)[-1] for call in trace
                               if ": unique_" in call.name) == {"unique_root": 1,
                                                                "unique_sub": 4}
    assert len(trace.threads) == 2
    # calls as the summary counts them: the frames running at a process's start are none
    open_at_start = sum(bool(slices[i].flags & lib.PT_SLICE_SEEDED)
                        for _, slices, n in trace.thread_slices() for i in range(n))
    assert proc.stderr.splitlines()[0] == f"pytrace_cffi: writing {out} ..."
    assert proc.stderr.splitlines()[1].startswith(
        f"pytrace_cffi: 2 processes, {len(trace) - open_at_start:,} calls -> {out} (")
    assert "stay in" not in proc.stderr
    assert os.listdir(tmp_path / "tmp") == []


FORKED_WORKERS = """
    import os, sys
    import pytrace_cffi
    def unique_work(): pass
    def unique_main():
        pids = []
        for _ in range(2):
            pid = os.fork()
            if pid == 0:
                unique_work()
                os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
    pytrace_cffi.start(follow_children=True, output=sys.argv[1])
    unique_main()
    pytrace_cffi.stop()
"""


def _short_rows(rows):
    """{function: (calls, total ns > 0)} of the prog.py rows of a summary."""
    return {row.name.rsplit(": ", 1)[1]: (row.calls, row.total_ns > 0)
            for row in rows if row.name.startswith("prog.py(")}


def test_forked_workers_continue_the_parents_frames_without_counting_them(tmp_path):
    """Each forked worker continues unique_main (and <module>) from its parent:
    drawn on its timeline, marked "open at start", not counted as calls again.
    <module> was already running when start() was called: no call anywhere."""
    from pytrace_cffi.render.html import write_html
    from pytrace_cffi.render.summary import process_totals, summarize
    job = tmp_path / "job"
    run_script(tmp_path, FORKED_WORKERS, str(job))
    expected = {"<module>": (0, True), "unique_main": (1, True), "unique_work": (2, True)}
    trace = read_trace(str(job))
    assert _short_rows(summarize(trace, limit=None)) == expected
    # The frames stay on each worker's timeline.
    slices = collections.Counter((trace.thread_pid(thread), thread.native_id,
                                  trace.names[array[i].key].rsplit(": ", 1)[-1])
                                 for thread, array, n in trace.thread_slices() for i in range(n))
    root = trace.pid
    workers = [pid for pid in trace.processes if pid != root]
    assert len(workers) == 2
    for pid in workers:
        assert {name: count for (p, _, name), count in slices.items()
                if p == pid and name in expected} == {"<module>": 1, "unique_main": 1,
                                                       "unique_work": 1}
    totals = {total.pid: total for total in process_totals(trace)}
    assert totals[root].open_at_start == 1                     # <module>
    assert all(totals[pid].open_at_start == 2 for pid in workers)
    assert sum(total.calls for total in totals.values()) == \
        sum(n for _, _, n in trace.thread_slices()) - 5
    # The same read back from the joined JSON, which marks those frames.
    out = tmp_path / "all.json"
    processes.join(job, out)
    events = json.loads(out.read_text())["traceEvents"]
    marked = collections.Counter((e["pid"] == root, e["name"].rsplit(": ", 1)[-1])
                                 for e in events if e.get("args", {}).get("open at start"))
    assert marked == {(True, "<module>"): 1, (False, "<module>"): 2, (False, "unique_main"): 2}
    assert _short_rows(summarize(read_trace(str(out)), limit=None)) == expected
    # The page's table and its per-process counts, and the summary command.
    page = tmp_path / "job.html"
    write_html(trace, page)
    meta = json.loads(re.search(r'<script type="application/json" id="pt-meta">(.*?)</script>',
                                page.read_text(), re.S).group(1))
    assert {row[0].rsplit(": ", 1)[1]: row[1] for row in meta["summary"]["rows"]
            if row[0].startswith("prog.py(")} == {name: calls for name, (calls, _)
                                                  in expected.items()}
    assert {p["pid"]: p["calls"] for p in meta["processes"]} == \
        {pid: total.calls for pid, total in totals.items()}
    # a click on one of those frames says so: the lanes know how many lead them
    assert {t["pid"]: t["open_at_start"] for t in meta["threads"]} == \
        {pid: total.open_at_start for pid, total in totals.items()}
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "summary", "--limit", "0",
                        str(job)], tmp_path, _env(), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"{job}: {meta['calls']:,} calls in 3 processes")
    assert [line.split()[0] for line in lines if line.endswith(": unique_main")] == ["1"]
    assert sum("(and 2 frames running at its start)" in line for line in lines) == 2


def test_fork_child_keeps_the_filters(tmp_path):
    job = tmp_path / "job"
    run_script(tmp_path, """
        import json, os, sys
        import pytrace_cffi
        def unique_leaf(): pass
        def unique_helper(): unique_leaf()
        pytrace_cffi.start(follow_children=True, output=sys.argv[1], include="*/prog.py",
                           c_calls=False)
        for _ in range(3): unique_helper()
        pid = os.fork()
        if pid == 0:
            for _ in range(7):
                unique_helper()
                json.dumps({})
            os._exit(0)
        os.waitpid(pid, 0)
        pytrace_cffi.stop()
    """, str(job))
    found = counts(job, marker="")
    assert sorted((dict(names) for _, _, names in found.values()),
                  key=lambda names: sum(names.values())) == [
        {"<module>": 1, "unique_helper": 3, "unique_leaf": 3},
        {"<module>": 1, "unique_helper": 7, "unique_leaf": 7}]


def test_sigkilled_child_with_threads_loses_at_most_a_chunk_per_thread(tmp_path):
    job = tmp_path / "job"
    proc = run_script(tmp_path, """
        import os, subprocess, sys, time
        import pytrace_cffi
        child = '''
        import sys, threading, time
        def unique_in_thread(i): return i
        def work():
            for i in range(4000): unique_in_thread(i)
        threads = [threading.Thread(target=work) for _ in range(2)]
        for t in threads: t.start()
        for t in threads: t.join()
        open(sys.argv[1], "w").close()
        time.sleep(600)
        '''
        pytrace_cffi.start(follow_children=True, output=sys.argv[1], max_events=8192,
                           c_calls=False)
        marker = sys.argv[1] + ".marker"
        p = subprocess.Popen([sys.executable, "-c", child.replace("\\n        ", "\\n"), marker])
        deadline = time.time() + 60
        while not os.path.exists(marker) and time.time() < deadline:
            time.sleep(0.01)
        p.kill()
        p.wait(timeout=30)
        pytrace_cffi.stop()
        print(p.pid)
    """, str(job))
    child = int(proc.stdout)
    [result] = [r for r in processes.status(job) if r.pid == child]
    assert result.state == "recovered"
    trace = processes.recover(result.directory)
    per_thread = collections.Counter(call.thread for call in trace
                                     if call.name.endswith(": unique_in_thread"))
    # Chunks of 1024 events: each worker thread keeps all but at most its last
    # chunk (512 calls); its calls were spilled chunk by chunk as it ran.
    assert len(per_thread) == 2, per_thread
    for n in per_thread.values():
        assert 4000 - 512 <= n <= 4000
    names = {t.name for t in trace.threads}
    assert all(name.startswith("thread ") for name in names)


def test_stop_while_threads_spill(tmp_path):
    """Threads filling chunks (each spill runs the key-names hook, which may let
    other threads run) while stop() comes: no crash, and no event counted as
    dropped (one recorded after the stop is no loss). Probabilistic: 20 rounds."""
    proc = run_script(tmp_path, """
        import shutil, sys, threading, time, warnings
        import pytrace_cffi
        warnings.simplefilter("error")
        def unique_spin(stop):
            while not stop.is_set():
                sum(range(20))
        for _ in range(20):
            shutil.rmtree(sys.argv[1], ignore_errors=True)
            stop = threading.Event()
            pytrace_cffi.start(follow_children=True, output=sys.argv[1], max_events=4096)
            threads = [threading.Thread(target=unique_spin, args=(stop,)) for _ in range(4)]
            for t in threads: t.start()
            time.sleep(0.02)
            trace = pytrace_cffi.stop()
            stop.set()
            for t in threads: t.join()
            assert trace.dropped_events == 0 and len(trace.load()) > 0
        print("ok")
    """, str(tmp_path / "job"))
    assert proc.stdout == "ok\n" and proc.stderr == ""


def test_sigkilled_child_with_regions_is_recovered(tmp_path):
    job = tmp_path / "job"
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent("""
        import sys, time
        import pytrace_cffi
        def unique_in_region(i): return i
        for i in range(3000):
            with pytrace_cffi.record_function("unique_region", {"i": i}):
                unique_in_region(i)
        open(sys.argv[1], "w").close()
        time.sleep(600)
    """))
    proc = run_script(tmp_path, """
        import os, subprocess, sys, time
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1], max_events=4096)
        marker = sys.argv[1] + ".marker"
        p = subprocess.Popen([sys.executable, sys.argv[2], marker])
        deadline = time.time() + 60
        while not os.path.exists(marker) and time.time() < deadline:
            time.sleep(0.01)
        p.kill()
        p.wait(timeout=30)
        pytrace_cffi.stop()
        print(p.pid)
    """, str(job), str(child))
    pid = int(proc.stdout)
    [result] = [r for r in processes.status(job) if r.pid == pid]
    assert result.state == "recovered", result
    trace = processes.recover(result.directory)
    regions = [call for call in trace if call.name == "unique_region"]
    functions = [call for call in trace if call.name.endswith(": unique_in_region")]
    # Chunks of 512 events, a region with its call and their built-ins ~10 events:
    # the chunk being filled is lost (all regions are kept when its boundary falls
    # just after the last one: where it falls moves with the length of the paths
    # imported); the last region kept may have been cut before its call.
    assert 3000 - 60 <= len(regions) <= 3000
    assert len(regions) - 1 <= len(functions) <= len(regions)


def test_sigterm_noted_while_the_main_thread_blocks_still_ends_the_child(tmp_path):
    """The race the C relay closes: SIGTERM lands when the main thread cannot run
    the Python handler (here: taken by another thread while the main thread waits
    in a multiprocessing semaphore, as an idle Pool worker does). Without the
    relay the child waits forever; with it the handler runs and saves."""
    job = tmp_path / "job"
    child = tmp_path / "child.py"
    child.write_text(textwrap.dedent("""
        import multiprocessing, signal, threading, time
        def unique_before(): pass
        unique_before()
        def poke():
            time.sleep(0.3)                 # the main thread is blocked by then
            signal.pthread_kill(threading.get_ident(), signal.SIGTERM)
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
            time.sleep(600)
        threading.Thread(target=poke, daemon=True).start()
        multiprocessing.Semaphore(0).acquire()
    """))
    proc = run_script(tmp_path, """
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        p = subprocess.Popen([sys.executable, sys.argv[2]])
        try:
            code = p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            code = "hung"
        pytrace_cffi.stop()
        print(p.pid, code)
    """, str(job), str(child))
    pid, code = proc.stdout.split()
    assert code == str(-signal.SIGTERM)
    found = counts(job)
    assert found[int(pid)] == ("child.py", "complete", {"unique_before": 1})


def _job_with_one_child(tmp_path):
    """A job's trace directory: prog.py, and a `python -c` child calling unique_child."""
    job = tmp_path / "job"
    run_script(tmp_path, """
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(follow_children=True, output=sys.argv[1])
        subprocess.run([sys.executable, "-c", "def unique_child(): pass\\nunique_child()"],
                       check=True, timeout=60)
        pytrace_cffi.stop()
    """, str(job))
    return job


def test_merge_command_joins_a_job(tmp_path):
    job = _job_with_one_child(tmp_path)
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "merge", str(job), "-o",
                        str(tmp_path / "all.json")], tmp_path, _env(), TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert "2 processes ->" in proc.stderr
    with open(tmp_path / "all.json", encoding="utf-8") as f:
        events = json.load(f)["traceEvents"]
    lanes = {e["args"]["name"] for e in events if e.get("name") == "process_name"}
    assert "python -c" in lanes and len(lanes) == 2
    assert sum(e["ph"] == "X" and e["name"].endswith(": unique_child") for e in events) == 1


def test_summary_and_export_read_a_whole_job(tmp_path):
    job = _job_with_one_child(tmp_path)
    from pytrace_cffi.reading import read_trace
    trace = read_trace(job)
    assert sum(call.name.endswith(": unique_child") for call in trace) == 1
    assert sum(call.name.startswith("prog.py(") and call.name.endswith(": <module>")
               for call in trace) == 1
    # Each thread under its own process, which says whose it is.
    assert [thread.name for thread in trace.threads] == ["MainThread", "MainThread"]
    assert [trace.processes[trace.thread_pid(thread)]["label"] for thread in trace.threads] \
        == ["prog.py", "python -c"]
    command = [sys.executable, "-m", "pytrace_cffi"]
    proc = run_command(command + ["summary", str(job), "--limit", "0"], tmp_path, _env(),
                       TIMEOUT)
    assert proc.returncode == 0 and ": unique_child" in proc.stdout, proc.stderr
    proc = run_command(command + ["export", str(job), "-o", str(tmp_path / "job.html")],
                       tmp_path, _env(), TIMEOUT)
    assert proc.returncode == 0 and (tmp_path / "job.html").stat().st_size > 0, proc.stderr
    proc = run_command(command + ["merge", str(job), "-o", str(tmp_path / "m.html")],
                       tmp_path, _env(), TIMEOUT)
    assert proc.returncode == 0 and "2 processes ->" in proc.stderr, proc.stderr


# --- `run` of a program that execs ------------------------------------------------

def _run_exec(tmp_path, source, out_name="out.json", extra=()):
    """`run -o OUT prog.py` with its own temporary directory, so the job directory
    it leaves (if any) can be seen; (process, OUT path, what is left in TMPDIR)."""
    (tmp_path / "prog.py").write_text(textwrap.dedent(source))
    (tmp_path / "work.py").write_text(textwrap.dedent("""
        import os, sys
        def unique_work(): pass
        for _ in range(5): unique_work()
        if len(sys.argv) > 1:               # exec on, once more
            os.execv(sys.executable, [sys.executable, "work.py"])
        print("work done")
        sys.exit(3)
    """))
    proc = run_command([sys.executable, "-m", "pytrace_cffi", "run", *extra, "-o", out_name,
                        "prog.py"], tmp_path, _env_own_tmp(tmp_path), TIMEOUT)
    return proc, tmp_path / out_name, sorted(os.listdir(tmp_path / "tmp"))


def _calls_per_process(path):
    """{lane: (OS pid, label, Counter of unique_* functions)} of a joined or
    one-process OUT."""
    trace = read_trace(str(path))
    lanes = trace.processes or {trace.pid: {"label": None}}
    pid_of_tid = {t.native_id: trace.thread_pid(t) for t in trace.threads}
    out = {}
    for call in trace:
        name = call.name.rsplit(": ", 1)[-1]
        if name.startswith("unique_"):
            lane = pid_of_tid[call.thread]
            info = lanes[lane]
            entry = out.setdefault(lane, (info.get("os_pid", lane), info["label"],
                                          collections.Counter()))
            entry[2][name] += 1
    return out


def test_run_of_a_program_that_execs_python_writes_out_from_the_new_image(tmp_path):
    """The process running `run` is replaced by an exec: the new image (followed)
    finishes the run at its exit: OUT holds both images (and a second exec's),
    the temporary job directory is gone, the program's exit code is kept."""
    proc, out, left = _run_exec(tmp_path, """
        import os, sys
        def unique_launch(): pass
        unique_launch()
        os.execv(sys.executable, [sys.executable, "work.py", "again"])
    """)
    assert proc.returncode == 3, proc.stderr
    assert "work done" in proc.stdout
    assert "3 processes" in proc.stderr and str(out.name) in proc.stderr
    found = list(_calls_per_process(out).values())
    assert len({pid for pid, _, _ in found}) == 1       # one OS process, three images
    assert [(label, names) for _, label, names in found] == [
        ("prog.py", {"unique_launch": 1}), ("work.py", {"unique_work": 5}),
        ("work.py", {"unique_work": 5})]
    assert left == []


@pytest.mark.parametrize("call", [
    "os.execvp(sys.executable, [sys.executable, 'work.py'])",
    # an environment of its own (which os.execve reads before any audit hook runs)
    "os.execve(sys.executable, [sys.executable, 'work.py'], dict(os.environ, MORE='1'))"])
def test_run_of_a_program_that_execs_python_to_html(tmp_path, call):
    proc, out, left = _run_exec(tmp_path, f"""
        import os, sys
        def unique_launch(): pass
        unique_launch()
        {call}
    """, out_name="out.html")
    assert proc.returncode == 3, proc.stderr
    assert out.stat().st_size > 1000 and left == []
    assert "2 processes" in proc.stderr


@pytest.mark.parametrize("how", ["not python", "environment replaced"])
def test_run_of_a_program_that_execs_an_unfollowed_program_writes_out_first(tmp_path, how):
    """The new image will not be followed: OUT is written before the exec."""
    target = ('"/bin/sh", ["sh", "-c", "echo from sh"]' if how == "not python" else
              'sys.executable, [sys.executable, "work.py"], {"PATH": os.environ["PATH"]}')
    call = "execv" if how == "not python" else "execve"
    proc, out, left = _run_exec(tmp_path, f"""
        import os, sys
        def unique_launch(): pass
        unique_launch()
        os.{call}({target})
    """)
    assert ("from sh" if how == "not python" else "work done") in proc.stdout
    assert "not followed" in proc.stderr
    assert [names for _, _, names in _calls_per_process(out).values()] == \
        [{"unique_launch": 1}]
    assert left == []


def test_a_forked_child_that_execs_does_not_finish_the_run(tmp_path):
    """Only the process running `run` owes its finish: a fork of it that execs
    hands nothing over, and the run finishes when the program ends."""
    proc, out, left = _run_exec(tmp_path, """
        import os, sys
        def unique_launch(): pass
        unique_launch()
        pid = os.fork()
        if pid == 0:
            os.execv(sys.executable, [sys.executable, "work.py"])
        os.waitpid(pid, 0)
        def unique_after(): pass
        unique_after()
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(" -> ") == 1       # OUT written once, by the run
    counted = collections.Counter()
    for _, _, names in _calls_per_process(out).values():
        counted.update(names)
    assert counted == {"unique_launch": 1, "unique_work": 5, "unique_after": 1}
    assert left == []


@pytest.mark.parametrize("follow", [True, False])
@pytest.mark.parametrize("ending", ["os._exit", "exec", "SIGTERM"])
def test_run_writes_out_when_the_program_ends_without_returning(tmp_path, follow, ending):
    """os._exit, an exec (of a program not followed) or SIGTERM (no handler of the
    program's) end the process running `run` without returning to it: OUT is
    written first, and the process still ends as the program made it end."""
    ends = {"os._exit": "os._exit(4)",
            "exec": 'os.execv("/bin/sh", ["sh", "-c", "echo from sh; exit 5"])',
            "SIGTERM": "os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)"}
    proc, out, left = _run_exec(tmp_path, f"""
        import os, signal, sys, time
        def unique_before(): pass
        unique_before()
        {ends[ending]}
    """, extra=() if follow else ("--no-follow",))
    assert proc.returncode == {"os._exit": 4, "exec": 5, "SIGTERM": -signal.SIGTERM}[ending], \
        proc.stderr
    assert proc.stderr.count(" -> ") == 1, proc.stderr
    assert [names for _, _, names in _calls_per_process(out).values()] == \
        [{"unique_before": 1}]
    assert left == []


def test_start_with_an_output_file_in_a_program_that_execs_python(tmp_path):
    """start(output=FILE, follow_children=True) in a program that execs python:
    its trace is saved at the exec and FILE written by the new image at its exit
    (as `run` does), with both images' calls, not written at the exec with the
    first image's alone; the temporary job directory is gone."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import os, sys
        import pytrace_cffi
        pytrace_cffi.start(output="out.json", follow_children=True)
        def unique_launch(): pass
        unique_launch()
        os.execv(sys.executable, [sys.executable, "work.py"])
    """))
    (tmp_path / "work.py").write_text(textwrap.dedent("""
        import sys
        def unique_work(): pass
        for _ in range(5): unique_work()
        print("work done")
        sys.exit(3)
    """))
    proc = run_command([sys.executable, "prog.py"], tmp_path, _env_own_tmp(tmp_path), TIMEOUT)
    assert proc.returncode == 3, proc.stderr
    assert "work done" in proc.stdout
    assert proc.stderr.count(" -> ") == 1 and "2 processes" in proc.stderr, proc.stderr
    assert sorted(sorted(names) for _, _, names in _calls_per_process(tmp_path / "out.json")
                  .values()) == [["unique_launch"], ["unique_work"]]
    assert os.listdir(tmp_path / "tmp") == []


def test_start_with_processes_dir_writes_a_directory_output_as_one_saved_trace(tmp_path):
    """processes_dir with output=DIR: DIR is written at stop() as one saved trace
    of the job (not used as the job's directory); processes_dir=PATH keeps the
    per-process traces there, True in a temporary directory that goes."""
    (tmp_path / "tmp").mkdir()
    (tmp_path / "prog.py").write_text(textwrap.dedent("""
        import subprocess, sys
        import pytrace_cffi
        pytrace_cffi.start(output=sys.argv[1], follow_children=True,
                           processes_dir=True if sys.argv[2] == "temporary" else sys.argv[2])
        def unique_parent(): pass
        unique_parent()
        subprocess.run([sys.executable, "-c", "def unique_child(): pass\\nunique_child()"])
        result = pytrace_cffi.stop()
        print("RESULT", type(result).__name__, result.written)
    """))
    for out, kept in (("saved", "temporary"), ("saved2", "procs")):
        proc = run_command([sys.executable, "prog.py", out, kept], tmp_path,
                           _env_own_tmp(tmp_path), TIMEOUT)
        assert proc.returncode == 0, proc.stderr
        assert "RESULT WrittenTrace True" in proc.stdout, proc.stderr
        assert (tmp_path / out / "meta.json").is_file()
        assert not list((tmp_path / out).glob("proc-*"))
        assert sorted(sorted(names) for _, _, names in _calls_per_process(tmp_path / out)
                      .values()) == [["unique_child"], ["unique_parent"]]
    assert os.listdir(tmp_path / "tmp") == []
    assert len(list((tmp_path / "procs").glob("proc-*"))) == 2


def test_run_of_a_program_whose_exec_fails_still_writes_out(tmp_path):
    """An exec that fails after the finish was handed over (a followed-looking
    program that cannot run): the process goes on, untraced, and writes OUT with
    what was traced before the exec at its exit."""
    broken = tmp_path / "python-broken"
    broken.write_text("not a program\n")
    broken.chmod(0o755)
    proc, out, left = _run_exec(tmp_path, """
        import os
        def unique_launch(): pass
        unique_launch()
        try:
            os.execv("./python-broken", ["./python-broken"])
        except OSError as exc:
            print("exec failed:", exc.errno)
    """)
    assert proc.returncode == 0, proc.stderr
    assert "exec failed" in proc.stdout
    assert proc.stderr.count(" -> ") == 1 and "no window was traced" not in proc.stderr
    assert [names for _, _, names in _calls_per_process(out).values()] == \
        [{"unique_launch": 1}]
    assert left == []


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
@pytest.mark.parametrize("options", ["output=sys.argv[1] + '/out.json'",
                                     "output=sys.argv[1] + '/out.pftrace'",
                                     "flight_recorder='1M', dumps_dir=sys.argv[1] + '/dumps'"])
def test_a_session_that_does_not_follow_children_leaves_a_forked_child_untraced(tmp_path,
                                                                             options):
    """start(output=FILE) and a flight recorder record into a job of their own;
    without follow_children a child forked meanwhile stops tracing, as any
    session's (it may start its own), and FILE holds the parent alone. They went
    on tracing the child (2 processes in FILE; `run --no-follow -o x.pftrace`
    too; Pool workers' SIGTERM dumps)."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(f"""
        import os, sys
        import pytrace_cffi
        pytrace_cffi.start({options})
        def unique_child(): pass
        pid = os.fork()
        if pid == 0:
            print(pytrace_cffi.is_tracing())
            pytrace_cffi.start()
            unique_child()
            print(len([c for c in pytrace_cffi.stop() if c.name.endswith("unique_child")]))
            sys.stdout.flush()
            os._exit(0)
        os.waitpid(pid, 0)
        pytrace_cffi.stop()
    """))
    proc = subprocess.run([sys.executable, str(script), str(tmp_path)], capture_output=True,
                          text=True, timeout=TIMEOUT, cwd=tmp_path, env=_env_own_tmp(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "False\n1\n"
    if "output" in options:
        out = tmp_path / ("out.json" if "json" in options else "out.pftrace")
        assert "2 processes" not in proc.stderr
        assert "unique_child" not in {c.name.rsplit(": ", 1)[-1] for c in pytrace_cffi.load(out)}


@pytest.mark.parametrize("change", ["set", "appended", "untouched"])
def test_stop_keeps_what_the_program_set_in_the_environment(tmp_path, monkeypatch, change):
    """Following children puts our bootstrap on PYTHONPATH (and PYTRACE_CFFI_FOLLOW)
    until stop(); a value the program set meanwhile stays, less our entry (stop()
    put back the value from before start(), the program's own lost)."""
    from pytrace_cffi.follow.identity import ENV
    monkeypatch.setenv("PYTHONPATH", "/opt/before")
    monkeypatch.delenv(ENV, raising=False)
    pytrace_cffi.start(follow_children=True, output=str(tmp_path / "job"))
    try:
        assert os.environ["PYTHONPATH"].endswith(os.pathsep + "/opt/before")
        if change == "set":
            os.environ["PYTHONPATH"] = "/opt/plugins"
        elif change == "appended":
            os.environ["PYTHONPATH"] += os.pathsep + "/opt/plugins"
    finally:
        pytrace_cffi.stop()
    assert os.environ["PYTHONPATH"] == {
        "set": "/opt/plugins", "appended": os.pathsep.join(["/opt/before", "/opt/plugins"]),
        "untouched": "/opt/before"}[change]
    assert ENV not in os.environ


def test_a_rank_without_rank_variables_is_labelled_by_its_process_group(monkeypatch):
    """mp.spawn's ranks (torch.multiprocessing) set no RANK: a process whose program
    made torch.distributed's default group is labelled by it, "rank N" (it was
    SpawnProcess-N+1)."""
    import types
    from pytrace_cffi.follow import identity
    group = types.SimpleNamespace(is_available=lambda: True, is_initialized=lambda: True,
                                  get_rank=lambda: 3, get_world_size=lambda: 4)
    monkeypatch.setitem(sys.modules, "torch.distributed", group)
    monkeypatch.delenv("RANK", raising=False)
    facts = identity.process_facts()
    assert (facts["label"], facts["rank"], facts["world_size"]) == ("rank 3", 3, 4)
    group.is_initialized = lambda: False
    assert not identity.process_facts()["label"].startswith("rank")

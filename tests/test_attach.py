"""python -m pytrace_cffi attach PID: tracing a running process through
sys.remote_exec (CPython 3.14+), then `attach PID --stop`; and the refusals."""
import os
import subprocess
import sys
import textwrap
import time

import pytest

import pytrace_cffi

needs_remote_exec = pytest.mark.skipif(
    sys.version_info < (3, 14),
    reason="attach needs sys.remote_exec (CPython 3.14+); this is "
           f"{sys.version_info[0]}.{sys.version_info[1]}")

# A server (its main thread back in Python every 50 ms, where sys.remote_exec's
# script runs): one request a line on stdin, its answer a line on stdout; at the end
# its sys.path and whether it imported pytrace_cffi by itself (it never does).
SERVER = textwrap.dedent("""
    import select, sys, threading, time
    START = sys.path[:]

    def parse(line):
        return int(line)

    def render(n):
        return f"{n} squared is {n * n}"

    def handle(line):
        return render(parse(line))

    def ticker(stop):
        while not stop.wait(0.002):
            sum(range(10))

    stop = threading.Event()
    threading.Thread(target=ticker, args=(stop,), name="ticker").start()
    print("ready", flush=True)
    while True:     # as socketserver's serve_forever: back in Python every 50 ms
        if not select.select([sys.stdin], [], [], 0.05)[0]:
            continue
        line = sys.stdin.readline()
        if line.strip() in ("quit", ""):
            break
        print(handle(line), flush=True)
    stop.set()
    print("path", sys.path == START, flush=True)
    sys.exit(3)
""")


def attach(*args, user=None, timeout=60):
    return subprocess.run([sys.executable, "-m", "pytrace_cffi", "attach", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout,
                          user=user)


class Server:
    def __init__(self, tmp_path, *python_args, env=None):
        path = tmp_path / "server.py"
        path.write_text(SERVER)
        # (no PYTHONPATH of ours: attach puts the package's directory on its path)
        environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        environ.update(env or {})
        self.proc = subprocess.Popen([sys.executable, *python_args, str(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True, cwd=tmp_path,
                                     env=environ)
        assert self.proc.stdout.readline() == "ready\n"
        self.pid = self.proc.pid

    def ask(self, n):
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline()

    def finish(self):
        out, err = self.proc.communicate("quit\n", timeout=30)
        return self.proc.returncode, out, err

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.communicate()


@pytest.fixture
def server(tmp_path):
    s = Server(tmp_path)
    yield s
    s.kill()


def calls_named(trace, name):
    return [c for c in trace if c.name.endswith(f": {name}")]


@needs_remote_exec
def test_attach_then_stop_has_every_call_and_the_server_goes_on(server, tmp_path):
    assert server.ask(1) == "1 squared is 1\n"
    out = tmp_path / "attached.json"
    started = attach(server.pid, "-o", out)
    assert started.returncode == 0, started.stderr
    assert f"attach {server.pid} --stop" in started.stderr
    answers = [server.ask(n) for n in range(2, 32)]         # 30 requests while traced
    # our thread in the target: OS-named pytrace_cffi
    names = {open(f"/proc/{server.pid}/task/{t}/comm").read().strip()
             for t in os.listdir(f"/proc/{server.pid}/task")}
    assert "pytrace_cffi" in names
    stopped = attach(server.pid, "--stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"-> {out}" in stopped.stderr
    assert server.ask(40) == "40 squared is 1600\n"
    code, rest, err = server.finish()
    assert answers == [f"{n} squared is {n * n}\n" for n in range(2, 32)]
    assert (code, rest, err) == (3, "path True\n", "")      # exit, output, sys.path unchanged
    trace = pytrace_cffi.load(str(out))
    for name in ("handle", "parse", "render"):
        assert len(calls_named(trace, name)) == 30, name
    assert {t.name for t in trace.threads} == {"MainThread", "ticker"}
    assert not any("attach" in c.name for c in trace)      # nothing of ours


@needs_remote_exec
def test_attach_for_a_duration_while_requests_flow(server, tmp_path):
    out = tmp_path / "attached.pftrace"
    proc = subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "attach", str(server.pid),
                             "--duration", "2", "-o", str(out)], stderr=subprocess.PIPE,
                            text=True)
    answers, n = [], 0
    while proc.poll() is None:
        n += 1
        answers.append(server.ask(n))
        time.sleep(0.005)
    err = proc.stderr.read()
    assert proc.returncode == 0, err
    assert "(--duration reached)" in err
    assert answers == [f"{i} squared is {i * i}\n" for i in range(1, n + 1)]
    assert server.finish() == (3, "path True\n", "")
    trace = pytrace_cffi.load(str(out))
    handles = calls_named(trace, "handle")
    assert 0 < len(handles) <= n
    # each request traced whole: every handle has its parse and render
    whole = [h for h in handles if h.start_ns > trace.start_ns and h.end_ns < trace.stop_ns]
    assert len(calls_named(trace, "parse")) >= len(whole)
    assert len(calls_named(trace, "render")) >= len(whole)


@needs_remote_exec
def test_attach_a_flight_recorder_then_dump_it(server, tmp_path):
    out = tmp_path / "ring.pftrace"
    started = attach(server.pid, "--flight-recorder", "-o", out)
    assert started.returncode == 0, started.stderr
    server.ask(6)
    dumped = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", str(server.pid)],
                            capture_output=True, text=True, timeout=60)
    assert dumped.returncode == 0, dumped.stdout + dumped.stderr
    assert str(tmp_path / "ring-dumps") in dumped.stdout       # beside OUT, as run's
    server.ask(7)
    stopped = attach(server.pid, "--stop")
    assert stopped.returncode == 0
    # the recorder's line on its dump: said by attach, not on the program's stderr
    assert "flight recorder dump (request) -> " in stopped.stderr
    assert server.finish() == (3, "path True\n", "")
    assert len(calls_named(pytrace_cffi.load(str(out)), "handle")) == 2
    dump_dirs = [d for d in os.listdir(tmp_path / "ring-dumps") if not d.startswith(".")]
    assert len(dump_dirs) == 1
    assert len(calls_named(pytrace_cffi.load(str(tmp_path / "ring-dumps" / dump_dirs[0])),
                           "handle")) == 1


@needs_remote_exec
def test_a_fork_of_the_attached_process_leaves_its_trace_alone(tmp_path):
    prog = tmp_path / "forker.py"
    prog.write_text(textwrap.dedent("""
        import os, select, sys
        def child_work():
            return 1
        print("ready", flush=True)
        while not select.select([sys.stdin], [], [], 0.05)[0]:
            pass
        sys.stdin.readline()
        pid = os.fork()
        if pid == 0:
            child_work()
            sys.exit(0)                 # its exit runs the atexit handlers
        os.waitpid(pid, 0)
        print("forked", flush=True)
        sys.stdin.readline()
    """))
    proc = subprocess.Popen([sys.executable, str(prog)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        out = tmp_path / "parent.json"
        assert attach(proc.pid, "-o", out).returncode == 0
        proc.stdin.write("fork\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "forked\n"
        stopped = attach(proc.pid, "--stop")
        assert stopped.returncode == 0, stopped.stderr
        assert f"-> {out}" in stopped.stderr
        rest, err = proc.communicate("end\n", timeout=30)
        assert (proc.returncode, rest, err) == (0, "", "")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@needs_remote_exec
def test_attach_twice_is_refused_and_the_first_goes_on(server, tmp_path):
    assert attach(server.pid, "-o", tmp_path / "first.json").returncode == 0
    second = attach(server.pid, "-o", tmp_path / "second.json")
    assert second.returncode == 1
    assert "already being traced" in second.stderr
    server.ask(5)
    assert attach(server.pid, "--stop").returncode == 0
    assert not (tmp_path / "second.json").exists()
    trace = pytrace_cffi.load(str(tmp_path / "first.json"))
    assert len(calls_named(trace, "handle")) == 1
    # The main thread holds the program's calls only: not begin()'s own work once
    # the hooks were live (its status file, time.time, the watcher's Event.set), nor
    # the second attach's script (<string>, sysconfig.get_config_var, ...). Its
    # one request: readline (and its decode), strip, handle, parse, render, print;
    # select.select polls meanwhile.
    main = [t.native_id for t in trace.threads if t.name == "MainThread"]
    names = {c.name.rsplit(": ", 1)[-1] for c in trace if [c.thread] == main}
    assert names - {"select.select"} == {
        "<module>", "_io.TextIOWrapper.readline", "decode", "_codecs.utf_8_decode",
        "str.strip", "handle", "parse", "render", "builtins.print"}, names
    assert server.finish() == (3, "path True\n", "")
    # and again, once stopped
    assert attach(server.pid, "--stop").returncode != 0


@needs_remote_exec
def test_a_process_that_exits_meanwhile_still_writes(server, tmp_path):
    out = tmp_path / "attached.json"
    proc = subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "attach", str(server.pid),
                             "--duration", "30", "-o", str(out)], stderr=subprocess.PIPE,
                            text=True)
    deadline = time.monotonic() + 20
    while not _attached(server.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    server.ask(7)
    assert server.finish() == (3, "path True\n", "")       # its exit code stays its own
    err = proc.communicate(timeout=30)[1]
    assert proc.returncode == 0, err
    assert "(the process exited)" in err
    assert len(calls_named(pytrace_cffi.load(str(out)), "handle")) == 1


def _attached(pid):
    from pytrace_cffi.cli.attach import attach_dir
    return os.path.exists(os.path.join(attach_dir(pid), "session.json"))


@needs_remote_exec
def test_a_process_that_exits_before_attaching(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    result = attach(proc.pid, "-o", tmp_path / "x.json")
    assert result.returncode != 0
    assert f"no process {proc.pid}" in result.stderr


@needs_remote_exec
def test_a_pid_that_is_not_python(tmp_path):
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        result = attach(sleeper.pid, "-o", tmp_path / "x.json")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode != 0
    assert "is not a CPython 3." in result.stderr, result.stderr
    assert "Traceback" not in result.stderr


@needs_remote_exec
def test_without_permission(server, tmp_path):
    if os.getuid() == 0:        # the attacher as nobody; the server is root's
        import shutil
        import tempfile
        out_dir = tempfile.mkdtemp(prefix="pytrace_cffi-test-nobody-")
        os.chmod(out_dir, 0o777)
        try:
            result = attach(server.pid, "-o", os.path.join(out_dir, "x.json"), user=65534)
        finally:
            shutil.rmtree(out_dir)
    else:
        result = attach(1, "-o", tmp_path / "x.json")
    assert result.returncode != 0
    assert "no permission to attach" in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert server.finish() == (3, "path True\n", "")


def _attach_to_an_idle(python, tmp_path):
    """attach's result on an idle loop run by another interpreter, killed after."""
    proc = subprocess.Popen([python, "-c", "import time\nprint('ready', flush=True)"
                             "\nwhile True: time.sleep(0.01)"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "ready\n"
        return attach(proc.pid, "-o", tmp_path / "x.json")
    finally:
        proc.kill()
        proc.wait()


@needs_remote_exec
def test_another_minor_version_is_refused(tmp_path):
    import shutil
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    other = next((v for v in ("3.14", "3.15") if v != mine and shutil.which(f"python{v}")),
                 None)
    if other is None:
        pytest.skip("needs a second CPython 3.14+ of another minor version")
    result = _attach_to_an_idle(f"python{other}", tmp_path)
    assert result.returncode != 0
    assert f"run attach with the target's own Python version (python{other} -m" in result.stderr


@needs_remote_exec
def test_a_target_before_3_14_is_told_apart(tmp_path):
    import shutil
    older = next((v for v in ("3.13", "3.12", "3.11", "3.10", "3.9") if shutil.which(
        f"python{v}") and subprocess.run([f"python{v}", "-c", ""], capture_output=True)
        .returncode == 0), None)
    if older is None:
        pytest.skip("needs a CPython 3.9-3.13 on PATH")
    result = _attach_to_an_idle(f"python{older}", tmp_path)
    assert result.returncode != 0
    assert f"it runs Python {older}, and attach needs 3.14+ in the target" in result.stderr
    assert "pytrace_cffi run" in result.stderr


@needs_remote_exec
@pytest.mark.parametrize("how", [("-X", "disable-remote-debug"),
                                 {"PYTHON_DISABLE_REMOTE_DEBUG": "1"}])
def test_remote_debugging_disabled_is_refused(tmp_path, how):
    server = (Server(tmp_path, *how) if isinstance(how, tuple) else Server(tmp_path, env=how))
    try:
        result = attach(server.pid, "-o", tmp_path / "x.json")
        assert result.returncode != 0
        assert "remote debugging disabled" in result.stderr, result.stderr
        assert server.finish() == (3, "path True\n", "")
    finally:
        server.kill()


@needs_remote_exec
def test_a_target_blocked_in_c_is_said_and_cancelled(tmp_path):
    prog = tmp_path / "sleeper.py"
    prog.write_text("import sys\nprint('ready', flush=True)\nsys.stdin.readline()\n"
                    "print('woke', flush=True)\n")
    proc = subprocess.Popen([sys.executable, str(prog)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    result = attach(proc.pid, "-o", tmp_path / "x.json", "--wait", "0.3")   # read() blocks
    out, err = proc.communicate("go\n", timeout=30)
    assert result.returncode == 1
    assert "blocked in C code" in result.stderr and "cancelled" in result.stderr
    assert (proc.returncode, out, err) == (0, "woke\n", "")
    assert not (tmp_path / "x.json").exists()
    from pytrace_cffi.cli.attach import attach_dir
    assert not os.path.exists(attach_dir(proc.pid))       # nothing left behind


@pytest.mark.skipif(sys.version_info >= (3, 14), reason="3.14+ attaches")
def test_before_3_14_attach_says_what_is_needed(tmp_path):
    result = attach(os.getpid(), "-o", tmp_path / "x.json")
    assert result.returncode != 0
    assert "needs CPython 3.14+" in result.stderr
    assert "pytrace_cffi run" in result.stderr and "--flight-recorder" in result.stderr

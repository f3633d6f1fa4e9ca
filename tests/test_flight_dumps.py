"""Flight recorder dumps read back and written as traces: load() of a dump
directory and of one process's dump, dump_format (start(), run --dump-format,
`dump --format` / `-o`), where dumps go by default, and damaged dumps.
Expected call counts are literals: fib(n) makes 2 * F(n + 1) - 1 calls."""
import collections
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pytrace_cffi
from pytrace_cffi.options import default_dumps_dir

from test_children import ROOT, TIMEOUT, _env_own_tmp, run_command
from test_flight_recorder import SLEEPING_JOB, dump_job_once_registered

FIB_CALLS = {12: 465, 14: 1219}


def _run(tmp_path, source, *args, name="prog.py"):
    script = tmp_path / name
    script.write_text(textwrap.dedent(source).lstrip("\n"))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    proc = run_command([sys.executable, str(script), *map(str, args)], tmp_path, env, TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    return proc


def _fib_calls(trace):
    return sum(1 for call in trace if call.name.endswith(": fib"))


def _open_calls(trace):
    return sum(open_at_stop for _, _, open_at_stop, _ in trace.thread_counts())


def _names(trace):
    return collections.Counter(call.name for call in trace)


DUMPS_ONCE = """
import sys
import pytrace_cffi

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1],
                   dump_format=sys.argv[2] if len(sys.argv) > 2 else None)
fib(14)
print(pytrace_cffi.dump(reason="checkpoint"))
pytrace_cffi.stop()
"""


def _dump_once(tmp_path, *args):
    """(DUMPDIR, its one process dump) of DUMPS_ONCE."""
    proc = _run(tmp_path, DUMPS_ONCE, tmp_path / "dumps", *args)
    process_dump = proc.stdout.split()[0]
    return os.path.dirname(process_dump), process_dump


@pytest.fixture(scope="module")
def one_dump(tmp_path_factory):
    return _dump_once(tmp_path_factory.mktemp("one"))


def test_load_reads_a_dump_directory_and_one_process_dump(one_dump):
    dump_dir, process_dump = one_dump
    assert os.path.basename(process_dump) == f"proc-{os.path.basename(process_dump)[5:]}"
    for path in (dump_dir, process_dump):
        trace = pytrace_cffi.load(path)
        assert _fib_calls(trace) == FIB_CALLS[14]
        # the module's code was running at the dump: open (dump() is ours, left out)
        assert len(trace) == FIB_CALLS[14] + 1 and _open_calls(trace) == 1
        assert [p["label"] for p in trace.processes.values()] == ["prog.py"]
        assert [p["state"] for p in trace.processes.values()] == ["dumped"]


def test_a_dump_names_the_task_lanes_of_log_async(tmp_path):
    """A task's lane has no thread ident: the dump names it as stop() does, from
    the recorder's journal, also when the dump is taken inside the task."""
    source = """
        import asyncio, sys
        import pytrace_cffi

        async def worker(n):
            for _ in range(2):
                await asyncio.sleep(0)
            if n == 2:
                print(pytrace_cffi.dump(reason="inside"))
            return n

        async def main():
            return await asyncio.gather(asyncio.create_task(worker(1), name="alpha"),
                                        asyncio.create_task(worker(2), name="beta"))

        pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1], log_async=True)
        asyncio.run(main())
        pytrace_cffi.stop()
    """
    proc = _run(tmp_path, source, tmp_path / "dumps")
    trace = pytrace_cffi.load(proc.stdout.split()[0])
    names = {t.native_id: t.name for t in trace.threads}
    workers = collections.Counter(names[call.thread] for call in trace
                                  if call.name.endswith(": worker"))
    # alpha's three steps; beta's third step is the one dumping (open at the dump)
    assert workers == {"task alpha": 3, "task beta": 3}
    assert not any(name.startswith("thread ") for name in names.values())


def test_load_joins_the_processes_of_a_dump_directory(tmp_path):
    dump_dir = tmp_path / "dumps" / "20260101-000000-request"
    source = """
        import os, sys
        import pytrace_cffi

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        pytrace_cffi.start(flight_recorder="4M", dumps_dir=os.path.dirname(sys.argv[1]))
        fib(int(sys.argv[2]))
        pytrace_cffi.dump(os.path.join(sys.argv[1], f"proc-{os.getpid()}"))
        pytrace_cffi.stop()
        """
    _run(tmp_path, source, dump_dir, 14, name="first.py")
    _run(tmp_path, source, dump_dir, 12, name="second.py")
    trace = pytrace_cffi.load(dump_dir)
    by_label = {facts["label"]: pid for pid, facts in trace.processes.items()}
    assert sorted(by_label) == ["first.py", "second.py"]
    pid_of_thread = {t.native_id: trace.thread_pid(t) for t in trace.threads}
    fibs = collections.Counter(pid_of_thread[call.thread] for call in trace
                               if call.name.endswith(": fib"))
    assert fibs == {by_label["first.py"]: FIB_CALLS[14], by_label["second.py"]: FIB_CALLS[12]}
    assert _open_calls(trace) == 2


@pytest.mark.parametrize("fmt, name", [("pftrace", "trace.pftrace"), ("json", "trace.json"),
                                       ("dir", "trace")])
def test_dump_format_writes_a_trace_with_the_calls_of_the_raw_dump(tmp_path, fmt, name):
    dump_dir, _ = _dump_once(tmp_path, fmt)
    written = os.path.join(dump_dir, name)
    assert os.path.exists(written)
    assert not [n for n in os.listdir(dump_dir) if ".tmp" in n]
    raw, formatted = pytrace_cffi.load(dump_dir), pytrace_cffi.load(written)
    assert _fib_calls(formatted) == FIB_CALLS[14]
    assert _names(formatted) == _names(raw)
    if fmt != "json":               # (Chrome JSON closes what was open)
        assert _open_calls(formatted) == 1


def test_dump_format_html_writes_a_page(tmp_path):
    dump_dir, _ = _dump_once(tmp_path, "html")
    with open(os.path.join(dump_dir, "trace.html"), encoding="utf-8") as f:
        assert f.read(200).lstrip().lower().startswith("<!doctype html")


@pytest.mark.parametrize("ending, returncode", [
    ("os.kill(os.getpid(), signal.SIGTERM); time.sleep(30)", -signal.SIGTERM),
    ("raise ValueError('boom')", 1),
])
def test_a_dump_at_the_end_of_the_process_is_written_in_dump_format_before_it_ends(
        tmp_path, ending, returncode):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(f"""
        import os, signal, sys, time
        import pytrace_cffi

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1], dump_format="pftrace")
        fib(12)
        {ending}
        """).lstrip("\n"))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    proc = run_command([sys.executable, str(script), str(tmp_path / "dumps")], tmp_path, env,
                       TIMEOUT)
    assert proc.returncode == returncode, proc.stderr
    (dump_dir,) = [d for d in os.listdir(tmp_path / "dumps") if not d.startswith(".")]
    written = tmp_path / "dumps" / dump_dir / "trace.pftrace"
    assert _fib_calls(pytrace_cffi.load(written)) == FIB_CALLS[12]


@pytest.mark.parametrize("output, expected", [
    (None, "pytrace_cffi-dumps"),
    ("trace.json", "trace-dumps"),
    ("runs/last.pftrace", os.path.join("runs", "last-dumps")),
    ("runs/x.JSON.GZ", os.path.join("runs", "x-dumps")),
    ("runs/job/", os.path.join("runs", "job-dumps")),
    ("runs/job", os.path.join("runs", "job-dumps")),
])
def test_dumps_go_beside_the_output_by_default(output, expected):
    assert default_dumps_dir(output) == expected


def test_start_with_an_output_file_dumps_beside_it(tmp_path):
    (tmp_path / "out").mkdir()
    proc = _run(tmp_path, """
        import sys
        import pytrace_cffi

        pytrace_cffi.start(flight_recorder="1M", output=sys.argv[1])
        print(pytrace_cffi.dump())
        pytrace_cffi.stop()
        """, tmp_path / "out" / "last.pftrace")
    assert proc.stdout.startswith(str(tmp_path / "out" / "last-dumps") + os.sep)
    assert not os.path.exists(tmp_path / "pytrace_cffi-dumps")


@contextlib.contextmanager
def _run_waiting(tmp_path):
    """`run --no-follow --flight-recorder 1M -o sub/out.json` of a program that
    calls fib(12), then waits: yields (its pid, the environment), and lets it end."""
    (tmp_path / "sub").mkdir()
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time

        def fib(n):
            return n if n < 2 else fib(n - 1) + fib(n - 2)

        fib(12)
        print(os.getpid(), flush=True)
        while not os.path.exists(sys.argv[1]):
            time.sleep(0.02)
        """))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    go = tmp_path / "go"
    program = subprocess.Popen(
        [sys.executable, "-m", "pytrace_cffi", "run", "--no-follow", "--flight-recorder", "1M",
         "-o", "sub/out.json", str(script), str(go)], cwd=tmp_path, env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        yield program.stdout.readline().strip(), env
    finally:
        go.touch()
        program.communicate(timeout=TIMEOUT)


def test_run_dumps_beside_out_and_dump_pid_finds_them_and_formats(tmp_path):
    with _run_waiting(tmp_path) as (pid, env):
        asked = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", pid, "--format",
                                "pftrace", "-o", str(tmp_path / "all.json")], cwd=tmp_path,
                               env=env, capture_output=True, text=True, timeout=TIMEOUT)
    assert asked.returncode == 0, asked.stdout + asked.stderr
    dumps = tmp_path / "sub" / "out-dumps"
    (dump_dir,) = [d for d in os.listdir(dumps) if not d.startswith(".")]
    assert dump_dir.endswith("-request")
    for path in (dumps / dump_dir / "trace.pftrace", tmp_path / "all.json", dumps / dump_dir):
        assert _fib_calls(pytrace_cffi.load(path)) == FIB_CALLS[12]
    # `report OUT` finds them beside OUT
    report = subprocess.run([sys.executable, "-m", "pytrace_cffi", "report", "sub/out.json"],
                            cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=TIMEOUT)
    assert report.returncode == 0, report.stderr
    assert report.stdout.startswith(os.path.join("sub", "out-dumps") + ":"), report.stdout
    assert "prog.py (pid " in report.stdout, report.stdout


JOB = SLEEPING_JOB.format(seconds=2)


def test_the_processes_of_a_job_dumped_together_make_one_formatted_trace(tmp_path):
    (tmp_path / "prog.py").write_text(JOB)
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    dumps = tmp_path / "out-dumps"         # beside -o out.json
    with subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                           "--dump-format", "pftrace", "-o", "out.json", "prog.py"],
                          cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as run:
        asked, err = dump_job_once_registered(run, dumps, tmp_path, env)
    assert asked.returncode == 0 and run.returncode == 0, asked.stdout + err
    request, = [d for d in os.listdir(dumps) if not d.startswith(".")]
    formatted = pytrace_cffi.load(dumps / request / "trace.pftrace")
    raw = pytrace_cffi.load(dumps / request)
    assert sorted(p["label"] for p in formatted.processes.values()) == ["prog.py", "python -c"]
    assert _names(formatted) == _names(raw)
    assert _names(formatted)["<string>(2): child_sleeps"] == 1
    assert _names(formatted)["prog.py(4): parent_waits"] == 1


@pytest.mark.parametrize("options, error", [
    ({"flight_recorder": True, "dump_format": "xml"},
     "dump_format must be one of json, json.gz, pftrace, html, speedscope, folded, pprof, "
     "dir or stacks, not 'xml'"),
    ({"dump_format": "pftrace"}, "dump_format goes with flight_recorder"),
])
def test_a_bad_dump_format_is_refused_before_anything_starts(options, error):
    with pytest.raises(ValueError) as raised:
        pytrace_cffi.start(**options)
    assert str(raised.value) == error
    assert not pytrace_cffi.is_tracing()


def test_run_refuses_a_bad_dump_format_before_the_program_runs(tmp_path):
    (tmp_path / "prog.py").write_text("open('ran', 'w').close()\n")
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                           "--dump-format", "xml", "prog.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode != 0 and "dump_format must be one of" in proc.stderr
    assert not (tmp_path / "ran").exists()


# -- damaged dumps -----------------------------------------------------------------

def _damaged(process_dump, where):
    """Copies of process_dump damaged in several ways, in where: name -> path."""
    rng = random.Random(23)
    cases = {}

    def case(name, damage):
        path = os.path.join(where, name, os.path.basename(process_dump))
        shutil.copytree(process_dump, path)
        damage(path)
        cases[name] = path

    def write(file, data):
        return lambda path: open(os.path.join(path, file), "wb").write(data)

    size = os.path.getsize(os.path.join(process_dump, "events.bin"))
    events = open(os.path.join(process_dump, "events.bin"), "rb").read()
    case("events-cut-to-10-bytes", write("events.bin", events[:10]))
    case("events-cut-in-half", write("events.bin", events[:size // 2]))
    case("events-random", write("events.bin", events[:16] + rng.randbytes(size - 16)
                                if hasattr(rng, "randbytes")
                                else events[:16] + os.urandom(size - 16)))
    case("events-a-directory", lambda p: (os.unlink(os.path.join(p, "events.bin")),
                                          os.mkdir(os.path.join(p, "events.bin"))))
    case("process-not-json", write("process.json", b"{\"pid\": "))
    case("process-a-list", write("process.json", b"[1, 2]"))
    case("process-missing", lambda p: os.unlink(os.path.join(p, "process.json")))
    case("keys-garbage", write("keys.jsonl", b"\x00\xff{]\n" * 100))
    case("threads-hostile", write("threads.json", json.dumps(
        [{"index": -1, "native_id": 2 ** 70, "ident": "x"}, 7]).encode()))
    case("dump-huge-number", write("dump.json", b"1" * 100000))
    case("key-sources-garbage", write("key_sources.tsv", b"1\t\t\t\n\x00\t9\n" * 1000))
    for i in range(8):                  # bytes flipped anywhere in events.bin
        flipped = bytearray(events)
        for _ in range(20):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        case(f"events-flipped-{i}", write("events.bin", bytes(flipped)))
    return cases


def test_a_damaged_dump_gives_trace_format_error_never_a_crash(one_dump, tmp_path):
    _, process_dump = one_dump
    cases = _damaged(process_dump, tmp_path)
    link_dir = tmp_path / "linked"
    link_dir.mkdir()
    os.symlink(process_dump, link_dir / os.path.basename(process_dump))
    cases["proc-a-symlink"] = str(link_dir)
    # loaded in a child: a crash or a hang would be its own, and said here
    loader = textwrap.dedent("""
        import json, sys, warnings
        import pytrace_cffi
        warnings.simplefilter("ignore")
        out = {}
        for name, path in json.loads(sys.argv[1]).items():
            try:
                trace = pytrace_cffi.load(path)
                out[name] = ["trace", sum(1 for c in trace if c.name.endswith(": fib"))]
            except pytrace_cffi.TraceFormatError as exc:
                out[name] = ["TraceFormatError", str(exc)]
            except Exception as exc:
                out[name] = [type(exc).__name__, str(exc)]
        print(json.dumps(out))
        """)
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", loader, json.dumps(cases)], env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - started < 30
    outcome = json.loads(proc.stdout)
    assert all(kind in ("trace", "TraceFormatError") for kind, _ in outcome.values()), outcome
    # the ring's one block of events damaged or cut: nothing to read
    for name in ("events-cut-to-10-bytes", "events-cut-in-half", "events-random",
                 "events-a-directory", "process-not-json", "process-a-list",
                 "process-missing", "proc-a-symlink"):
        assert outcome[name][0] == "TraceFormatError", (name, outcome[name])
    # what is damaged costs what it held, not the calls
    for name in ("keys-garbage", "threads-hostile", "dump-huge-number", "key-sources-garbage"):
        assert outcome[name] == ["trace", FIB_CALLS[14]], (name, outcome[name])


# -- files of a dump that are not what they seem (#33 item 3) ----------------------

def _copied_dump(process_dump, where):
    """(DUMPDIR, its one process dump) copied from process_dump into where."""
    dump_dir = os.path.join(where, "dumpdir")
    copy = os.path.join(dump_dir, os.path.basename(process_dump))
    shutil.copytree(process_dump, copy)
    return dump_dir, copy


def _cli(tmp_path, *args, timeout=30):
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    return subprocess.run([sys.executable, "-m", "pytrace_cffi", *map(str, args)],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_a_fifo_key_sources_tsv_does_not_hold_up_report_summary_export_or_load(
        one_dump, tmp_path):
    dump_dir, copy = _copied_dump(one_dump[1], tmp_path)
    os.unlink(os.path.join(copy, "key_sources.tsv"))
    os.mkfifo(os.path.join(copy, "key_sources.tsv"))
    # (the old reader's open() waited for a writer for good: the timeout fails it)
    for args in (["report", dump_dir], ["summary", dump_dir],
                 ["export", dump_dir, "-o", tmp_path / "out.json"],
                 ["-c", "import sys, pytrace_cffi; pytrace_cffi.load(sys.argv[1])", dump_dir]):
        proc = (_cli(tmp_path, *args) if args[0] != "-c" else subprocess.run(
            [sys.executable, *map(str, args)], env=dict(os.environ, PYTHONPATH=ROOT),
            capture_output=True, text=True, timeout=30))
        assert proc.returncode == 0, (args, proc.stderr)


def test_a_key_sources_tsv_linked_out_of_the_dump_is_not_read(one_dump, tmp_path):
    dump_dir, copy = _copied_dump(one_dump[1], tmp_path)
    os.unlink(os.path.join(copy, "keys.jsonl"))     # key_sources.tsv's names are then used
    outside = tmp_path / "secret.tsv"
    outside.write_text("".join(f"{key}\tLEAKED\t1\tsecret\n" for key in range(1, 400)))
    os.unlink(os.path.join(copy, "key_sources.tsv"))
    os.symlink(outside, os.path.join(copy, "key_sources.tsv"))
    names = _names(pytrace_cffi.load(dump_dir))
    assert not [name for name in names if "LEAKED" in name], names.most_common(3)
    proc = _cli(tmp_path, "report", dump_dir)
    assert proc.returncode == 0 and "LEAKED" not in proc.stdout, proc.stdout + proc.stderr


def test_report_does_not_follow_a_proc_link_out_of_the_dump(one_dump, tmp_path):
    dump_dir, copy = _copied_dump(one_dump[1], tmp_path)
    outside = tmp_path / "outside" / "proc-99"
    shutil.copytree(one_dump[1], outside)
    os.symlink(outside, os.path.join(dump_dir, "proc-99"))
    from pytrace_cffi.hang_report import report
    text = report([dump_dir])
    assert text.splitlines()[0].split(": ", 1)[1].startswith("1 process dumped"), text
    assert (f"not read: {os.path.join(dump_dir, 'proc-99')}: a symbolic link, not followed"
            in text), text
    os.unlink(os.path.join(copy, "dump.json"))      # the link alone: no dump here
    with pytest.raises(pytrace_cffi.TraceFormatError, match="holds no dump"):
        report([dump_dir])


def test_the_newest_dump_of_a_process_is_told_by_its_stamp_not_its_files_time(tmp_path):
    """Two dumps of one process in quick succession (#34 item 8): their dump.json
    files can share a modification time (one tick of the file system's clock),
    and the earlier dump's clone can finish writing after the later one's."""
    from pytrace_cffi.flight.dumps import process_dumps
    dumps = tmp_path / "dumps"
    for name, stamp, mtime in (("x-later", 1_700_000_000_500_000_000, 1_700_000_001),
                               ("y-earlier", 1_700_000_000_000_000_000, 1_700_000_002)):
        proc = dumps / name / "proc-42"
        proc.mkdir(parents=True)
        (proc / "dump.json").write_text(json.dumps({"version": 1, "reason": name,
                                                    "realtime_ns": stamp}))
        os.utime(proc / "dump.json", (mtime, mtime))
    assert process_dumps(str(dumps)) == [str(dumps / "x-later" / "proc-42")]


def test_dump_pid_finds_the_dump_named_by_the_process_when_no_request_can_be_written(
        tmp_path):
    """`dump PID` names the dump by a request file in the dumps directory; when it
    cannot write one there (here a directory stands in its place; a full disk),
    it signals the process, which names its dump itself: `dump` finds that one
    (it waited its whole --wait for a "-request" directory that never came, then
    named it, and `report` of it)."""
    dumps = tmp_path / "sub" / "out-dumps"
    with _run_waiting(tmp_path) as (pid, env):
        (dumps / ".request.json").mkdir()
        (dumps / ".requests" / pid).mkdir(parents=True)
        started = time.monotonic()
        asked = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", pid],
                               cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=TIMEOUT)
        took = time.monotonic() - started
    assert asked.returncode == 0, asked.stdout + asked.stderr
    (dump_dir,) = [d for d in os.listdir(dumps) if not d.startswith(".")]
    assert not dump_dir.endswith("-request")
    assert f"pid {pid}: written: {dumps / dump_dir / ('proc-' + pid)}" in asked.stdout
    assert f"report {dumps / dump_dir}" in asked.stdout
    assert took < 20, took

"""`python -m pytrace_cffi report`: where the processes of a job are stuck, from
the flight recorder's dump.json files, written here by hand (the report reads
nothing else). Expected texts are literals worked out from the dumps below."""
import json
import subprocess
import sys
import time

import pytest

from pytrace_cffi.errors import TraceFormatError
from pytrace_cffi.hang_report import (dump_directories, group_stacks, ranges, read_dump,
                                      report)

NOW = 5_000_000_000_000             # the dumps' monotonic_ns
S = 1_000_000_000
MAIN = "train.py(10): main"
STEP = "train.py(30): train_step"
ALL_REDUCE = "torch/distributed/distributed_c10d.py(2050): all_reduce"
NEXT = "torch/utils/data/dataloader.py(620): __next__"


def write_dump(directory, pid, stacks, label=None, rank=None, reason="SIGUSR1",
               realtime_ns=1_790_000_000_000_000_000, names=None):
    """directory/proc-<pid>/dump.json; stacks: per thread, its (name, seconds open
    or None[, current line]) frames, outermost first; the first thread is the
    main one."""
    threads = []
    for index, stack in enumerate(stacks):
        threads.append({"native_id": pid + index,
                        "name": (names or ["MainThread", "worker"])[index],
                        "stack": [dict({"name": name, "since_ns": None if seconds is None
                                        else NOW - int(seconds * S)},
                                       **({"line": line[0]} if line else {}))
                                  for name, seconds, *line in stack]})
    process_dir = directory / f"proc-{pid}"
    process_dir.mkdir(parents=True)
    (process_dir / "dump.json").write_text(json.dumps({
        "version": 1, "reason": reason, "pid": pid,
        "label": label or (f"rank {rank}" if rank is not None else "python"),
        "rank": rank, "worker_id": None, "host": "vm", "realtime_ns": realtime_ns,
        "monotonic_ns": NOW, "threads": threads}))
    return process_dir


def eight_ranks(directory, realtime_ns=1_790_000_000_000_000_000):
    """Ranks 0-7 (pids 100-107): rank 3 waits for its data for 42.1 s, the others
    in all_reduce for 41.5-41.9 s; rank 6 began all_reduce before the recorded
    window. Rank r dumped r ms after realtime_ns (rank 0 the oldest)."""
    for rank in range(8):
        if rank == 3:
            stack = [(MAIN, 100.0), (STEP, 42.5), (NEXT, 42.1)]
        else:
            stack = [(MAIN, 100.0), (STEP, 42.5),
                     (ALL_REDUCE, None if rank == 6 else 41.5 + rank * 0.05)]
        write_dump(directory, 100 + rank, [stack], rank=rank,
                   realtime_ns=realtime_ns + rank * 1_000_000)
    return directory


def test_ranges():
    assert ranges([0, 1, 2, 4, 5, 6, 7]) == "0-2, 4-7"
    assert ranges([7, 3, 5]) == "3, 5, 7"
    assert ranges([0, 1]) == "0-1"
    assert ranges([4]) == "4"


def test_the_odd_rank_is_named_first_then_the_others_as_ranges(tmp_path):
    text = report([str(eight_ranks(tmp_path / "dump"))])
    lines = text.splitlines()
    assert lines[0].startswith(f"{tmp_path / 'dump'}: 8 processes dumped at ")
    assert lines[0].endswith(" (SIGUSR1)")
    assert lines[1] == "rank 3 in __next__ (dataloader.py:620) for 42.1 s"
    # 41.5 + 0.05 * rank s, rank 6's unknown
    assert lines[2].split() == [MAIN.split()[0], "main", "100.0", "s"]
    assert lines[4].split()[-2:] == ["42.1", "s"] and NEXT in lines[4]
    assert lines[5] == ("ranks 0-2, 4-7 in all_reduce (distributed_c10d.py:2050) for "
                        "41.5-41.9 s (1 since before the recorded window)")
    assert lines[6:9] == [f"    {MAIN:<{len(ALL_REDUCE)}}  100.0 s",
                          f"    {STEP:<{len(ALL_REDUCE)}}  42.5 s",
                          f"    {ALL_REDUCE}  41.5-41.9 s (1 since before the recorded "
                          f"window)"]
    assert len(lines) == 9


def test_a_stack_wholly_before_the_window_and_a_process_without_one(tmp_path):
    write_dump(tmp_path, 200, [[(MAIN, None), ("time.sleep", None)]], rank=0)
    write_dump(tmp_path, 201, [[(MAIN, 3.0), (STEP, 2.5), ("time.sleep", 2.0)]], rank=1)
    write_dump(tmp_path, 300, [[]], label="DataLoader worker 0")
    write_dump(tmp_path, 301, [], label="DataLoader worker 1")        # no thread at all
    lines = report([str(tmp_path)]).splitlines()
    # fewest members first, the longest stuck first among equals: rank 1 (2.0 s)
    # before rank 0 (unknown); the two workers share the empty stack
    assert lines[1] == "rank 1 in time.sleep for 2.0 s"
    assert lines[5] == "rank 0 in time.sleep since before the recorded window"
    assert lines[6].split()[-5:] == "since before the recorded window".split()
    assert lines[8] == ("DataLoader worker 0 (pid 300), DataLoader worker 1 (pid 301): "
                        "no open call in their dumps")
    assert len(lines) == 9


def test_json_output_from_the_command_line(tmp_path):
    eight_ranks(tmp_path / "dump")
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "report", "--json",
                           str(tmp_path / "dump")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    [dump] = data["dumps"]
    assert dump["processes"] == 8 and dump["reasons"] == {"SIGUSR1": 8}
    assert dump["realtime_ns"] == 1_790_000_000_000_000_000        # the oldest stamp
    odd, rest = dump["groups"]
    assert odd["who"] == "rank 3" and odd["innermost"] == NEXT
    assert [m["rank"] for m in odd["members"]] == [3] and odd["members"][0]["pid"] == 103
    assert odd["members"][0]["seconds"] == pytest.approx(42.1)
    assert [f["name"] for f in odd["frames"]] == [MAIN, STEP, NEXT]
    assert rest["who"] == "ranks 0-2, 4-7"
    assert [m["rank"] for m in rest["members"]] == [0, 1, 2, 4, 5, 6, 7]
    assert [m["seconds"] is None for m in rest["members"]] == [False] * 5 + [True, False]
    assert rest["frames"][2]["seconds"][0] == pytest.approx(41.5)
    assert dump["not_read"] == [] and "other_threads" not in dump


def test_text_from_the_command_line_and_its_help(tmp_path):
    eight_ranks(tmp_path / "dump")
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "report",
                           str(tmp_path / "dump")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == "rank 3 in __next__ (dataloader.py:620) for 42.1 s"
    helped = subprocess.run([sys.executable, "-m", "pytrace_cffi", "report", "--help"],
                            capture_output=True, text=True, timeout=120)
    assert "--threads" in helped.stdout and "DUMPDIR" in helped.stdout
    (tmp_path / "empty").mkdir()
    missing = subprocess.run([sys.executable, "-m", "pytrace_cffi", "report",
                              str(tmp_path / "empty")], capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 1 and "holds no dump" in missing.stderr


def test_a_directory_of_dumps_gives_each_processs_newest_or_all(tmp_path):
    dumps = tmp_path / "job" / "dumps"
    # named against their times: the newest is told by its dump.json, not its name
    eight_ranks(dumps / "b-older", realtime_ns=1_700_000_000_000_000_000)
    write_dump(dumps / "a-newer", 100, [[(MAIN, 1.0)]], rank=0,      # rank 0's own, later
               reason="watchdog: no step for 30 s", realtime_ns=1_800_000_000_000_000_000)
    (dumps / "not-a-dump").mkdir()
    for given in (dumps, tmp_path / "job"):       # the dumps/ or the job's directory
        assert dump_directories(str(given)) == [str(dumps / "a-newer")]
        assert dump_directories(str(given), every=True) == [str(dumps / "b-older"),
                                                            str(dumps / "a-newer")]
    newest = report([str(tmp_path / "job")]).splitlines()
    # titled by the oldest stamp of the dumps chosen: rank 1's of b-older
    oldest = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(1_700_000_000.001))
    assert newest[0].endswith(f"8 processes dumped at {oldest} "
                              "(SIGUSR1: 7, watchdog: no step for 30 s: 1)")
    assert newest[0].endswith("(SIGUSR1: 7, watchdog: no step for 30 s: 1)")
    assert "rank 0 in main (train.py:10) for 1.0 s" in newest      # both odd ones out
    assert "rank 3 in __next__ (dataloader.py:620) for 42.1 s" in newest
    both = report([str(dumps)], every=True).split("\n\n")
    assert [part.splitlines()[0].split(":")[0] for part in both] == [
        str(dumps / "b-older"), str(dumps / "a-newer")]
    with pytest.raises(TraceFormatError, match="holds no dump"):
        dump_directories(str(dumps / "not-a-dump"))


def _job_process(job, pid, dumps_dir):
    """job/proc-<pid>/process.json as a flight recorder's process writes it."""
    (job / f"proc-{pid}").mkdir(parents=True)
    (job / f"proc-{pid}" / "process.json").write_text(json.dumps(
        {"pid": pid, "flight": {"dumps_dir": str(dumps_dir), "signal": 10}}))


def test_a_job_directory_finds_its_dumps_wherever_its_processes_dumped(tmp_path):
    """`run --processes-dir job -o out.pftrace` dumps beside OUT (out-dumps/), or
    where --dumps-dir says: `report job` looks where its processes' process.json
    say they dump, every place together (#30 item 4), and says where it looked
    when there is nothing."""
    job = tmp_path / "job"
    beside_out, elsewhere = tmp_path / "out-dumps", tmp_path / "else" / "dumps"
    _job_process(job, 100, beside_out)
    (job / "job.json").write_text('{"root_pid": 100}')
    _job_process(job, 101, beside_out)
    _job_process(job, 102, elsewhere)
    (job / "proc-103").mkdir()
    (job / "proc-103" / "process.json").write_text('{"flight": {"dumps_dir": "rel"}}')
    with pytest.raises(TraceFormatError) as no_dump:
        report([str(job)])
    for place in (job, job / "dumps", tmp_path / "job-dumps", beside_out, elsewhere):
        assert f"{place} (" in str(no_dump.value)
    assert "rel (" not in str(no_dump.value)        # (not an absolute path: not looked in)
    write_dump(beside_out / "20261129-041233-request", 100, [[(MAIN, 2.0)]], rank=0)
    write_dump(beside_out / "20261129-041233-request", 101, [[(MAIN, 2.0)]], rank=1)
    write_dump(elsewhere / "20261129-041234-watchdog", 102, [[(STEP, 7.0)]], rank=2,
               realtime_ns=1_790_000_001_000_000_000)
    lines = report([str(job)]).splitlines()
    assert lines[0].startswith(f"{job}: 3 processes dumped at ")
    assert lines[1:] == ["rank 2 in train_step (train.py:30) for 7.0 s",
                         "    train.py(30): train_step  7.0 s",
                         "ranks 0-1 in main (train.py:10) for 2.0 s",
                         "    train.py(10): main  2.0 s"]
    assert [d.rsplit("/", 1)[1] for d in dump_directories(str(job), every=True)] == [
        "20261129-041233-request", "20261129-041234-watchdog"]


def test_one_process_dump_directory(tmp_path):
    process_dir = write_dump(tmp_path, 42, [[(MAIN, 5.0)]], label="python")
    lines = report([str(process_dir)]).splitlines()
    assert lines[1] == "python (pid 42) in main (train.py:10) for 5.0 s"


def test_other_threads_only_when_not_idle(tmp_path):
    busy = [(MAIN, 9.0), ("loader.py(5): _pin_loop", 8.0), ("builtins.sorted", 0.5)]
    for rank in range(2):
        write_dump(tmp_path, 100 + rank, [[(MAIN, 9.0), ("time.sleep", 1.0)], busy,
                                          [("threading.py(1000): _bootstrap", 9.0),
                                           ("threading.py(320): wait", 9.0),
                                           ("_thread.lock.acquire", 9.0)],
                                          # traced without C calls: no built-in callee
                                          [("threading.py(1000): _bootstrap", 9.0),
                                           ("queue.py(154): get", 9.0)]],
                   rank=rank, names=["MainThread", "pin", "idle-pool", "idle-queue"])
    without = report([str(tmp_path)]).splitlines()
    assert without[1] == "ranks 0-1 in time.sleep for 1.0 s" and len(without) == 4
    lines = report([str(tmp_path)], threads=True).splitlines()
    assert lines[4] == "other threads, not idle:"
    assert lines[5] == "ranks 0-1, thread 'pin' in builtins.sorted for 0.5 s"
    assert len(lines) == 9 and "idle-" not in "\n".join(lines)


def test_frames_compares_the_innermost_only(tmp_path):
    write_dump(tmp_path, 100, [[("a.py(1): outer_a", 5.0), (ALL_REDUCE, 4.0)]], rank=0)
    write_dump(tmp_path, 101, [[("b.py(1): outer_b", 5.0), (ALL_REDUCE, 4.0)]], rank=1)
    dump = read_dump(str(tmp_path))
    assert [len(g.members) for g in group_stacks(dump)] == [1, 1]
    [group] = group_stacks(dump, frames=1)
    assert group.frames == (ALL_REDUCE,) and len(group.members) == 2
    lines = report([str(tmp_path)], frames=1).splitlines()
    assert lines[1:] == ["ranks 0-1 in all_reduce (distributed_c10d.py:2050) for 4.0 s",
                         f"    {ALL_REDUCE}  4.0 s"]


def test_a_damaged_or_missing_dump_is_said_and_the_rest_reported(tmp_path):
    eight_ranks(tmp_path)
    (tmp_path / "proc-104" / "dump.json").write_text("{not json")
    (tmp_path / "proc-999").mkdir()
    (tmp_path / "proc-105" / "dump.json").write_text(json.dumps({"version": 2}))
    lines = report([str(tmp_path)]).splitlines()
    assert lines[0].startswith(f"{tmp_path}: 6 processes")
    assert lines[5].startswith("ranks 0-2, 6-7 in all_reduce")
    assert lines[-3].startswith(f"not read: {tmp_path / 'proc-104' / 'dump.json'}: not JSON")
    assert lines[-2] == (f"not read: {tmp_path / 'proc-105' / 'dump.json'}: dump version 2, "
                         "this pytrace_cffi reads version 1")
    assert lines[-1] == (f"not read: {tmp_path / 'proc-999'}: no dump.json (the process "
                         "wrote no dump)")


def test_a_dumps_control_characters_are_shown_escaped(tmp_path):
    """A label, reason or function name holding a terminal's escape sequence (the
    dumped program's, or a hostile file's) is printed escaped, never sent raw."""
    write_dump(tmp_path, 400, [[(MAIN, 3.0), ("evil\x1b[2J", 2.0)]],
               label="rank \x1b]0;owned\x07", reason="SIGUSR1\x1b[31m")
    text = report([str(tmp_path)])
    assert not any(ord(c) < 32 and c != "\n" for c in text)
    lines = text.splitlines()
    assert lines[0].endswith(" (SIGUSR1\\x1b[31m)")
    assert lines[1] == "rank \\x1b]0;owned\\x07 (pid 400) in evil\\x1b[2J for 2.0 s"


@pytest.mark.parametrize("damage, problem", [
    ("[" * 100_000 + "]" * 100_000, "not JSON"),
    ('{"version": 1, "pid": 104, "threads": [], "monotonic_ns": 1' + "0" * 400 + "}",
     "'monotonic_ns' is "),
    ('{"version": 1, "pid": 104, "monotonic_ns": 5, "threads": [{"stack": '
     '[{"name": "f", "since_ns": -1' + "0" * 400 + '}]}]}', "'since_ns' is "),
])
def test_a_dump_json_nested_deep_or_with_a_huge_number_is_said_not_raised(
        tmp_path, damage, problem):
    """#33 item 4: RecursionError, OverflowError before."""
    eight_ranks(tmp_path)
    (tmp_path / "proc-104" / "dump.json").write_text(damage)
    lines = report([str(tmp_path)]).splitlines()
    assert lines[0].startswith(f"{tmp_path}: 7 processes")
    assert lines[-1].startswith(f"not read: {tmp_path / 'proc-104' / 'dump.json'}: {problem}")


def test_del_and_the_c1_controls_are_shown_escaped_too(tmp_path):
    """DEL and the C1 controls (U+0080-U+009F: U+009B is a terminal's one-character
    CSI, U+009D its OSC) are escape sequences as well: escaped as \\x7f, \\x9b...,
    while the printable characters just past them are kept (#31)."""
    write_dump(tmp_path, 400, [[(MAIN, 3.0), ("evil\x9b2J\x7f", 2.0)]],
               label="rank \x9d0;owned\x9c\x80", reason="SIGUSR1\x85\xa0\xe9")
    text = report([str(tmp_path)])
    assert not any(0x7f <= ord(c) <= 0x9f for c in text)
    lines = text.splitlines()
    assert lines[0].endswith(" (SIGUSR1\\x85\xa0\xe9)")
    assert lines[1] == "rank \\x9d0;owned\\x9c\\x80 (pid 400) in evil\\x9b2J\\x7f for 2.0 s"


def test_each_frame_shows_the_line_it_is_on(tmp_path):
    """dump.json's "line" is where a frame is (its name's line is its function's
    first): the report shows file:line of it, and threads in one function on
    other lines are told apart (#30 item 1)."""
    for rank, line in enumerate([33, 33, 35]):
        write_dump(tmp_path, 100 + rank, [[(MAIN, 50.0, 12), (STEP, 4.0, line)]], rank=rank)
    lines = report([str(tmp_path)]).splitlines()
    assert lines[1:] == ["rank 2 in train_step (train.py:35) for 4.0 s",
                         "    train.py:12: main        50.0 s",
                         "    train.py:35: train_step  4.0 s",
                         "ranks 0-1 in train_step (train.py:33) for 4.0 s",
                         "    train.py:12: main        50.0 s",
                         "    train.py:33: train_step  4.0 s"]
    data = json.loads(report([str(tmp_path)], as_json=True))["dumps"][0]["groups"][1]
    assert (data["innermost"], data["innermost_line"]) == (STEP, 33)
    assert [(f["name"], f["line"]) for f in data["frames"]] == [(MAIN, 12), (STEP, 33)]


def test_each_processs_newest_dump_of_another_moment_keeps_its_own_time(tmp_path):
    """A directory of dumps: rank 0's newest is a request's, rank 1's a SIGTERM's
    3 s later (its pool closing). Each call is timed against its own process's
    dump: rank 0 slept 3.5 s when it dumped (it read 6.5 s, timed against rank 1's
    later moment). Processes of one dump directory still share the latest moment."""
    dumps = tmp_path / "dumps"
    early = write_dump(dumps / "a-request", 100, [[(MAIN, 3.5)]], rank=0)
    late = write_dump(dumps / "b-sigterm", 101, [[(MAIN, 6.0)]], rank=1, reason="SIGTERM")
    facts = json.loads((late / "dump.json").read_text())
    facts["monotonic_ns"] = NOW + 3 * S
    facts["threads"][0]["stack"][0]["since_ns"] = NOW + 3 * S - 6 * S
    (late / "dump.json").write_text(json.dumps(facts))
    lines = report([str(dumps)]).splitlines()
    assert "ranks 0-1 in main (train.py:10) for 3.5-6.0 s" in lines, lines   # (6.0-6.5)
    assert str(early.parent) != str(late.parent)

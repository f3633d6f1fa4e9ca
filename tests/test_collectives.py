"""torch.distributed's collectives in the flight recorder's dumps (issue 30 item 9):
each process's dump.json "collectives" (pytrace_cffi/_collectives.py) and `report`'s
ranks lined up by sequence number (pytrace_cffi/flight/collectives.py).

Three kinds of test: report on dump.json files written here by hand (no torch);
a process with the stand-in torch (tests/torch_stand_in/: torch.distributed's
shapes in one process, any interpreter); and, where torch is installed (3.11
here), a 2-rank gloo job under torchrun where rank 1 stops before its third
collective while rank 0 waits in it. Expected values are literals."""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from pytrace_cffi.hang_report import report

from test_children import ROOT, TIMEOUT, _env_own_tmp, run_command

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")
MiB4 = 4 << 20


# -- report, on dumps written by hand ------------------------------------------------

def _write(directory, pid, rank, collectives, threads=()):
    process_dir = directory / f"proc-{pid}"
    process_dir.mkdir(parents=True)
    (process_dir / "dump.json").write_text(json.dumps({
        "version": 1, "reason": "request", "pid": pid, "label": f"rank {rank}",
        "rank": rank, "host": "vm", "realtime_ns": 1_790_000_000_000_000_000,
        "monotonic_ns": 5_000_000_000_000, "threads": list(threads),
        "collectives": collectives}))


def _call(kind, group, seq, size):
    return {"kind": kind, "group": group, "seq": seq, "native_id": 1, "monotonic_ns": 1,
            "shapes": [[size // 4]], "more_shapes": 0, "dtype": "float32", "bytes": size}


def _field(rank, seqs, waiting=None, calls=(), torch_entries=None):
    """A process's "collectives": seqs per group name; waiting: (group, kind, seq,
    bytes) of the collective its frames are in."""
    groups = [{"name": "0", "description": "default_pg", "ranks": [0, 1, 2, 3],
               "seq": seqs["0"]},
              {"name": "1", "description": None, "ranks": [0, 1, 2, 3, 4], "seq": seqs["1"]}]
    field = {"rank": rank, "world_size": 5, "groups": groups, "waiting": [],
             "calls": list(calls), "recorded": True, "problems": [],
             "torch_flight_recorder": {"off": "torch's flight recorder keeps nothing"}}
    if waiting:
        group, kind, seq, size = waiting
        field["waiting"] = [dict(_call(kind, group, seq, size), thread="MainThread")]
    if torch_entries is not None:
        field["torch_flight_recorder"] = {"entries": torch_entries, "pg_status": {}}
    return field


def four_ranks(directory):
    """Ranks 0-3 (of 5: rank 4 wrote no dump). Group 0: rank 1 is at seq 22
    (all_reduce of 4 MiB), not in a collective; ranks 0, 2, 3 wait in seq 23
    (all_reduce of 4 MiB). Group 1: everyone at seq 7, nobody in it: a barrier
    by our calls on ranks 0-1, an all_gather of 16 B by torch's flight recorder on
    ranks 2-3 (nothing recorded there)."""
    for rank in range(4):
        calls = [_call("all_reduce", "0", 22, MiB4)]
        if rank < 2:
            calls.append({"kind": "barrier", "group": "1", "seq": 7, "native_id": 1,
                          "monotonic_ns": 2})
        entries = None if rank < 2 else [dict(_call("all_gather", "1", 7, 16),
                                              state="scheduled", retired=True)]
        if rank == 1:
            field = _field(rank, {"0": 22, "1": 7}, calls=calls, torch_entries=entries)
        else:
            calls.append(_call("all_reduce", "0", 23, MiB4))
            field = _field(rank, {"0": 23, "1": 7}, ("0", "all_reduce", 23, MiB4),
                           calls, entries)
        _write(directory, 100 + rank, rank, field)
    return directory


def test_report_lines_the_ranks_up_by_sequence_number(tmp_path):
    text = report([str(four_ranks(tmp_path / "dump"))])
    section = text[text.index("collectives by sequence number"):].splitlines()
    assert section == [
        "collectives by sequence number (torch.distributed):",
        "group 0 (default_pg, ranks 0-3): rank 1's last collective is seq 22 (all_reduce, "
        "4 MiB); ranks 0, 2-3 wait in seq 23 (all_reduce, 4 MiB)",
        "    not arrived at seq 23: rank 1",
        "group 1 (ranks 0-4): ranks 0-1's last collective is seq 7 (barrier); "
        "ranks 2-3's last collective is seq 7 (all_gather, 16 B)",
        "    no dump of rank 4",
    ]
    data = json.loads(report([str(tmp_path / "dump")], as_json=True))
    groups = data["dumps"][0]["collectives"]["groups"]
    assert [(g["group"], g["seq"], g["no_dump"]) for g in groups] == [("0", 23, []),
                                                                      ("1", 7, [4])]
    assert [(p["rank"], p["seq"], p["kind"], p["bytes"])
            for p in groups[0]["not_arrived"]] == [(1, 22, "all_reduce", MiB4)]


def test_report_without_collectives_has_no_such_section(tmp_path):
    _write(tmp_path / "dump", 7, 0, None)
    text = report([str(tmp_path / "dump")])
    assert "collectives" not in text
    assert "collectives" not in json.loads(report([str(tmp_path / "dump")],
                                                  as_json=True))["dumps"][0]


@pytest.mark.parametrize("collectives", [
    "junk", [1, 2], {"groups": "x"}, {"groups": [{"name": 5}, "x", {"name": "0", "seq": "9",
                                                                    "ranks": ["a"]}]},
    {"rank": "x", "groups": [{"name": "0", "seq": 2}], "waiting": [{"group": "0", "seq": [1]}],
     "calls": [{"group": "0", "seq": 2, "kind": 3}], "problems": [None, "odd"],
     "torch_flight_recorder": {"pg_status": {"0": "x"}, "entries": "y"}},
])
def test_a_damaged_collectives_field_is_left_out_never_raised(tmp_path, collectives):
    _write(tmp_path / "dump", 7, 0, collectives)
    _write(tmp_path / "dump", 8, 1, _field(1, {"0": 3, "1": 1}))
    text = report([str(tmp_path / "dump")])
    assert "rank 1's last collective is seq 3" in text
    json.loads(report([str(tmp_path / "dump")], as_json=True))


# -- a process with the stand-in torch ------------------------------------------------

STAND_IN_PROGRAM = """
import json, os, sys, threading, time
sys.path.insert(0, sys.argv[2])     # the stand-in torch
import pytrace_cffi
import torch

def collectives(path):
    with open(os.path.join(path, "dump.json"), encoding="utf-8") as f:
        return json.load(f).get("collectives", "none")

def whole(path):
    while not os.path.exists(os.path.join(path, "done.json")):
        time.sleep(0.02)
    return path

pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1])
print("BEFORE", json.dumps(collectives(whole(pytrace_cffi.dump(reason="before")))))
import torch.distributed as dist
print("UNINITIALISED", json.dumps(collectives(whole(pytrace_cffi.dump(reason="uninit")))))
dist.init_process_group("stand-in", rank=3, world_size=4)
t = torch.ones(256)                                 # 1 KiB
dist.all_reduce(t)                                  # group 0, seq 1
dist.broadcast(t, 0)                                # seq 2
pair = dist.new_group([1, 3])
dist.barrier(group=pair)                            # group 1, seq 1
gate = dist.distributed_c10d._get_default_group().gate = threading.Event()
stuck = threading.Thread(target=dist.all_reduce, args=(t,), name="stuck")
stuck.start()
while dist.distributed_c10d._get_default_group()._get_sequence_number_for_group() < 3:
    time.sleep(0.01)                                # seq 3 issued: it waits in it
print("DUMP", json.dumps(collectives(whole(pytrace_cffi.dump(reason="stuck")))))
gate.set()
stuck.join()
pytrace_cffi.stop()
print("EXIT")
"""


def _stand_in_run(tmp_path, fr=None):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(STAND_IN_PROGRAM).lstrip("\n"))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    for name in ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE", "STAND_IN_FR"):
        env.pop(name, None)
    if fr is not None:
        env["TORCH_FR_BUFFER_SIZE"] = "16"
        env["STAND_IN_FR"] = fr
    proc = run_command([sys.executable, str(script), str(tmp_path / "dumps"), STAND_IN],
                       tmp_path, env, TIMEOUT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines() if " " in line)
    assert proc.stdout.splitlines()[-1] == "EXIT"
    return {key: json.loads(value) for key, value in lines.items()}


def _strip(calls):
    return [(c["kind"], c["group"], c["seq"], c.get("bytes"), c.get("shapes"))
            for c in calls]


def test_a_dump_says_which_collective_each_thread_is_in_and_the_calls_before(tmp_path):
    out = _stand_in_run(tmp_path)
    assert out["BEFORE"] == "none" and out["UNINITIALISED"] == "none"   # no field
    field = out["DUMP"]
    assert (field["rank"], field["world_size"]) == (3, 4)
    assert field["groups"] == [
        {"name": "0", "description": "default_pg", "ranks": [0, 1, 2, 3], "seq": 3},
        {"name": "1", "description": None, "ranks": [1, 3], "seq": 1}]
    assert [(w["kind"], w["group"], w["seq"], w["bytes"], w["thread"])
            for w in field["waiting"]] == [("all_reduce", "0", 3, 1024, "stuck")]
    assert _strip(field["calls"]) == [("all_reduce", "0", 1, 1024, [[256]]),
                                      ("broadcast", "0", 2, 1024, [[256]]),
                                      ("barrier", "1", 1, None, None),
                                      ("all_reduce", "0", 3, 1024, [[256]])]
    assert field["recorded"] is True and field["problems"] == []
    assert field["torch_flight_recorder"] == {
        "off": "torch's flight recorder keeps nothing (TORCH_FR_BUFFER_SIZE is unset)"}


@pytest.mark.parametrize("fr, expected", [
    ("json", None),
    ("raise", "torch's flight recorder: RuntimeError: stand-in: no trace"),
    ("hang", "torch's flight recorder did not answer within 2 s"),
])
def test_torchs_own_flight_recorder_is_read_and_its_failures_are_a_line(tmp_path, fr,
                                                                        expected):
    field = _stand_in_run(tmp_path, fr)["DUMP"]
    assert _strip(field["calls"])[-1] == ("all_reduce", "0", 3, 1024, [[256]])
    if expected is None:
        assert field["problems"] == []
        assert field["torch_flight_recorder"] == {"version": "2.10", "pg_status": {
            "0": {"last_enqueued_collective": "3"}}, "entries": [{
                "kind": "all_reduce", "group": "0", "seq": 3, "state": "scheduled",
                "retired": False, "shapes": [[256]], "more_shapes": 0, "dtype": "Float",
                "bytes": 1024}]}
    else:
        assert field["problems"] == [expected]
        assert field["torch_flight_recorder"] == {"off": expected}


class _DType:
    itemsize = 2

    def __str__(self):
        return "torch.bfloat16"


class _Tensor:
    dtype = _DType()

    def __init__(self, *shape):
        self.shape = shape

    def numel(self):
        return self.shape[0] * self.shape[1]


def test_a_list_input_is_counted_whole_and_its_shapes_cut_at_eight():
    from pytrace_cffi._collectives import _described, _raw_input
    tensors = [_Tensor(n, 3) for n in range(1, 11)]         # 55 x 3 elements
    raw = ("reduce_scatter", "0", 4, 9, 10, _raw_input({"output": None,
                                                        "input_list": tensors}))
    assert _described(raw) == {
        "kind": "reduce_scatter", "group": "0", "seq": 4, "native_id": 9,
        "monotonic_ns": 10, "shapes": [[n, 3] for n in range(1, 9)], "more_shapes": 2,
        "dtype": "bfloat16", "bytes": 330}
    assert _raw_input({"object_list": [1, 2]}) is None


# -- a 2-rank gloo job (torch) ---------------------------------------------------------

GLOO_JOB = """
import os, sys, time
import torch
import torch.distributed as dist


def wait_for(path):
    while not os.path.exists(path):
        time.sleep(0.05)


def main(marks):
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    small, big = torch.zeros(4), torch.zeros(1 << 20)       # 16 B, 4 MiB of float32
    dist.all_reduce(small)                                  # seq 1
    dist.broadcast(big, 0)                                  # seq 2
    open(os.path.join(marks, f"rank{rank}"), "w").close()
    if rank == 1:
        wait_for(os.path.join(marks, "go"))                 # stops before seq 3
    dist.all_reduce(big)                                    # seq 3
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
"""


def test_a_gloo_job_whose_rank_1_stops_before_a_collective(tmp_path):
    """Rank 1 stops before its third collective, rank 0 waits in it: `dump DIR`
    and `report DIR` say so by sequence number (torch's flight recorder on, its
    entries in the dumps too); released, the job ends as it would. The ranks are
    started as torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT),
    each by a `run` of its own into one dumps directory: torchrun's own start
    would double the test's time."""
    pytest.importorskip("torch")
    (tmp_path / "job.py").write_text(GLOO_JOB.lstrip("\n"))
    marks = tmp_path / "marks"
    marks.mkdir()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dumps = tmp_path / "dumps"
    env = _env_own_tmp(tmp_path)
    env.update(PYTHONPATH=ROOT, TORCH_FR_BUFFER_SIZE="64", WORLD_SIZE="2",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    ranks = [subprocess.Popen([sys.executable, "-m", "pytrace_cffi", "run", "--flight-recorder",
                               "--skip-imports", "--dumps-dir", str(dumps), "-o",
                               str(tmp_path / f"rank{rank}.pftrace"), str(tmp_path / "job.py"),
                               str(marks)],
                              cwd=tmp_path, env=dict(env, RANK=str(rank), LOCAL_RANK=str(rank)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=True) for rank in (0, 1)]
    try:
        deadline = time.monotonic() + 120
        while not ((marks / "rank0").exists() and (marks / "rank1").exists()):
            assert time.monotonic() < deadline and all(r.poll() is None for r in ranks)
            time.sleep(0.1)
        asked = subprocess.run([sys.executable, "-m", "pytrace_cffi", "dump", str(dumps)],
                               cwd=tmp_path, env=env, capture_output=True, text=True,
                               timeout=TIMEOUT)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        text = subprocess.run([sys.executable, "-m", "pytrace_cffi", "report", str(dumps)],
                              cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=TIMEOUT).stdout
        (marks / "go").touch()
        for rank in ranks:
            out, err = rank.communicate(timeout=TIMEOUT)
            assert rank.returncode == 0, err
    finally:
        for rank in ranks:
            if rank.poll() is None:
                os.killpg(rank.pid, signal.SIGKILL)
    section = text[text.index("collectives by sequence number"):].splitlines()
    assert section == [
        "collectives by sequence number (torch.distributed):",
        "group 0 (default_pg, ranks 0-1): rank 1's last collective is seq 2 (broadcast, "
        "4 MiB); rank 0 waits in seq 3 (all_reduce, 4 MiB)",
        "    not arrived at seq 3: rank 1"]
    from pytrace_cffi.flight.dumps import process_dumps
    entries = {}
    for directory in process_dumps(str(dumps)):
        with open(os.path.join(directory, "dump.json"), encoding="utf-8") as f:
            facts = json.load(f)
        recorder = facts["collectives"]["torch_flight_recorder"]
        entries[facts["rank"]] = [(e["kind"], e["seq"], e["bytes"], e["retired"])
                                  for e in recorder["entries"]]
    assert entries == {0: [("all_reduce", 1, 16, True), ("broadcast", 2, MiB4, True),
                           ("all_reduce", 3, MiB4, False)],
                       1: [("all_reduce", 1, 16, True), ("broadcast", 2, MiB4, True)]}

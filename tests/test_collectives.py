"""torch.distributed's collectives in the flight recorder's dumps (issue 30 item 9):
each process's dump.json "collectives" (pytrace_cffi/_collectives.py), from a
process with the stand-in torch (tests/torch_stand_in/: torch.distributed's shapes
in one process, any interpreter). Expected values are literals."""
import json
import os
import sys
import textwrap

import pytest

from test_children import ROOT, TIMEOUT, _env_own_tmp, run_command

HERE = os.path.dirname(os.path.abspath(__file__))
STAND_IN = os.path.join(HERE, "torch_stand_in")


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

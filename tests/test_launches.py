"""log_launches: each command the program launches (subprocess.Popen, os.system)
is an instant "launch" on the thread that launched it, with args via and command,
in every format (it is a mark, as instant()'s are). The recorder is a row of
_runtime.RECORDERS (docs/INTERNALS.md, "Adding an instant kind")."""
import json
import os
import subprocess
import sys
import threading

import pytrace_cffi


def launch_twice():
    subprocess.run(["true", "a b"], check=True)
    os.system("exit 0")


def traced_launches(**options):
    pytrace_cffi.start(**options)
    try:
        launch_twice()
    finally:
        trace = pytrace_cffi.stop()
    return trace


EXPECTED_ARGS = [{"via": "subprocess.Popen", "command": "true a b"},
                 {"via": "os.system", "command": "exit 0"}]


def test_each_launch_is_an_instant_in_chrome_json_and_pftrace(tmp_path):
    trace = traced_launches(log_launches=True)
    tid = threading.get_native_id()
    trace.export(str(tmp_path / "t.json"))
    with open(tmp_path / "t.json", encoding="utf-8") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("name") == "launch"]
    assert [(e["ph"], e["s"], e["tid"], e["args"]) for e in events] == [
        ("i", "t", tid, EXPECTED_ARGS[0]), ("i", "t", tid, EXPECTED_ARGS[1])]
    assert events[0]["ts"] <= events[1]["ts"]

    from test_perfetto import decode
    trace.export(str(tmp_path / "t.pftrace"))
    out = decode(tmp_path / "t.pftrace")
    instants = [i for i in out["instants"] if i["name"] == "launch"]
    assert [i["args"] for i in instants] == EXPECTED_ARGS
    assert {out["threads"][i["track"]][1] for i in instants} == {tid}


def test_off_by_default_and_off_again_after_stop():
    assert [m for m in traced_launches().marks if m.name == "launch"] == []
    traced_launches(log_launches=True)
    # the audit hook stays (hooks cannot be removed) but records nothing now
    assert [m for m in traced_launches().marks if m.name == "launch"] == []


def test_a_refused_audit_hook_is_said_at_stop(tmp_path):
    # Audit hooks stay for the process: a child of its own refuses ours.
    program = tmp_path / "refuse.py"
    program.write_text(
        "import subprocess, sys, warnings\n"
        "def refuse(event, args):\n"
        "    if event == 'sys.addaudithook':\n"
        "        raise RuntimeError('no more audit hooks')\n"
        "sys.addaudithook(refuse)\n"
        "import pytrace_cffi\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    pytrace_cffi.start(log_launches=True)\n"
        "    subprocess.run(['true'])\n"
        "    trace = pytrace_cffi.stop()\n"
        "print([m.name for m in trace.marks])\n"
        "print([str(w.message) for w in caught])\n")
    done = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "[]", "[\"log_launches: another audit hook refused pytrace_cffi's: launches are "
              "not in the trace\"]"]

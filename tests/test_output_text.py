"""What every writer puts in its text: valid JSON without bare NaN or Infinity,
valid UTF-8 for a path that is not UTF-8 (its hash ids as before), and names of
megabytes written and read back in time proportional to their length."""
import gzip
import hashlib
import json
import math
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import threading

import pytest

import pytrace_cffi
from pytrace_cffi.model.realtime import monotonic_to_realtime
from pytrace_cffi.render.html import write_html
from pytrace_cffi.model.saved_format import hash_id
from pytrace_cffi.reading import read_trace

ENV = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.abspath(
    pytrace_cffi.__file__))))


def strict_json(text):
    """json.loads, refusing what JSON has not: NaN, Infinity, -Infinity."""
    def refuse(constant):
        raise AssertionError(f"bare {constant} in the JSON")
    return json.loads(text, parse_constant=refuse)


def page_data(path):
    """The JSON the HTML page embeds (its metadata), parsed strictly, as the page's
    JSON.parse would."""
    text = path.read_bytes().decode("utf-8")       # strictly UTF-8
    assert "\\udc" not in text
    found = re.search(r'<script type="application/json" id="pt-meta">(.*?)</script>', text,
                      re.S)
    return strict_json(found.group(1))


def torch_trace(trace, path, args):
    """A torch.profiler-shaped trace (an aten op on our thread) whose op carries args."""
    base = (trace.realtime_anchor["start"]["realtime_ns"] // 10 ** 9 - 10) * 10 ** 9
    ts = (monotonic_to_realtime(trace.realtime_anchor, trace.start_ns) - base) / 1000
    event = {"ph": "X", "cat": "cpu_op", "name": "aten::fake", "pid": trace.pid,
             "tid": threading.get_native_id(), "ts": ts, "dur": 1.0, "args": args}
    path.write_text(json.dumps({"baseTimeNanoseconds": base, "traceEvents": [event]}))


# -- NaN and infinities --------------------------------------------------------

def f():
    return 1


def traced_non_finite(**options):
    with pytrace_cffi.trace(**options) as t:
        with pytrace_cffi.record_function("region", {"nan": math.nan, "inf": math.inf,
                                                     "minus": -math.inf, "ok": 2.5}):
            f()
        pytrace_cffi.counter("one", math.nan)
        pytrace_cffi.counter("two", {"up": math.inf, "down": -math.inf, "n": 1})
        pytrace_cffi.instant("mark", {"v": math.nan})
    return t.trace


def test_non_finite_numbers_are_written_as_strings_in_every_json(tmp_path):
    trace = traced_non_finite()
    trace.export_chrome_trace(str(tmp_path / "t.json"))
    trace.export_chrome_trace(str(tmp_path / "t.json.gz"))
    events = strict_json((tmp_path / "t.json").read_text())["traceEvents"]
    assert events == strict_json(gzip.open(tmp_path / "t.json.gz").read())["traceEvents"]
    region = next(e for e in events if e.get("name") == "region")
    assert {k: region["args"][k] for k in ("nan", "inf", "minus", "ok")} == {
        "nan": "NaN", "inf": "Infinity", "minus": "-Infinity", "ok": 2.5}
    marks = {e["name"]: e["args"] for e in events if e["ph"] in ("i", "C")}
    assert marks == {"one": {"one": "NaN"}, "two": {"up": "Infinity", "down": "-Infinity",
                                                    "n": 1}, "mark": {"v": "NaN"}}
    write_html(trace, str(tmp_path / "t.html"))
    meta = page_data(tmp_path / "t.html")
    assert {"nan": "NaN", "inf": "Infinity", "minus": "-Infinity", "ok": 2.5}.items() <= \
        next(iter(meta["key_args"].values())).items()
    trace.export_perfetto(str(tmp_path / "t.pftrace"))        # doubles: nothing to refuse
    # read back from our JSON, a counter's values are numbers again, and every
    # format is valid again
    again = read_trace(str(tmp_path / "t.json"))
    counters = {m.name: m.args for m in again.marks if m.kind == "C"}
    assert math.isnan(counters["one"]["one"])
    assert counters["two"] == {"up": math.inf, "down": -math.inf, "n": 1}
    again.export_perfetto(str(tmp_path / "again.pftrace"))
    again.export_chrome_trace(str(tmp_path / "again.json"))
    strict_json((tmp_path / "again.json").read_text())


def test_a_saved_trace_holds_valid_json_and_reads_its_counters_back_as_numbers(tmp_path):
    trace = traced_non_finite()
    trace.save(str(tmp_path / "saved"))
    spilled = traced_non_finite(max_events=64, output=str(tmp_path / "spilled"))
    for directory in ("saved", "spilled"):
        for name in ("meta.json", "hashes.json", "params.json"):
            strict_json((tmp_path / directory / name).read_text())
        loaded = pytrace_cffi.load(str(tmp_path / directory))
        counters = {m.name: m.args for m in loaded.marks if m.kind == "C"}
        assert math.isnan(counters["one"]["one"])
        assert counters["two"] == {"up": math.inf, "down": -math.inf, "n": 1}
        # args are text for other tools: a string is what the JSON holds
        assert [m.args for m in loaded.marks if m.kind == "i"] == [{"v": "NaN"}]
        region = next(args for key, args in loaded.key_args.items()
                      if loaded.names[key] == "region")
        assert region["nan"] == "NaN" and region["ok"] == 2.5
    assert len(spilled.load()) == len(trace)


def test_merge_writes_valid_json_from_a_torch_trace_carrying_nan(tmp_path):
    trace = traced_non_finite()
    torch_path = tmp_path / "torch.json"
    torch_trace(trace, torch_path, {"x": math.nan, "y": [math.inf, 1]})
    assert "NaN" in torch_path.read_text()        # json.dumps wrote it bare, as torch may
    pytrace_cffi.merge_torch(trace, str(torch_path), str(tmp_path / "m.json"))
    events = strict_json((tmp_path / "m.json").read_text())["traceEvents"]
    op = next(e for e in events if e.get("name") == "aten::fake")
    assert op["args"] == {"x": "NaN", "y": ["Infinity", 1]}
    marks = {e["name"]: e["args"] for e in events if e["ph"] in ("i", "C")}
    assert marks["one"] == {"one": "NaN"}


# -- paths that are not UTF-8 ------------------------------------------------

def test_hash_ids_of_valid_names_are_those_written_before():
    # computed by pytrace_cffi before names that are not UTF-8 were handled
    assert hash_id("") == 13020603013274838756
    assert hash_id("a") == 3405396810240292928
    assert hash_id("/tmp/prog.py(3): f") == 14016299016286381868
    assert hash_id("caf\u00e9.py(1): g") == 13232701009283383019
    assert hash_id("\u2713 emoji \U0001F600") == 18024032874266452409
    assert hash_id("<built-in method append of list object>") == 930243073839423025


def test_the_hash_id_of_an_undecodable_name_is_that_of_its_bytes():
    def blake(data):
        return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")
    assert hash_id("/tmp/d\udcff/prog.py(1): f") == blake(b"/tmp/d\xff/prog.py(1): f")
    assert hash_id("odd \ud800") == blake(b"odd \xed\xa0\x80")   # not from a path


@pytest.fixture
def odd_dir(tmp_path):
    """A directory whose name holds the byte 0xff (not UTF-8)."""
    path = os.path.join(os.fsencode(tmp_path), b"d\xff")
    try:
        os.mkdir(path)
    except OSError:
        pytest.skip("the file system takes only UTF-8 names")
    return os.fsdecode(path)


def test_run_of_a_script_in_a_directory_that_is_not_utf8(odd_dir):
    script = os.path.join(odd_dir, "prog.py")
    with open(script, "w") as f:
        f.write("import sys\ndef g():\n    return 1\ng()\nsys.exit(3)\n")
    outputs = {"json": "s.json", "gz": "s.json.gz", "html": "s.html", "pftrace": "s.pftrace",
               "dir": "saved"}
    shown = os.fsdecode(os.fsencode(odd_dir)).replace("\udcff", "\ufffd")
    for name in outputs.values():
        out = os.path.join(odd_dir, name)
        proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "--no-trim-paths",
                               "-o", out, script], env=ENV, capture_output=True, timeout=120)
        assert proc.returncode == 3, proc.stderr.decode(errors="replace")
        assert b"Traceback" not in proc.stderr
    read = os.path.join(odd_dir, outputs["json"])
    with open(read, "rb") as fh:
        names = {e["name"] for e in strict_json(fh.read().decode("utf-8"))["traceEvents"]}
    assert f"{shown}/prog.py(2): g" in names
    with gzip.open(os.path.join(odd_dir, outputs["gz"])) as fh:
        assert f"{shown}/prog.py(2): g" in {e["name"] for e in strict_json(
            fh.read().decode("utf-8"))["traceEvents"]}
    page = page_data(pathlib.Path(os.path.join(odd_dir, outputs["html"])))
    assert f"{shown}/prog.py(2): g" in page["names"]
    # our own directory keeps the name as Python shows it
    loaded = pytrace_cffi.load(os.path.join(odd_dir, outputs["dir"]))
    assert f"{odd_dir}/prog.py(2): g" in loaded.names
    # .pftrace strings are UTF-8: the byte is U+FFFD there
    pftrace = os.path.join(odd_dir, "u.pftrace")
    loaded.export_perfetto(pftrace, compress=False)
    with open(pftrace, "rb") as fh:
        data = fh.read()
    assert f"{shown}/prog.py(2): g".encode("utf-8") in data and b"\\udc" not in data
    # a summary on a stdout that takes only UTF-8
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "summary",
                           os.path.join(odd_dir, outputs["dir"])], capture_output=True,
                          env=dict(ENV, PYTHONIOENCODING="utf-8:strict"), timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert f"{shown}/prog.py(2): g".encode("utf-8") in proc.stdout


def test_save_and_a_spilled_stop_into_a_directory_that_is_not_utf8(odd_dir):
    code = compile("def h():\n    return 1\nfor _ in range(300):\n    h()\n",
                   os.path.join(odd_dir, "mod.py"), "exec")
    name = f"{odd_dir}/mod.py(1): h"
    with pytrace_cffi.trace(trim_paths=False) as t:
        exec(code, {})
    t.trace.save(os.path.join(odd_dir, "saved"))
    assert pytrace_cffi.load(os.path.join(odd_dir, "saved")).names.count(name) == 1
    pytrace_cffi.start(max_events=64, output=os.path.join(odd_dir, "spill"), trim_paths=False)
    exec(code, {})
    spilled = pytrace_cffi.stop()
    loaded = spilled.load()
    assert sum(call.name == name for call in loaded) == 300
    loaded.export_chrome_trace(os.path.join(odd_dir, "spill.json"))
    with open(os.path.join(odd_dir, "spill.json"), "rb") as fh:
        names = {e["name"] for e in strict_json(fh.read().decode("utf-8"))["traceEvents"]}
    assert name.replace("\udcff", "\ufffd") in names


# -- a name of megabytes -------------------------------------------------------

LONG_NAME_SCRIPT = """
import json, os, sys, threading
import pytrace_cffi
from pytrace_cffi.model.realtime import monotonic_to_realtime
from pytrace_cffi.render.html import write_html
from pytrace_cffi.reading import read_trace
out = sys.argv[1]
name = "x" * (2 ** 20 + 100)
code = compile(f"def {name}():\\n    return 1\\n{name}()\\n", "long.py", "exec")
with pytrace_cffi.trace() as t:
    exec(code, {})
trace = t.trace
trace.export_chrome_trace(os.path.join(out, "t.json"))
trace.export_chrome_trace(os.path.join(out, "t.json.gz"))
trace.export_perfetto(os.path.join(out, "t.pftrace"))
write_html(trace, os.path.join(out, "t.html"))
trace.save(os.path.join(out, "saved"))
for source in ("t.json", "t.json.gz", "saved"):
    again = read_trace(os.path.join(out, source))
    assert sum(c.name == "long.py(1): " + name for c in again) == 1, source
    again.export_chrome_trace(os.path.join(out, "again.json"))
    again.export_perfetto(os.path.join(out, "again.pftrace"))
base = (trace.realtime_anchor["start"]["realtime_ns"] // 10 ** 9 - 10) * 10 ** 9
with open(os.path.join(out, "torch.json"), "w") as f:
    json.dump({"baseTimeNanoseconds": base, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "y" * 2 ** 21, "pid": trace.pid,
         "tid": threading.get_native_id(), "ts": 1.0, "dur": 1.0, "args": {}}]}, f)
pytrace_cffi.merge_torch(trace, os.path.join(out, "torch.json"), os.path.join(out, "m.json"))
pytrace_cffi.merge_torch(os.path.join(out, "t.json"), os.path.join(out, "torch.json"),
                         os.path.join(out, "m2.json"))
print("ok")
"""


def test_a_function_name_of_a_megabyte_is_written_and_read_in_every_format(tmp_path):
    # It used to hang export_chrome_trace for good (a record longer than the
    # formatter's buffer was never written): a timeout catches that.
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(LONG_NAME_SCRIPT),
                           str(tmp_path)], env=ENV, capture_output=True, text=True,
                          timeout=90)
    assert proc.stdout == "ok\n", proc.stderr
    events = json.loads((tmp_path / "m.json").read_text())["traceEvents"]
    assert {"long.py(1): " + "x" * (2 ** 20 + 100), "y" * 2 ** 21} <= {
        e.get("name") for e in events}

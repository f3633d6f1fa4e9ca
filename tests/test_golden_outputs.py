"""Every output format of a fixed set of traces, byte for byte: the guard for moving
code around (issue 21: behaviour stays exactly as it is). The traces are committed
under tests/data/golden/ (threads, marks and regions; the same spilled; a job of three
processes; torch names through the stand-in), made once by make_fixtures.py. Each is
read as `summary`/`export` read it and written as .json, .json.gz (its content),
.pftrace (compressed and not), .html, a saved directory (each file) and summary text;
the SHA-256 of each must equal hashes.json.

An intended change of an output (a new field, a fixed bug) changes these hashes: then
run with PYTRACE_GOLDEN_WRITE=1 once to rewrite hashes.json, and say in the commit
which outputs changed and why. Never rewrite them to make a move pass."""
import gzip
import hashlib
import json
import os

import pytest

from pytrace_cffi.reading import read_trace
from pytrace_cffi.render.summary import format_summary, summarize

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "data", "golden")
HASHES = os.path.join(GOLDEN, "hashes.json")
FIXTURES = ("threads", "spilled", "job", "torch")


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def _outputs(trace, where):
    """name -> SHA-256 of each output of trace, written under where."""
    out = {}
    trace.export_chrome_trace(os.path.join(where, "t.json"))
    with open(os.path.join(where, "t.json"), "rb") as f:
        out["json"] = _sha(f.read())
    trace.export_chrome_trace(os.path.join(where, "t.json.gz"))
    with gzip.open(os.path.join(where, "t.json.gz"), "rb") as f:    # not its header's mtime
        out["json.gz"] = _sha(f.read())
    for compress in (True, False):
        path = os.path.join(where, f"t{int(compress)}.pftrace")
        trace.export_perfetto(path, compress=compress)
        with open(path, "rb") as f:
            out[f"pftrace compress={compress}"] = _sha(f.read())
    from pytrace_cffi.render.html import write_html
    write_html(trace, os.path.join(where, "t.html"))
    with open(os.path.join(where, "t.html"), "rb") as f:
        out["html"] = _sha(f.read())
    saved = os.path.join(where, "saved")
    trace.save(saved)
    for name in sorted(os.listdir(saved)):
        with open(os.path.join(saved, name), "rb") as f:
            out[f"saved/{name}"] = _sha(f.read())
    for options in ({}, {"sort": "self", "limit": 5}, {"per_thread": True},
                    {"per_process": True}):
        text = format_summary(summarize(trace, **options), title="golden")
        out[f"summary {json.dumps(options, sort_keys=True)}"] = _sha(text.encode("utf-8"))
    return out


def _all_outputs(tmp_path):
    found = {}
    for name in FIXTURES:
        where = tmp_path / name
        where.mkdir()
        found[name] = _outputs(read_trace(os.path.join(GOLDEN, name)), str(where))
    return found


def test_every_format_of_the_golden_traces_is_unchanged(tmp_path):
    found = _all_outputs(tmp_path)
    if os.environ.get("PYTRACE_GOLDEN_WRITE"):
        with open(HASHES, "w", encoding="utf-8") as f:
            json.dump(found, f, indent=1, sort_keys=True)
            f.write("\n")
        pytest.skip("hashes.json rewritten (PYTRACE_GOLDEN_WRITE)")
    with open(HASHES, encoding="utf-8") as f:
        expected = json.load(f)
    changed = [f"{name}: {output}" for name in expected for output in expected[name]
               if found.get(name, {}).get(output) != expected[name][output]]
    extra = [f"{name}: {output}" for name in found for output in found[name]
             if output not in expected.get(name, {})]
    assert not changed and not extra, ("outputs differ from hashes.json:\n  "
                                       + "\n  ".join(changed + extra))

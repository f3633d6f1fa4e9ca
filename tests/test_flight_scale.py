"""Flight recorder dumps sized for 1,000 ranks (#30 item 10): events.bin
compressed (read back bounded; old uncompressed dumps still read), keys.jsonl
and key_sources.tsv holding only the keys the dump uses, stacks.tsv (the calls
open at the dump, which `report` reads instead of the ring), and dump_format
"stacks" (the stacks and the ring's last seconds only).

Size caps are literals; the inflated events are checked against an inflater
written here (zlib per piece, as the format's doc says), and the stacks read from
stacks.tsv against those walked from the ring."""
import json
import os
import shutil
import struct
import subprocess
import sys
import textwrap
import threading
import zlib

import pytest

import pytrace_cffi
from pytrace_cffi._core import lib
from pytrace_cffi.errors import TraceFormatError
from pytrace_cffi.flight.dumps import dump_facts, process_dumps
from pytrace_cffi.follow.recover import recover

from test_children import ROOT, TIMEOUT, _env_own_tmp, run_command

PLAIN_MAGIC = b"PTEVENTS"
PACKED_MAGIC = b"PTEVTZ01"


def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def _dump_here(tmp_path, name="d", compress=True, before=None):
    """A dump of this process's ring (a 2 MiB ring, filled by fib) in tmp_path/name."""
    pytrace_cffi.start(flight_recorder="2M", dumps_dir=str(tmp_path / "dumps"))
    try:
        if before is not None:
            before()
        for _ in range(8):
            fib(21)         # 8 * 35421 calls: 570 k events, twice the ring's
        if not compress:    # as dumps were written before compression
            assert lib.pt_flight_set_dump_options(0, 0) == lib.PT_OK
        path = pytrace_cffi.dump(path=str(tmp_path / name), reason="test")
        assert lib.pt_flight_wait(60_000_000_000) == 0
    finally:
        pytrace_cffi.stop()
    assert os.path.exists(os.path.join(path, "done.json"))
    return path


def _sizes(path):
    return {name: os.path.getsize(os.path.join(path, name)) for name in os.listdir(path)}


def _inflated_here(path):
    """events.bin's compressed pieces inflated by zlib alone (the format's doc)."""
    data = open(path, "rb").read()
    assert data[:8] == PACKED_MAGIC
    piece = struct.unpack("<I", data[8:12])[0]
    assert piece == 1 << 20
    out, at = [], 16
    while at < len(data):
        raw, packed = struct.unpack("<II", data[at:at + 8])
        block = zlib.decompress(data[at + 8:at + 8 + packed])
        assert len(block) == raw <= piece
        out.append(block)
        at += 8 + packed
    return b"".join(out)


def _calls(trace):
    return [(c.name, c.start_ns, c.end_ns, c.thread, c.parent) for c in trace]


def test_a_dump_is_compressed_small_and_reads_back_as_inflated_by_zlib(tmp_path):
    """A full 2 MiB ring of fib: its dump is under 512 KiB in all (2 MiB and more
    before: events.bin as it is), and the trace read back is the one its pieces make once
    inflated by zlib here."""
    path = _dump_here(tmp_path)
    sizes = _sizes(path)
    assert sum(sizes.values()) < 512 << 10, sizes
    events = os.path.join(path, "events.bin")
    with open(events, "rb") as f:
        assert f.read(8) == PACKED_MAGIC
    plain = _inflated_here(events)
    assert plain[:8] == PLAIN_MAGIC and len(plain) > 1 << 20     # (the ring, nearly whole)
    copy = tmp_path / "plain"
    shutil.copytree(path, copy)
    (copy / "events.bin").write_bytes(plain)
    ours, theirs = pytrace_cffi.load(path), pytrace_cffi.load(str(copy))
    assert len(ours) > 60_000
    assert [c[:1] + c[3:] for c in _calls(ours)] == [c[:1] + c[3:] for c in _calls(theirs)]
    # (the clock's rate is measured by each load: within a microsecond)
    assert all(abs(a[1] - b[1]) < 1000 and abs(a[2] - b[2]) < 1000
               for a, b in zip(_calls(ours), _calls(theirs)))


def test_an_old_uncompressed_dump_without_stacks_tsv_still_reads(tmp_path):
    """A dump as written before (events.bin plain, no stacks.tsv): load() and
    `report` read it, and its stacks are those the ring's walk gives."""
    path = _dump_here(tmp_path, compress=False)
    with open(os.path.join(path, "events.bin"), "rb") as f:
        assert f.read(8) == PLAIN_MAGIC
    for name in ("stacks.tsv", "stack_sources.tsv"):
        os.unlink(os.path.join(path, name))
    trace = pytrace_cffi.load(path)
    assert sum(1 for c in trace if c.name.endswith(": fib")) > 60_000
    facts = dump_facts(path)
    main = next(t for t in facts["threads"] if t["native_id"] == os.getpid())
    assert main["stack"][-1]["name"].endswith(": _dump_here")


def test_stacks_tsv_gives_the_stacks_the_rings_walk_gives(tmp_path):
    """dump_facts from stacks.tsv (what report reads) equals dump_facts from the
    ring walked, stacks.tsv set aside; the dump's own calls are left out of both."""
    path = _dump_here(tmp_path)
    quick = dump_facts(path)
    for name in ("stacks.tsv", "stack_sources.tsv"):
        os.rename(os.path.join(path, name), os.path.join(tmp_path, name))
    walked = dump_facts(path)
    assert quick["threads"] == walked["threads"]
    main = next(t for t in quick["threads"] if t["native_id"] == os.getpid())
    names = [f["name"] for f in main["stack"]]
    assert names[-1].endswith(": _dump_here") and not any("pytrace_cffi" in n for n in names)


MANY_THEN_FIB = """
import sys
import pytrace_cffi
from pytrace_cffi._core import lib

namespace = {}
exec(compile("\\n".join(f"def f{i}():\\n    return {i}\\n" for i in range(3000)),
             sys.argv[2], "exec"), namespace)

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

pytrace_cffi.start(flight_recorder="2M", dumps_dir=sys.argv[1] + "-dumps")
for i in range(3000):
    namespace[f"f{i}"]()
for _ in range(8):
    fib(21)                 # 8 * 35421 calls: 570 k events, twice the ring's
pytrace_cffi.dump(path=sys.argv[1], reason="test")
assert lib.pt_flight_wait(60_000_000_000) == 0
pytrace_cffi.stop()
"""


def test_a_dump_names_only_the_keys_its_events_use(tmp_path):
    """3,000 functions called once, then only fib until the ring has lost them:
    the dump's keys.jsonl and key_sources.tsv hold a few lines (the journal's
    keys.jsonl: every key, over 300 KiB), and every call of the dump is named.
    In a process of its own: a test process's journal holds every key of the
    tests before it, many on the lines the dump keeps."""
    script = tmp_path / "prog.py"
    script.write_text(MANY_THEN_FIB)
    path = tmp_path / "d"
    proc = subprocess.run([sys.executable, str(script), str(path), str(tmp_path / "many.py")],
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    sizes = _sizes(path)
    assert sizes["keys.jsonl"] < 96 << 10 and sizes["key_sources.tsv"] < 16 << 10, sizes
    trace = pytrace_cffi.load(str(path))
    assert not any(c.name.startswith("<unnamed") for c in trace)
    assert not any(c.name.endswith(": f7") for c in trace)


STUCK = """
import sys, threading, time
import pytrace_cffi

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)

def wait_for_peers():
    time.sleep(1.5)

pytrace_cffi.start(flight_recorder="4M", dumps_dir=sys.argv[1], dump_format=sys.argv[2],
                   **({"dump_window": 0.2} if sys.argv[2] == "stacks" else {}))
threading.Timer(1.0, lambda: pytrace_cffi.dump(reason="look")).start()
t0 = time.monotonic()
while time.monotonic() - t0 < 0.5:
    fib(15)
wait_for_peers()
pytrace_cffi.stop()
"""


@pytest.mark.parametrize("dump_format", ["stacks", "dir"])
def test_the_stacks_format_keeps_the_stacks_and_the_last_seconds(tmp_path, dump_format):
    """dump_format "stacks" (the window 0.2 s): the ring's fib of 0.5 s before is
    left out (events.bin under 64 KiB: over 128 KiB compressed in the full format), and
    report still says how long the main thread has waited (0.5 s: it began before
    the window, stacks.tsv has its start)."""
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent(STUCK).lstrip("\n"))
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    proc = run_command([sys.executable, str(script), str(tmp_path / "dumps"), dump_format],
                       tmp_path, env, TIMEOUT)
    assert proc.returncode == 0, proc.stderr
    [path] = process_dumps(str(tmp_path / "dumps"))
    events = os.path.getsize(os.path.join(path, "events.bin"))
    if dump_format == "stacks":
        assert events < 64 << 10
        assert not os.path.exists(os.path.join(os.path.dirname(path), "trace"))
    else:
        assert events > 128 << 10
    report = run_command([sys.executable, "-m", "pytrace_cffi", "report",
                          str(tmp_path / "dumps")], tmp_path, env, TIMEOUT)
    assert report.returncode == 0, report.stderr
    lines = report.stdout.splitlines()
    assert "in time.sleep for 0.5 s" in lines[1], report.stdout
    assert lines[-2:] == ["    prog.py:8: wait_for_peers  0.5 s", "    time.sleep                 0.5 s"], \
        report.stdout


def _packed(*pieces, piece=1 << 20):
    """A compressed events file of (inflated size, deflated bytes) pieces."""
    return (PACKED_MAGIC + struct.pack("<II", piece, 0)
            + b"".join(struct.pack("<II", raw, len(z)) + z for raw, z in pieces))


@pytest.fixture(scope="module")
def a_dump(tmp_path_factory):
    return _dump_here(tmp_path_factory.mktemp("dump"))


@pytest.mark.parametrize("content, error", [
    (_packed(piece=1 << 31), "not a compressed events file"),
    (_packed((1 << 20, zlib.compress(bytes(64 << 20)))), "does not inflate to the 1048576"),
    (_packed((100, b"not zlib at all")), "does not inflate"),
    (_packed((100, zlib.compress(bytes(100))))[:-3], "a piece of 100 bytes deflated to"),
    (_packed((2 << 20, zlib.compress(bytes(2 << 20)))), "a piece of 2097152 bytes"),
    (PACKED_MAGIC + b"\x00", "cut short in its header"),
], ids=["piece size", "bomb", "garbage", "cut", "big piece", "header"])
def test_a_hostile_compressed_events_file_is_refused_in_bounds(tmp_path, a_dump, content,
                                                               error):
    """A damaged or hostile events.bin (a piece that inflates past its size: 64
    MiB of zeros in 64 KiB; garbage; cut short; sizes past the bounds) is a
    TraceFormatError, inflated one bounded piece at a time."""
    path = tmp_path / "d"
    shutil.copytree(a_dump, path)
    with open(path / "events.bin", "wb") as f:
        f.write(content)
    with pytest.raises(TraceFormatError) as raised:
        recover(str(path))
    assert error in str(raised.value) and "events.bin" in str(raised.value)
    with pytest.raises(TraceFormatError):
        pytrace_cffi.load(str(path))


def test_a_damaged_stacks_tsv_costs_report_the_rings_times_only(tmp_path, a_dump):
    """A stacks.tsv that is not one: report reads dump.json alone (its stacks,
    without since when), never fails."""
    path = str(tmp_path / "d")
    shutil.copytree(a_dump, path)
    with open(os.path.join(path, "stacks.tsv"), "w") as f:
        f.write("open\t0\t0\tp\tnot a key\t1\n")
    env = _env_own_tmp(tmp_path)
    env["PYTHONPATH"] = ROOT
    report = run_command([sys.executable, "-m", "pytrace_cffi", "report", path],
                         tmp_path, env, TIMEOUT)
    assert report.returncode == 0, report.stderr
    assert "_dump_here (test_flight_scale.py:" in report.stdout
    assert json.loads(open(os.path.join(path, "dump.json")).read())["reason"] == "test"


def test_the_stacks_window_goes_with_the_stacks_format():
    with pytest.raises(ValueError) as raised:
        pytrace_cffi.start(flight_recorder=True, dump_window=5)
    assert str(raised.value) == "dump_window goes with dump_format='stacks'"


def test_a_stack_deeper_than_stacks_tsv_keeps_has_both_ends_and_the_count_between(tmp_path):
    """3,001 open calls of down(): stacks.tsv keeps the outermost 512 and the
    innermost 512 open calls, and one entry between stands for the rest, with
    their count and the start of the outermost of them. (It kept the outermost
    1,024 alone, the innermost calls, where a thread is stuck, lost unsaid.)"""
    from pytrace_cffi.flight.stacks import is_gap, stack_chains

    def down(n):
        if n:
            return down(n - 1)
        path = pytrace_cffi.dump(path=str(tmp_path / "deep"), reason="deep")
        assert lib.pt_flight_wait(60_000_000_000) == 0
        return path

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10_000)
    pytrace_cffi.start(flight_recorder="8M", dumps_dir=str(tmp_path / "dumps"))
    try:
        path = down(3000)
    finally:
        pytrace_cffi.stop()
        sys.setrecursionlimit(limit)
    _, chains = stack_chains(path)
    chain = max(chains.values(), key=len)           # the main thread's
    gaps = [q for q, (name, *_) in enumerate(chain) if is_gap(name)]
    assert len(gaps) == 1
    gap = gaps[0]
    assert gap == 512                               # (none of the outermost is ours)
    count = int(chain[gap][0][1:].split()[0].replace(",", ""))
    downs = [q for q, (name, *_) in enumerate(chain) if name.endswith(": down")]
    assert len(downs) + count == 3001               # every call between is a down()
    assert chain[gap - 1][0].endswith(": down") and chain[-1][0].endswith(": down")
    assert 500 <= len(chain) - gap - 1 <= 512       # (the dump's own calls left out)
    assert chain[gap - 1][1] <= chain[gap][1] <= chain[gap + 1][1]
    # report's stack (dump.json's frames, whole, with the starts of the chain)
    # shows no gap entry: the frames have those calls
    facts = dump_facts(path)
    main = next(t for t in facts["threads"] if t["native_id"] == threading.get_native_id())
    names = [frame["name"] for frame in main["stack"]]
    assert not any(is_gap(name) for name in names)
    assert sum(name.endswith(": down") for name in names) == 3001

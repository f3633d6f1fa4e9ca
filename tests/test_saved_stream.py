"""load() of a saved directory (slices.bin) streams: the loader checks each thread
batch by batch and keeps no slice table; exports read the file again a batch at a
time (model/saved.py _SlicesFile). The oracle is the table the loader used to
build (thread_slices()): every output from the batches equals the table's."""
import os
import struct
import subprocess
import sys
import threading

import pytest

import pytrace_cffi
from helpers import PROC_STATUS
from pytrace_cffi import TraceFormatError
from pytrace_cffi.model import saved as saved_module
from test_streaming import ROOT, both_ways, fib, threads_marks_and_calls_open_at_stop

SLICE = struct.Struct("<qqIIqII")
HEADER = 24


@pytest.fixture(scope="module")
def saved_dir(tmp_path_factory):
    directory = tmp_path_factory.mktemp("saved") / "trace"
    trace = threads_marks_and_calls_open_at_stop()
    trace.save(str(directory))
    chrome = tmp_path_factory.mktemp("chrome") / "original.json"
    trace.export_chrome_trace(str(chrome))
    return directory, chrome.read_bytes(), len(trace)


@pytest.mark.parametrize("batch", [1, 7, 1 << 16])
def test_a_loaded_directory_streams_every_output_in_batches(saved_dir, tmp_path, monkeypatch,
                                                            batch):
    """Batches of 1, 7 and 64K slices (cut inside threads and subtrees): .pftrace,
    .json, save(), .html, the summary and iteration equal the table's, and the
    JSON equals the one the original trace wrote."""
    monkeypatch.setattr(saved_module, "SLICE_BATCH", batch)
    directory, original_json, calls = saved_dir
    trace = pytrace_cffi.load(str(directory))
    assert not trace.slices_built()
    assert len(trace) == calls
    assert sum(o for _, _, o, _ in trace.thread_counts()) > 5    # open at stop
    both_ways(trace, tmp_path)
    again = pytrace_cffi.load(str(directory))
    again.export_chrome_trace(str(tmp_path / "again.json"))
    assert (tmp_path / "again.json").read_bytes() == original_json
    assert not again.slices_built()


def test_pftrace_of_a_loaded_directory_decodes_as_its_json(saved_dir, tmp_path, monkeypatch):
    pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")
    from test_perfetto import assert_same_as_json
    monkeypatch.setattr(saved_module, "SLICE_BATCH", 5)
    trace = pytrace_cffi.load(str(saved_dir[0]))
    for compress in (False, True):
        out = tmp_path / str(compress)
        out.mkdir()
        assert_same_as_json(trace, out, compress)
    assert not trace.slices_built()


def spilled(tmp_path):
    out = tmp_path / "spill"
    pytrace_cffi.start(max_events=2000, output=str(out))
    t = threading.Thread(target=fib, args=(11,))
    t.start()
    fib(13)
    t.join()
    pytrace_cffi.stop()
    return out


@pytest.mark.parametrize("kind", ["slices", "spilled"])
def test_saving_a_loaded_trace_over_its_own_directory_keeps_it(saved_dir, tmp_path, kind):
    """The trace reads its file again while save() replaces it (and removes a
    spilled directory's events.bin): it holds the data it was loaded from."""
    if kind == "slices":
        directory = tmp_path / "copy"
        directory.mkdir()
        for name in os.listdir(saved_dir[0]):
            (directory / name).write_bytes((saved_dir[0] / name).read_bytes())
    else:
        directory = spilled(tmp_path)
    trace = pytrace_cffi.load(str(directory))
    trace.export_chrome_trace(str(tmp_path / "before.json"))
    trace.save(str(directory))
    assert not (directory / "events.bin").exists()
    trace.export_chrome_trace(str(tmp_path / "after.json"))
    pytrace_cffi.load(str(directory)).export_chrome_trace(str(tmp_path / "reloaded.json"))
    before = (tmp_path / "before.json").read_bytes()
    assert (tmp_path / "after.json").read_bytes() == before
    assert (tmp_path / "reloaded.json").read_bytes() == before


def copy_of(saved_dir, tmp_path):
    directory = tmp_path / "copy"
    directory.mkdir()
    for name in os.listdir(saved_dir[0]):
        (directory / name).write_bytes((saved_dir[0] / name).read_bytes())
    return directory


def records(directory):
    data = (directory / "slices.bin").read_bytes()
    return [list(SLICE.unpack_from(data, HEADER + i * SLICE.size))
            for i in range((len(data) - HEADER) // SLICE.size)]


def rewrite(directory, rows):
    path = directory / "slices.bin"
    data = bytearray(path.read_bytes())
    for i, row in enumerate(rows):
        SLICE.pack_into(data, HEADER + i * SLICE.size, *row)
    with open(path, "r+b") as f:        # in place: the loaded trace holds this file
        f.write(data)


@pytest.mark.parametrize("export", ["json", "pftrace", "html", "iterate"])
def test_a_file_damaged_after_load_raises_at_export(saved_dir, tmp_path, export, monkeypatch):
    monkeypatch.setattr(saved_module, "SLICE_BATCH", 16)
    directory = copy_of(saved_dir, tmp_path)
    trace = pytrace_cffi.load(str(directory))
    rows = records(directory)
    rows[40][2] = 10 ** 6                   # a key no name has
    rewrite(directory, rows)
    with pytest.raises(TraceFormatError, match="slice 40 is inconsistent"):
        if export == "json":
            trace.export_chrome_trace(str(tmp_path / "out.json"))
        elif export == "pftrace":
            trace.export_perfetto(str(tmp_path / "out.pftrace"))
        elif export == "html":
            from pytrace_cffi.render.html import write_html
            write_html(trace, str(tmp_path / "out.html"))
        else:
            list(trace)
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "out.pftrace").exists()


def test_a_file_truncated_after_load_raises_at_export(saved_dir, tmp_path):
    directory = copy_of(saved_dir, tmp_path)
    trace = pytrace_cffi.load(str(directory))
    os.truncate(directory / "slices.bin", HEADER + 10 * SLICE.size)
    with pytest.raises(TraceFormatError, match="truncated"):
        trace.export_chrome_trace(str(tmp_path / "out.json"))


def test_a_parent_that_is_no_open_ancestor_is_refused(saved_dir, tmp_path):
    """Slices come parent first, each subtree whole: a call whose parent ended
    before an unrelated call began (order the exporters cannot nest) is refused at
    load, where the old whole-table check let it through to a failing export."""
    directory = copy_of(saved_dir, tmp_path)
    rows = records(directory)
    # thread 0's first root with a child, then the next root after its subtree;
    # move that next root in between the parent and its first child's sibling
    roots = [i for i, r in enumerate(rows) if r[4] == -1]
    first, second = roots[0], roots[1]
    assert second > first + 1, "the first root has callees"
    child = first + 1
    # a root ending before the child starts, inserted between parent and child
    stray = [rows[first][0], rows[first][0], rows[first][2], 0, -1, 0, 0]
    shifted = rows[:child] + [stray] + [
        [r[0], r[1], r[2], r[3], (r[4] + 1 if r[4] >= child else r[4]), r[5], r[6]]
        for r in rows[child:]]
    # the parent's callees now point past the stray root: still earlier, still
    # enclosing, one level down - only the order says it is wrong
    path = directory / "slices.bin"
    data = bytearray(path.read_bytes()[:HEADER])
    struct.pack_into("<Q", data, 16, len(shifted))
    for row in shifted:
        data += SLICE.pack(*row)
    path.write_bytes(bytes(data))
    import json
    meta = json.loads((directory / "meta.json").read_text())
    meta["threads"][0]["n_slices"] += 1
    (directory / "meta.json").write_text(json.dumps(meta))
    with pytest.raises(TraceFormatError, match=rf"thread 0, slice {child + 1} is inconsistent"):
        pytrace_cffi.load(str(directory))


BIG_LOAD_SCRIPT = PROC_STATUS + r"""
import sys
import pytrace_cffi
import pytrace_cffi.render.html, pytrace_cffi.render.summary  # noqa




before = status("VmRSS")
trace = pytrace_cffi.load(sys.argv[1])
trace.export_perfetto(sys.argv[2] + ".pftrace")
trace.export_chrome_trace(sys.argv[2] + ".json")
pytrace_cffi.render.html.write_html(trace, sys.argv[2] + ".html")
rows = pytrace_cffi.render.summary.summarize(trace, limit=None)
fib = [row for row in rows if row.name.endswith(": fib")][0]
print(len(trace), status("VmHWM") - before, fib.calls, int(trace.slices_built()))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self")
def test_a_big_saved_directory_converts_in_bounded_memory(tmp_path):
    """2.7M calls saved (108 MB of slices.bin): a fresh process loads them and
    writes .pftrace, .json and .html and a summary, its peak RSS growing by well
    under the 40 bytes a call the table took."""
    script = tmp_path / "make.py"
    script.write_text("import sys, pytrace_cffi\n"
                      "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
                      "pytrace_cffi.start(c_calls=False)\nfib(30)\n"
                      "pytrace_cffi.stop().save(sys.argv[1])\n")
    env = dict(os.environ, PYTHONPATH=ROOT)
    subprocess.run([sys.executable, str(script), str(tmp_path / "saved")], env=env,
                   check=True, timeout=600)
    result = subprocess.run([sys.executable, "-c", BIG_LOAD_SCRIPT, str(tmp_path / "saved"),
                             str(tmp_path / "out")], env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    calls, peak, fib_calls, built = map(int, result.stdout.split())
    assert fib_calls == 2_692_537           # fib(30) makes 2 * fib(31) - 1 calls
    assert calls >= fib_calls
    assert peak < 8 * calls, f"{peak / calls:.1f} bytes per call"
    assert not built


def test_loaded_traces_hold_a_bounded_number_of_files(saved_dir, tmp_path, monkeypatch):
    """Beyond MAX_HELD loaded traces (a job of thousands of processes), the least
    recently read file is closed and opened again by name when read next."""
    monkeypatch.setattr(saved_module.HeldFile, "MAX_HELD", 2)
    traces = []
    for number in range(5):
        directory = tmp_path / f"copy{number}"
        directory.mkdir()
        for name in os.listdir(saved_dir[0]):
            (directory / name).write_bytes((saved_dir[0] / name).read_bytes())
        traces.append(pytrace_cffi.load(str(directory)))

    def open_files():
        return sum(1 for t in traces if t._streams.file._file is not None)
    assert open_files() == 2
    for number, trace in enumerate(traces):
        trace.export_chrome_trace(str(tmp_path / f"{number}.json"))
        assert (tmp_path / f"{number}.json").read_bytes() == saved_dir[1]
        assert open_files() == 2
    # a closed one whose file was replaced since: a clear error, not other data
    replacement = tmp_path / "copy0" / "slices.new"
    replacement.write_bytes((tmp_path / "copy0" / "slices.bin").read_bytes())
    os.replace(replacement, tmp_path / "copy0" / "slices.bin")     # same bytes, new file
    assert traces[0]._streams.file._file is None
    with pytest.raises(TraceFormatError, match="replaced or changed since it was loaded"):
        traces[0].export_chrome_trace(str(tmp_path / "again.json"))


@pytest.mark.parametrize("held", [1, 64])
def test_a_spilled_trace_saved_over_its_directory_with_its_file_closed(tmp_path, monkeypatch,
                                                                        held):
    """Its events.bin stays until slices.bin is written: read again by name."""
    monkeypatch.setattr(saved_module.HeldFile, "MAX_HELD", held)
    directory = spilled(tmp_path)
    trace = pytrace_cffi.load(str(directory))
    other = pytrace_cffi.load(str(saved_dir_copy(tmp_path, directory)))
    trace.export_chrome_trace(str(tmp_path / "before.json"))
    other.export_chrome_trace(str(tmp_path / "other.json"))   # closes trace's file at 1
    trace.save(str(directory))
    assert not (directory / "events.bin").exists()
    pytrace_cffi.load(str(directory)).export_chrome_trace(str(tmp_path / "reloaded.json"))
    assert (tmp_path / "reloaded.json").read_bytes() == (tmp_path / "before.json").read_bytes()


def saved_dir_copy(tmp_path, source):
    target = tmp_path / "other"
    target.mkdir()
    for name in os.listdir(source):
        (target / name).write_bytes((source / name).read_bytes())
    return target

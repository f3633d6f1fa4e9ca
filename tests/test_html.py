"""The HTML page: self-contained, data embedded safely, and it renders in Chromium."""
import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import types

import pytest

import pytrace_cffi
from pytrace_cffi._core import ffi
from pytrace_cffi.render import html as html_module
from pytrace_cffi.render.html import CALLS_PER_CHUNK, write_html
from pytrace_cffi.model.trace import ThreadInfo, Trace

from helpers import CHROMIUM_INSTALL, missing_tool

CHROMIUM = "/usr/bin/chromium"
SCRIPT_CLOSER = "</script><b>injected"


def html_leaf(n):
    return sorted(range(n))


def html_branch(n):
    return [html_leaf(i) for i in range(n)]


# A function whose name tries to close the data's <script> element.
hostile = types.FunctionType(html_leaf.__code__.replace(co_name=SCRIPT_CLOSER), globals())


@pytest.fixture(scope="module")
def trace():
    with pytrace_cffi.trace() as t:
        worker = threading.Thread(target=html_branch, args=(30,), name="html-worker")
        worker.start()
        html_branch(20)
        hostile(3)
        worker.join()
    return t.trace


@pytest.fixture(scope="module")
def page(trace, tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "trace.html"
    write_html(trace, path)
    return path


def embedded(text, element_id):
    match = re.search(f'<script type="application/json" id="{element_id}">(.*?)</script>',
                      text, re.S)
    assert match, element_id
    return json.loads(match.group(1))


def test_page_is_self_contained(page):
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", text, re.I)
    assert "http://" not in text and "https://" not in text
    assert not re.search(r"<(link|img|iframe)\b", text, re.I)
    # The data, the page script and nothing else: no script is loaded from anywhere.
    assert len(re.findall(r"<script\b", text)) == 3
    assert len(re.findall(r"</script", text)) == 3


def test_data_is_embedded_and_names_cannot_close_the_script(trace, page):
    text = page.read_text(encoding="utf-8")
    assert SCRIPT_CLOSER not in text
    meta = embedded(text, "pt-meta")
    slices = embedded(text, "pt-slices")
    assert meta["names"] == trace.names
    assert any(name.endswith(": " + SCRIPT_CLOSER) for name in meta["names"])
    assert [t["name"] for t in meta["threads"]] == [t.name for t in trace.threads]
    assert [len(flat) // 4 for flat in slices] == [n for _, _, n in trace.thread_slices()]
    # per call: start after the previous start, duration, key, depth
    calls = list(trace)
    first = [c for c in calls if c.thread == trace.threads[0].native_id]
    flat = slices[0]
    starts, time = [], trace.start_ns
    for i in range(len(first)):
        time += flat[4 * i]
        starts.append(time)
    assert starts == [c.start_ns for c in first]
    assert flat[1::4] == [c.end_ns - c.start_ns for c in first]
    assert [trace.names[k] for k in flat[2::4]] == [c.name for c in first]
    summary = {row[0]: row for row in meta["summary"]["rows"]}
    leaf = next(name for name in summary if name.endswith(": html_leaf"))
    assert summary[leaf][1] == 20 + 30


def synthetic_trace(count):
    """`count` back-to-back calls of one function on one thread, 10 ns apart."""
    slices = ffi.new("pt_slice[]", count)
    for i in range(count):
        slices[i].start, slices[i].end = 1000 + 10 * i, 1005 + 10 * i
        slices[i].key, slices[i].parent = 1, -1
    return Trace(names=["<unknown>", "f.py(1): tick"], key_kinds=["python", "python"],
                 key_args={}, threads=[ThreadInfo(0, 7, 7, "MainThread", 2 * count, 0)],
                 slices=[(slices, count)], start_ns=1000, stop_ns=1000 + 10 * count,
                 pid=1, python_version="3", backend="test", clock="monotonic",
                 params={"modules": [], "optimizer_steps": []})


@pytest.mark.parametrize("count", [2 * CALLS_PER_CHUNK, 2 * CALLS_PER_CHUNK + 3])
def test_large_traces_are_written_in_chunks_that_join_up(tmp_path, count):
    path = tmp_path / "big.html"
    write_html(synthetic_trace(count), path)
    flat = embedded(path.read_text(encoding="utf-8"), "pt-slices")[0]
    assert len(flat) == 4 * count
    assert flat[:8] == [0, 5, 1, 0, 10, 5, 1, 0]
    assert set(flat[4::4]) == {10}
    assert not list(tmp_path.glob("*.tmp*"))


# --- in a real browser --------------------------------------------------------------

def install_chromium():
    """Chromium from Debian when missing; None if it cannot be installed."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    if shutil.which("apt-get") and os.geteuid() == 0:
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        for command in (["apt-get", "update"], ["apt-get", "install", "-y", "chromium"]):
            try:
                subprocess.run(command, env=env, capture_output=True, timeout=1200)
            except (OSError, subprocess.TimeoutExpired):
                return None
    return CHROMIUM if os.path.exists(CHROMIUM) else None


def run_chromium(binary, tmp_path_factory, *args):
    """stdout of headless chromium with args, in a fresh profile, off the network."""
    profile = tmp_path_factory.mktemp("chromium-profile")
    command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync",
               f"--user-data-dir={profile}", *args]
    proc = subprocess.run(command, capture_output=True, timeout=180,
                          cwd=str(tmp_path_factory.getbasetemp()))
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc.stdout.decode("utf-8")


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    binary = install_chromium()
    if binary is None:
        missing_tool("chromium", CHROMIUM_INSTALL)

    def run(*args):
        return run_chromium(binary, tmp_path_factory, *args)
    return run


# Read back after the page's own script has drawn: a script added to a copy of the
# page puts the canvas's pixels into the DOM, which --dump-dom prints. The canvas's
# own pixels, with no compositor, window chrome or screenshot timing in between.
_CANVAS_PROBE = """<script>
window.addEventListener("load", () => {
  const canvas = document.getElementById("canvas");
  const data = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
  let text = "";
  for (let i = 0; i < data.length; i += 0x8000) {
    text += String.fromCharCode.apply(null, data.subarray(i, i + 0x8000));
  }
  const out = document.createElement("pre");
  out.id = "canvas-probe";
  out.dataset.width = canvas.width;
  out.textContent = btoa(text);
  document.body.appendChild(out);
});
</script>
</body>"""


def canvas_pixels(run, page, tmp_path, window="1000,700"):
    """(width, height, rows of RGBA bytes) of the page's timeline canvas as drawn in
    a window of that size; run(*args) runs headless chromium and returns stdout."""
    probe = tmp_path / f"probe-{page.name}"
    probe.write_text(page.read_text(encoding="utf-8").replace("</body>", _CANVAS_PROBE, 1),
                     encoding="utf-8")
    dom = run("--dump-dom", f"--window-size={window}", "--virtual-time-budget=5000",
              probe.as_uri())
    match = re.search(r'<pre id="canvas-probe" data-width="(\d+)">([A-Za-z0-9+/=]*)</pre>',
                      dom)
    assert match, "the page did not finish drawing"
    width, data = int(match.group(1)), base64.b64decode(match.group(2))
    stride = 4 * width
    rows = [data[y:y + stride] for y in range(0, len(data), stride)]
    return width, len(rows), rows


def coloured_pixels(rows):
    """Pixels in colour: calls are drawn in colour, the page's chrome in white, grey
    and black."""
    return sum(max(row[x:x + 3]) - min(row[x:x + 3]) > 40
               for row in rows for x in range(0, len(row), 4))


def test_page_draws_the_timeline(chromium, page, tmp_path):
    width, height, rows = canvas_pixels(chromium, page, tmp_path)
    assert width > 900 and height >= 200          # the timeline fills the window's width
    assert coloured_pixels(rows) > 5000


def test_summary_table_lists_the_functions(chromium, page):
    dom = chromium("--dump-dom", "--virtual-time-budget=5000", page.as_uri())
    body = re.search(r'<table id="summary">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
    cells = re.findall(r"<tr[^>]*><td[^>]*>(.*?)</td><td>(\d+)</td>", body)
    calls = {name.rsplit(": ", 1)[-1]: int(n) for name, n in cells}
    assert calls["html_leaf"] == 50
    assert calls["html_branch"] == 2
    assert calls["&lt;/script&gt;&lt;b&gt;injected"] == 1
    assert calls["builtins.sorted"] == 20 + 30 + 1
    assert 'id="facts"' in dom and "calls on 2 threads" in dom


def test_the_page_says_how_many_events_were_dropped_in_words(chromium, trace, tmp_path):
    """"1 event dropped", "2 events dropped": counted as every other line says it."""
    threads, slices = [], []
    for thread, array, n in trace.thread_slices():
        threads.append(thread)
        slices.append((array, n))
    for dropped, words in ((1, "1 event dropped:"), (2, "2 events dropped:")):
        threads[0] = threads[0]._replace(dropped=dropped)
        lossy = Trace(names=trace.names, key_kinds=trace.key_kinds, key_args=trace.key_args,
                      threads=list(threads), slices=slices, start_ns=trace.start_ns,
                      stop_ns=trace.stop_ns, pid=trace.pid,
                      python_version=trace.python_version, backend=trace.backend,
                      clock=trace.clock, params=trace.params, marks=trace.marks,
                      dropped_events=dropped)
        path = tmp_path / f"dropped-{dropped}.html"
        write_html(lossy, path)
        dom = chromium("--dump-dom", "--virtual-time-budget=5000", path.as_uri())
        warning = re.search(r'<span class="warning" id="warning">(.*?)</span>', dom,
                            re.S).group(1)
        assert warning.startswith(words), warning


def test_clicking_a_call_shows_its_details(chromium, page, tmp_path):
    # A copy of the page with a click on the first lane's outermost call.
    click = """<script>
      const canvas = document.getElementById("canvas"), box = canvas.getBoundingClientRect();
      const at = {clientX: box.left + box.width / 2, clientY: box.top + 52, bubbles: true};
      canvas.dispatchEvent(new MouseEvent("mousedown", at));
      canvas.dispatchEvent(new MouseEvent("mouseup", at));
    </script>"""
    clicked = tmp_path / "clicked.html"
    clicked.write_text(page.read_text(encoding="utf-8").replace("</body>", click + "</body>"),
                       encoding="utf-8")
    dom = chromium("--dump-dom", "--virtual-time-budget=5000", clicked.as_uri())
    details = re.search(r'<div id="details">(.*?)</div>', dom, re.S).group(1)
    fields = dict(re.findall(r"<td>([^<]*)</td><td>([^<]*)</td>", details))
    assert fields["Python id"] == "0"
    assert fields["Python parent id"] == "null"
    assert fields["Thread"].startswith("MainThread")
    assert fields["Depth"] == "0"
    assert fields["Duration"].endswith("s")


# --- big traces: a reduced timeline -------------------------------------------------

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def busy_work():
    html_branch(40)
    return fib(16) + fib(12)


@pytest.fixture(scope="module")
def busy_trace():
    with pytrace_cffi.trace() as t:
        busy_work()
    return t.trace


def kept_by_rule(trace, min_ns, top_levels):
    """Per thread, the indices of the calls the reduction's rule keeps, worked out
    from the Call tuples: at least min_ns long or above depth top_levels, and the
    parent kept; with each kept call's self time over all its callees."""
    result = []
    first_id = 0
    for thread, _, n in trace.thread_slices():
        calls = [c for c in trace if c.thread == thread.native_id]
        assert len(calls) == n
        depth, kept, self_ns = {}, [], {}
        for c in calls:
            depth[c.id] = 0 if c.parent is None else depth[c.parent] + 1
            parent_kept = c.parent is None or c.parent in self_ns
            if parent_kept and (c.end_ns - c.start_ns >= min_ns or depth[c.id] < top_levels):
                kept.append(c.id - first_id)
                self_ns[c.id] = c.end_ns - c.start_ns
        for c in calls:
            if c.parent is not None and c.parent in self_ns:
                self_ns[c.parent] -= c.end_ns - c.start_ns
        result.append((kept, [self_ns[first_id + i] for i in kept]))
        first_id += n
    return result


def decode_reduced(flat, start_ns):
    """(indices, starts, durations, keys, depths, self times) of a reduced page's array."""
    indices, starts, time, index = [], [], start_ns, -1
    for j in range(0, len(flat), 6):
        time += flat[j]
        index += flat[j + 4] + 1
        indices.append(index)
        starts.append(time)
    return indices, starts, flat[1::6], flat[2::6], flat[3::6], flat[5::6]


def test_small_pages_are_not_reduced(busy_trace, tmp_path):
    path = tmp_path / "small.html"
    write_html(busy_trace, path, call_budget=len(busy_trace))
    text = path.read_text(encoding="utf-8")
    assert embedded(text, "pt-meta")["reduced"] is None
    assert sum(len(f) for f in embedded(text, "pt-slices")) == 4 * len(busy_trace)


def check_reduced_page(trace, budget, path):
    """Writes trace's page with budget and checks its calls are exactly those the
    rule keeps, with the full trace's ids and self times; returns the page's meta."""
    write_html(trace, path, call_budget=budget)
    text = path.read_text(encoding="utf-8")
    meta, flats = embedded(text, "pt-meta"), embedded(text, "pt-slices")
    reduced = meta["reduced"]
    span = trace.stop_ns - trace.start_ns
    assert reduced["calls"] == len(trace) and reduced["budget"] == budget
    assert 0 < reduced["shown"] <= budget
    assert reduced["min_ns"] >= span / html_module.REDUCED_WIDTH_PX
    expected = kept_by_rule(trace, reduced["min_ns"], reduced["top_levels"])
    assert sum(len(kept) for kept, _ in expected) == reduced["shown"]
    calls = list(trace)
    first_id = 0
    for (kept, self_ns), flat, (_, _, n) in zip(expected, flats, trace.thread_slices()):
        indices, starts, durations, keys, depths, selfs = decode_reduced(flat, meta["start_ns"])
        assert indices == kept
        assert selfs == self_ns
        chosen = [calls[first_id + i] for i in kept]
        assert starts == [c.start_ns for c in chosen]
        assert durations == [c.end_ns - c.start_ns for c in chosen]
        assert [trace.names[k] for k in keys] == [c.name for c in chosen]
        first_id += n
    return meta


def test_a_reduced_page_keeps_exactly_what_the_rule_keeps(busy_trace, tmp_path):
    meta = check_reduced_page(busy_trace, len(busy_trace) // 10, tmp_path / "reduced.html")
    # The summary table still counts every call.
    calls = list(busy_trace)
    summary = {row[0].rsplit(": ", 1)[-1]: row[1] for row in meta["summary"]["rows"]}
    assert summary["fib"] == sum(1 for c in calls if c.name.endswith(": fib"))
    assert summary["html_leaf"] == 40


def levels_trace():
    """A root over 100 us; 300 short children (10 ns, each calling a 5 ns one) and
    one long child (50 us) with 50 short children and a long one of its own."""
    calls = [(0, 100_000, -1)]                         # (start, end, parent) from 0
    for i in range(300):
        calls.append((100 + 20 * i, 110 + 20 * i, 0))
        calls.append((102 + 20 * i, 107 + 20 * i, len(calls) - 1))
    calls.append((40_000, 90_000, 0))
    long_child = len(calls) - 1
    calls.extend((40_000 + 100 * i, 40_010 + 100 * i, long_child) for i in range(50))
    calls.append((50_000, 70_000, long_child))         # depth 2, 20 us: kept
    calls.append((60_000, 61_000, len(calls) - 1))     # depth 3, 1 us: kept
    calls.append((62_000, 62_010, len(calls) - 2))     # depth 3, 10 ns: left out
    slices = ffi.new("pt_slice[]", len(calls))
    for i, (start, end, parent) in enumerate(calls):
        slices[i].start, slices[i].end, slices[i].key = 1000 + start, 1000 + end, 1 + (i % 3)
        slices[i].parent = parent
        slices[i].depth = 0 if parent < 0 else slices[parent].depth + 1
    return Trace(names=["<unknown>", "f.py(1): a", "f.py(2): b", "f.py(3): c"],
                 key_kinds=["python"] * 4, key_args={},
                 threads=[ThreadInfo(0, 7, 7, "MainThread", 2 * len(calls), 0)],
                 slices=[(slices, len(calls))], start_ns=1000, stop_ns=101_000,
                 pid=1, python_version="3", backend="test", clock="monotonic",
                 params={"modules": [], "optimizer_steps": []})


def test_the_top_levels_are_kept_whole_while_they_fit(tmp_path):
    trace = levels_trace()
    meta = check_reduced_page(trace, 400, tmp_path / "levels.html")
    # A pixel is 25 ns: the top two levels whole (root, 300 + 1 children), and of the
    # deeper calls the two that last 1 us or more.
    assert meta["reduced"] == {"min_ns": 25, "top_levels": 2, "shown": 304, "calls": 655,
                               "budget": 400}


def test_the_reduction_gives_up_top_levels_then_raises_the_threshold():
    # 1000 back-to-back 5 ns calls at depth 0 over 10 us: one pixel is 3 ns, so only
    # a threshold of 6 ns gets them under a budget of 100.
    trace = synthetic_trace(1000)
    assert html_module.choose_reduction(trace, 1000) is None
    assert html_module.choose_reduction(trace, 999) == html_module.Reduction(
        min_ns=6, top_levels=0, shown=0, calls=1000, budget=999)
    with pytest.raises(ValueError, match="call_budget"):
        write_html(trace, "never.html", call_budget=0)


@pytest.fixture(scope="module")
def reduced_page(busy_trace, tmp_path_factory):
    path = tmp_path_factory.mktemp("html") / "reduced.html"
    write_html(busy_trace, path, call_budget=len(busy_trace) // 10)
    return path


def test_reduced_page_renders_and_says_what_was_left_out(chromium, busy_trace, reduced_page,
                                                         tmp_path):
    meta = embedded(reduced_page.read_text(encoding="utf-8"), "pt-meta")
    dom = chromium("--dump-dom", "--virtual-time-budget=5000", reduced_page.as_uri())
    notice = re.search(r'<div id="notice">(.*?)</div>', dom, re.S).group(1)
    shown, calls = meta["reduced"]["shown"], len(busy_trace)
    assert f"{shown} of {calls} calls shown" in notice
    assert f"The {calls - shown} left out" in notice
    assert ".pftrace" in notice and "ui.perfetto.dev" in notice
    body = re.search(r'<table id="summary">.*?<tbody>(.*?)</tbody>', dom, re.S).group(1)
    cells = dict(re.findall(r"<tr[^>]*><td[^>]*>[^<]*: (\w+)</td><td>(\d+)</td>", body))
    assert int(cells["fib"]) == sum(1 for c in busy_trace if c.name.endswith(": fib"))
    # the headline counts calls as the summary does: the frames running at start are none
    running_at_start = sum(c.start_ns == busy_trace.start_ns for c in busy_trace)
    assert running_at_start > 2                  # the test's own frames, pytest's
    assert f"{calls - running_at_start} calls on 1 thread" in dom
    _, _, rows = canvas_pixels(chromium, reduced_page, tmp_path)
    assert coloured_pixels(rows) > 5000


def test_reduced_page_details_give_the_full_traces_ids(chromium, busy_trace, reduced_page,
                                                       tmp_path):
    # Click a wide kept call with many calls left out before it: its id, parent id
    # and self time must be the full trace's, not those among the kept calls.
    text = reduced_page.read_text(encoding="utf-8")
    meta, flat = embedded(text, "pt-meta"), embedded(text, "pt-slices")[0]
    indices = decode_reduced(flat, meta["start_ns"])[0]
    calls = list(busy_trace)
    span = meta["stop_ns"] - meta["start_ns"]
    wide = [(index - position, calls[index]) for position, index in enumerate(indices)
            if calls[index].end_ns - calls[index].start_ns > span / 20]
    skipped, call = max(wide, key=lambda pair: pair[0])
    assert skipped > 0
    depth, parent, row = 0, call.parent, 0
    while parent is not None:
        # traced under pytest: pluggy's frames above are hidden (the per-test view)
        row += "pluggy/" not in calls[parent].name
        depth, parent = depth + 1, calls[parent].parent
    x = ((call.start_ns + call.end_ns) / 2 - meta["start_ns"]) / span
    click = f"""<script>
      const canvas = document.getElementById("canvas"), box = canvas.getBoundingClientRect();
      const at = {{clientX: box.left + box.width * {x}, clientY: box.top + 24 + 20 +
                   16 * {row} + 8, bubbles: true}};
      canvas.dispatchEvent(new MouseEvent("mousedown", at));
      canvas.dispatchEvent(new MouseEvent("mouseup", at));
    </script>"""
    clicked = tmp_path / "clicked.html"
    clicked.write_text(text.replace("</body>", click + "</body>"), encoding="utf-8")
    dom = chromium("--dump-dom", "--virtual-time-budget=5000", "--window-size=1000,3000",
                   clicked.as_uri())
    details = re.search(r'<div id="details">(.*?)</div>', dom, re.S).group(1)
    fields = dict(re.findall(r"<td>([^<]*)</td><td>([^<]*)</td>", details))
    assert fields["Python id"] == str(call.id)
    assert fields["Depth"] == str(depth)
    assert fields["Python parent id"].split()[0] == str(call.parent)
    children = sum(c.end_ns - c.start_ns for c in calls if c.parent == call.id)
    assert fields["Self time"] == format_ns(call.end_ns - call.start_ns - children)


def format_ns(ns):
    """The page's formatNs."""
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "\u00b5s")):
        if ns >= scale:
            return f"{ns / scale:.3f} {unit}"
    return f"{round(ns)} ns"


BIG_PAGE = r"""
import json, os, sys
import pytrace_cffi
from pytrace_cffi.render.html import write_html

def peak_rss_kb():
    # VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's (the
    # pytest process's) peak, as vfork/exec carries the high-water mark over.
    with open("/proc/self/status") as status:
        return int(next(line.split()[1] for line in status if line.startswith("VmHWM:")))


def tiny(i):
    return i

def work(n):
    for i in range(n):
        tiny(i)

with pytrace_cffi.trace(c_calls=False) as t:
    work(int(sys.argv[1]))
before = peak_rss_kb()
write_html(t.trace, sys.argv[2])
after = peak_rss_kb()
print(json.dumps({"calls": len(t.trace), "rss_before_kb": before, "rss_after_kb": after}))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads VmHWM")
def test_a_million_call_page_stays_small(tmp_path):
    # 1.5M calls of a 100 ns function: in full the page would be ~25 MB; reduced it
    # keeps what a screen can show and the summary of every call.
    path = tmp_path / "big.html"
    script = tmp_path / "big_page.py"
    script.write_text(BIG_PAGE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(os.path.dirname(pytrace_cffi.__file__))] +
        [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, str(script), "1500000", str(path)], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    facts = json.loads(proc.stdout)
    assert facts["calls"] > 1_500_000
    assert path.stat().st_size < 4 << 20
    # Writing the page costs little beyond the trace itself (the full page's text
    # alone would be ~25 MB, its Python strings several times that).
    assert facts["rss_after_kb"] - facts["rss_before_kb"] < 64 << 10
    text = path.read_text(encoding="utf-8")
    meta = embedded(text, "pt-meta")
    assert meta["reduced"]["calls"] == facts["calls"]
    assert meta["reduced"]["shown"] == sum(len(f) for f in embedded(text, "pt-slices")) // 6
    summary = {row[0].rsplit(": ", 1)[-1]: row[1] for row in meta["summary"]["rows"]}
    assert summary["tiny"] == 1_500_000


ASYNC_LANES = """
import asyncio

async def task(i):
    for _ in range(3):
        await asyncio.sleep(0)
        sorted(range(i % 7))

async def main():
    await asyncio.gather(*(task(i) for i in range(40)))
"""


@pytest.fixture(scope="module")
def lanes_pftrace(tmp_path_factory):
    """A .pftrace of 40 asyncio task lanes (log_async), read back streamed."""
    namespace = {}
    exec(compile(ASYNC_LANES, "lanes_program.py", "exec"), namespace)
    import asyncio
    with pytrace_cffi.trace(log_async=True) as t:
        asyncio.run(namespace["main"]())
    path = tmp_path_factory.mktemp("lanes") / "lanes.pftrace"
    t.trace.export_perfetto(str(path))
    return path


def walks_of(trace):
    """A list that counts the thread walks of trace's streams (one per thread read)."""
    walked = []
    slices = trace._streams.slices
    trace._streams.slices = lambda index: (walked.append(index), slices(index))[1]
    return walked


# budget: None (not reduced), or the calls / this (2: the first candidate; 3, 4:
# fewer top levels, a higher threshold; 10: the first candidate's calls are more
# than KEPT_BUDGET budgets)
@pytest.mark.parametrize("divisor", [None, 2, 3, 4, 10])
def test_a_streamed_page_walks_each_thread_once_within_its_budget(lanes_pftrace, tmp_path,
                                                                  divisor):
    """The survey keeps what the page's arrays need (the slices, or the calls the
    first candidate keeps: a superset of any later one's), up to KEPT_BUDGET times
    the budget: the arrays do not read the .pftrace again. Past that they walk
    again. Either way the page keeps exactly what the rule keeps."""
    from pytrace_cffi.reading import read_trace
    trace = read_trace(str(lanes_pftrace))
    assert len(trace.threads) > 40 and not trace.slices_built()
    walked = walks_of(trace)
    with_calls = [i for i, (_, n, _, _) in enumerate(trace.thread_counts()) if n]
    if divisor is None:
        write_html(trace, tmp_path / "page.html")
        flats = embedded((tmp_path / "page.html").read_text(encoding="utf-8"), "pt-slices")
        assert sum(len(f) for f in flats) == 4 * len(trace)
        walks_twice = False
    else:
        budget = len(trace) // divisor
        # the first candidate's calls, by the test's own rule, against the bound
        whole = read_trace(str(lanes_pftrace))
        first_min_ns = -(-(whole.stop_ns - whole.start_ns) // html_module.REDUCED_WIDTH_PX)
        superset = sum(len(kept) for kept, _ in kept_by_rule(
            whole, first_min_ns, html_module.TOP_LEVELS))
        walks_twice = superset > html_module.KEPT_BUDGET * budget
        assert walks_twice == (divisor == 10)
        write_html(trace, tmp_path / "page.html", call_budget=budget)
        before = list(walked)
        check_reduced_page(read_trace(str(lanes_pftrace)), budget, tmp_path / "page.html")
        assert walked == before         # check_reduced_page read its own copy
    assert sorted(walked) == sorted(with_calls * (2 if walks_twice else 1))

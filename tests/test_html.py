"""The HTML page: self-contained, data embedded safely, and it renders in Chromium."""
import json
import os
import re
import shutil
import struct
import subprocess
import threading
import types
import zlib

import pytest

import pytrace_cffi
from pytrace_cffi._core import ffi
from pytrace_cffi.html import CALLS_PER_CHUNK, write_html
from pytrace_cffi.trace import ThreadInfo, Trace

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


@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    binary = install_chromium()
    if binary is None:
        pytest.skip("chromium is not installed and apt-get could not install it")

    def run(*args):
        profile = tmp_path_factory.mktemp("chromium-profile")
        command = [binary, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                   "--no-first-run", "--disable-background-networking",
                   "--disable-component-update", "--disable-sync",
                   f"--user-data-dir={profile}", *args]
        proc = subprocess.run(command, capture_output=True, timeout=180,
                              cwd=str(tmp_path_factory.getbasetemp()))
        assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
        return proc.stdout.decode("utf-8")
    return run


def png_pixels(data):
    """(width, height, rows of RGB(A) bytes) of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    position, idat, header = 8, [], None
    while position < len(data):
        length, kind = struct.unpack(">I4s", data[position:position + 8])
        body = data[position + 8:position + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        position += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, header
    channels = 3 if color == 2 else 4
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind = raw[y * (stride + 1)]
        row = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        unfilter(kind, row, previous, channels)
        rows.append(row)
        previous = row
    return width, height, channels, rows


def unfilter(kind, row, previous, channels):
    if kind == 0:
        return
    if kind == 2:
        row[:] = bytes((a + b) & 0xFF for a, b in zip(row, previous))
        return
    for i in range(len(row)):
        left = row[i - channels] if i >= channels else 0
        up = previous[i]
        if kind == 1:
            row[i] = (row[i] + left) & 0xFF
        elif kind == 3:
            row[i] = (row[i] + ((left + up) >> 1)) & 0xFF
        else:
            upper_left = previous[i - channels] if i >= channels else 0
            estimate = left + up - upper_left
            pa, pb, pc = abs(estimate - left), abs(estimate - up), abs(estimate - upper_left)
            predictor = left if pa <= pb and pa <= pc else up if pb <= pc else upper_left
            row[i] = (row[i] + predictor) & 0xFF


def test_page_draws_the_timeline(chromium, page, tmp_path):
    shot = tmp_path / "shot.png"
    chromium(f"--screenshot={shot}", "--window-size=1000,700", "--virtual-time-budget=5000",
             page.as_uri())
    width, height, channels, rows = png_pixels(shot.read_bytes())
    assert (width, height) == (1000, 700)
    # Calls are drawn in colour; the page's chrome is white, grey and black.
    coloured = 0
    for row in rows:
        for x in range(0, len(row), channels):
            r, g, b = row[x], row[x + 1], row[x + 2]
            coloured += max(r, g, b) - min(r, g, b) > 40
    assert coloured > 5000


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

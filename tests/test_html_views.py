"""The HTML page's first screen (#34 item 6): imports folded in the timeline, a
pytest run's per-test view with pluggy's plumbing hidden, and the top-functions
table within the first 900 px. Real programs run under `python -m pytrace_cffi
run -o x.html`, their pages loaded in headless chromium at 1280x900 and read
through the page's own tooltips and tables (a probe script added to a copy)."""
import html
import json
import os
import re
import subprocess
import sys

import pytest

from pytrace_cffi._core import ffi
from pytrace_cffi.render import html as html_module
from pytrace_cffi.model.trace import ThreadInfo, Trace

from helpers import CHROMIUM_INSTALL, missing_tool
from test_html import embedded, install_chromium, run_chromium

HERE = os.path.dirname(os.path.abspath(__file__))
VIEWPORT = (1280, 900)

# Imports that take most of the program's time, then its own work.
HEAVY_IMPORTS = """
import asyncio
import email.mime.multipart
import http.client
import xml.dom.minidom
import decimal
import unittest.mock
import difflib


def own_work():
    total = 0
    for i in range(60000):
        total += i % 7
    return total


for _ in range(3):
    own_work()
"""

TINY_TESTS = """
import pytest


def test_alpha():
    assert sum(range(10)) == 45


@pytest.mark.parametrize("n", [1, 2])
def test_beta(n):
    assert n > 0


class TestGroup:
    def test_gamma(self):
        assert "x".upper() == "X"
"""

# Loaded into a copy of the page: samples the timeline's tooltips along its width
# (every row of the first lane), optionally after clicking a checkbox or the first
# test; reports the tables' rows and where the top-functions table begins.
PROBE = """<script>
(function () {
  const errors = [];
  window.addEventListener("error", e => errors.push(`${e.message} (line ${e.lineno})`));
  function sample() {
    const canvas = document.getElementById("canvas"), box = canvas.getBoundingClientRect();
    const tip = document.getElementById("tooltip"), columns = [];
    for (let s = 0; s < 200; s++) {
      const x = (s + 0.5) * box.width / 200, found = [];
      for (let y = 52; y < Math.min(box.height, 44 + 16 * 14); y += 16) {
        canvas.dispatchEvent(new MouseEvent("mousemove", { clientX: box.left + x,
          clientY: box.top + y, bubbles: true }));
        if (tip.style.display === "block") found.push(tip.textContent);
      }
      columns.push(found);
    }
    return columns;
  }
  window.addEventListener("load", () => {
    const out = { errors };
    try {
      out.summaryTop = document.getElementById("summary").getBoundingClientRect().top;
      out.functions = Array.from(document.querySelectorAll("#summary tbody tr"),
                                 tr => tr.cells[0].textContent);
      out.folded = sample();
      out.tests = Array.from(document.querySelectorAll("#tests tbody tr")).map(
        tr => Array.from(tr.cells).map(c => c.textContent));
      const first = document.querySelector("#tests tbody tr");
      if (first) {
        first.click();
        const rows = document.querySelectorAll("#details tr");
        out.clicked = rows.length ? rows[0].cells[1].textContent : null;
        out.flamePath = document.getElementById("flame-path").textContent;
      }
      const fold = document.getElementById("fold-timeline-imports");
      out.foldShown = !fold.parentElement.hidden;
      if (out.foldShown) {
        fold.click();
        out.unfolded = sample();
      }
    } catch (error) { errors.push(`the probe: ${error}`); }
    const pre = document.createElement("pre");
    pre.id = "probe-out";
    pre.textContent = JSON.stringify(out);
    document.body.appendChild(pre);
  });
})();
</script>
"""


@pytest.fixture(scope="module")
def chromium():
    binary = install_chromium()
    if binary is None:
        missing_tool("chromium", CHROMIUM_INSTALL)
    return binary


def run_to_page(tmp_path, *program):
    """`python -m pytrace_cffi run -o page.html ...` in tmp_path: the page's path."""
    page = tmp_path / "page.html"
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "-o", str(page),
                           *program], cwd=str(tmp_path), capture_output=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return page


def probe(binary, tmp_path_factory, page):
    """What PROBE found in page, loaded at VIEWPORT."""
    probed = page.with_name("probed-" + page.name)
    text = page.read_text(encoding="utf-8")
    probed.write_text(text.replace("<head>\n", "<head>\n" + PROBE, 1), encoding="utf-8")
    dom = run_chromium(binary, tmp_path_factory, "--dump-dom",
                       f"--window-size={VIEWPORT[0]},{VIEWPORT[1]}",
                       "--virtual-time-budget=10000", probed.as_uri())
    found = re.search(r'<pre id="probe-out">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not report"
    return json.loads(html.unescape(found.group(1)))


def share(columns, test):
    """The fraction of the timeline's width whose tooltips (any row) pass test."""
    return sum(1 for found in columns if any(test(tip) for tip in found)) / len(columns)


def folded_import(tip):
    return tip.startswith("import ") and "(folded: " in tip


@pytest.fixture(scope="module")
def heavy(chromium, tmp_path_factory):
    where = tmp_path_factory.mktemp("heavy")
    (where / "heavy_program.py").write_text(HEAVY_IMPORTS)
    page = run_to_page(where, "heavy_program.py")
    return page, probe(chromium, tmp_path_factory, page)


@pytest.fixture(scope="module")
def pytest_run(chromium, tmp_path_factory):
    where = tmp_path_factory.mktemp("pytest_run")
    (where / "test_tiny.py").write_text(TINY_TESTS)
    page = run_to_page(where, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_tiny.py")
    return page, probe(chromium, tmp_path_factory, page)


def test_imports_are_folded_in_the_timeline_by_default(heavy):
    page, found = heavy
    assert found["errors"] == []
    meta = embedded(page.read_text(encoding="utf-8"), "pt-meta")
    import_ns = meta["imports"]["row"][1]
    assert import_ns > (meta["stop_ns"] - meta["start_ns"]) / 2     # an import-heavy program
    # folded: one block per top-level import, a small part of the width; the
    # program's own work gets the rest
    blocks = {tip.split(" \u00b7 ")[0].split(" (folded")[0]
              for found_at in found["folded"] for tip in found_at if folded_import(tip)}
    assert {"import asyncio", "import email"} <= blocks and len(blocks) >= 3   # the widest
    assert 0 < share(found["folded"], folded_import) < 0.15
    assert share(found["folded"], lambda tip: ": own_work  " in tip) > 0.6
    # the toggle unfolds them all: then the imports take their real width
    assert found["foldShown"]
    assert share(found["unfolded"], folded_import) == 0
    assert share(found["unfolded"], lambda tip: "_find_and_load" in tip) > 0.5
    assert share(found["unfolded"], lambda tip: ": own_work  " in tip) < 0.5


def test_a_pytest_run_lists_each_test_by_name(pytest_run):
    page, found = pytest_run
    assert found["errors"] == []
    assert found["tests"], "no per-test view"
    assert [row[:2] for row in found["tests"]] == [
        # a decorated function starts at its decorator (co_firstlineno)
        ["test_alpha", "test_tiny.py:5"], ["test_beta", "test_tiny.py:9"],
        ["test_beta [run 2]", "test_tiny.py:9"], ["test_gamma", "test_tiny.py:15"]]
    # the item's time (setup, call, teardown), then the test function's
    assert all(re.fullmatch(r"[\d.]+ (ns|\u00b5s|ms|s)", cell) for row in found["tests"]
               for cell in row[2:])
    # a test's row opens its call: the item's runtestprotocol, selected
    assert found["clicked"] and found["clicked"].endswith(": runtestprotocol"), found
    meta = embedded(page.read_text(encoding="utf-8"), "pt-meta")
    pluggy = {meta["names"][key] for key in meta["tests"]["pluggy"]}
    assert any(name.endswith(": _multicall") for name in pluggy)
    assert any(name.endswith(": _hookexec") for name in pluggy)
    # hidden from the top-functions table too (they would lead it), which stays full
    assert not pluggy & set(found["functions"]) and len(found["functions"]) >= 100


def test_the_top_functions_table_is_on_the_first_screen(heavy, pytest_run):
    for _, found in (heavy, pytest_run):
        assert 0 < found["summaryTop"] < VIEWPORT[1]


def pytest_like_trace(imports=False):
    """A trace of one pytest item, by name: runtestprotocol > pluggy's __call__ >
    _multicall > pytest_pyfunc_call > (pyfuncitem.obj, then the test function).
    With imports, an import of json before it, and one inside the test."""
    names = ["<unknown>", "_pytest/runner.py(123): runtestprotocol",
             "pluggy/_hooks.py(497): __call__", "pluggy/_callers.py(76): _multicall",
             "_pytest/python.py(159): pytest_pyfunc_call", "_pytest/python.py(284): obj",
             "tests/test_x.py(3): test_one", "builtins.len",
             "<frozen importlib._bootstrap>(1165): _find_and_load",
             "json/__init__.py(1): <module>", "x.py(1): <module>"]
    # start, end, parent, key
    calls = [(0, 1000, -1, 1), (10, 990, 0, 2), (20, 980, 1, 3), (30, 970, 2, 4),
             (40, 50, 3, 5), (60, 900, 3, 6), (70, 80, 5, 7)]
    if imports:
        calls = [(-3000, 1100, -1, 10), (-2900, -100, 0, 8), (-2800, -200, 1, 9),
                 (-2700, -2600, 2, 7)] + [(start, end, parent + 4, key) for
                                          start, end, parent, key in calls]
        calls[4] = (0, 1000, 0, 1)
        calls += [(100, 600, 9, 8), (110, 500, 11, 9)]     # under test_one
    slices = ffi.new("pt_slice[]", len(calls))
    first = 4000 if imports else 1000
    for i, (start, end, parent, key) in enumerate(calls):
        slices[i].start, slices[i].end, slices[i].key = first + start, first + end, key
        slices[i].parent = parent
        slices[i].depth = 0 if parent < 0 else slices[parent].depth + 1
    return Trace(names=names, key_kinds=["python"] * 7 + ["c"] + ["python"] * 3, key_args={},
                 threads=[ThreadInfo(0, 7, 7, "MainThread", 2 * len(calls), 0)],
                 slices=[(slices, len(calls))], start_ns=1000, stop_ns=first + 2000,
                 pid=1, python_version="3", backend="test", clock="monotonic",
                 params={"modules": [], "optimizer_steps": []})


def test_a_test_s_row_opens_its_function_in_the_flame_graph(chromium, tmp_path_factory):
    """Its subtree, every call counted (the timeline may be reduced); a test too
    short for the flame graph's budget (the tiny ones above, in a run of 2M calls)
    leaves the flame graph as it was."""
    page = tmp_path_factory.mktemp("flame") / "page.html"
    html_module.write_html(pytest_like_trace(imports=True), page)
    found = probe(chromium, tmp_path_factory, page)
    assert found["errors"] == []
    assert found["clicked"].endswith(": runtestprotocol")
    # (the flame graph keeps pluggy's frames: it merges stacks, it does not hide)
    assert found["flamePath"] == ("MainThread (tid 7) \u203a <module> \u203a runtestprotocol "
                                  "\u203a __call__ \u203a _multicall \u203a "
                                  "pytest_pyfunc_call \u203a test_one")


def test_the_page_names_a_test_by_its_function_not_pytest_s(tmp_path):
    html_module.write_html(pytest_like_trace(), tmp_path / "t.html")
    meta = embedded((tmp_path / "t.html").read_text(encoding="utf-8"), "pt-meta")
    # thread, index, start and end after the trace's start, key, the function's ns
    assert meta["tests"]["tests"] == [[0, 0, 0, 1000, 6, 840]]
    assert meta["tests"]["more"] == 0
    assert sorted(meta["tests"]["pluggy"]) == [2, 3]


def test_a_trace_without_pytest_has_no_tests(tmp_path):
    trace = pytest_like_trace()
    trace.names[1] = "runner.py(123): runtestprotocol"
    html_module.write_html(trace, tmp_path / "t.html")
    assert embedded((tmp_path / "t.html").read_text(encoding="utf-8"), "pt-meta")["tests"] \
        is None

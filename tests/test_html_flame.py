"""The HTML page's flame graph (per thread, its distinct stacks with calls, total and
self time, bounded), its "imports" row, and a job's ranks first with the launcher
folded: the embedded data against the calls worked out here, and the page driven
in headless Chromium (clicking a frame focuses it, Back returns; the imports fold
into one row; a torchrun-like job opens on its ranks)."""
import html
import json
import os
import re
import subprocess
import sys
import types

import pytest

import pytrace_cffi
from pytrace_cffi._core import ffi, lib
from pytrace_cffi.render import html as html_module
from pytrace_cffi.render.page_stacks import FLAME_FRACTIONS_PPM, StackShape, flame_data
from pytrace_cffi.render.stacks import aggregated
from pytrace_cffi.render.summary import ProcessTotal
from pytrace_cffi.model.trace import ThreadInfo, Trace
from helpers import CHROMIUM_INSTALL, missing_tool
from test_html import embedded, install_chromium, run_chromium

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))


def made_trace(names, kinds, threads, start_ns=0):
    """A Trace of threads [(name, [(key, start, end, parent, seeded)])] (parents
    before their children, ids within the thread)."""
    infos, parts = [], []
    stop = start_ns
    for number, (thread_name, calls) in enumerate(threads):
        slices = ffi.new("pt_slice[]", max(1, len(calls)))
        for i, (key, start, end, parent, seeded) in enumerate(calls):
            s = slices[i]
            s.start, s.end, s.key, s.parent = start, end, key, parent
            s.depth = 0 if parent < 0 else slices[parent].depth + 1
            s.flags = lib.PT_SLICE_SEEDED if seeded else 0
            stop = max(stop, end)
        infos.append(ThreadInfo(number, 7 + number, 7 + number, thread_name, 2 * len(calls), 0))
        parts.append((slices, len(calls)))
    return Trace(names=names, key_kinds=kinds, key_args={}, threads=infos, slices=parts,
                 start_ns=start_ns, stop_ns=stop, pid=1, python_version="3", backend="test",
                 clock="monotonic", params={"modules": [], "optimizer_steps": []})


def page_meta(trace, path, **options):
    html_module.write_html(trace, path, **options)
    return embedded(path.read_text(encoding="utf-8"), "pt-meta")


def decoded_flame(meta, number):
    """{path of names: [calls, total, self]} of one thread's embedded flame graph,
    and its sibling groups' totals in the order they came."""
    nodes = meta["flame"]["threads"][number]["nodes"]
    found, path, siblings = {}, [], {}
    for j in range(0, len(nodes), 5):
        depth, key, calls, total, self_ns = nodes[j:j + 5]
        del path[depth:]
        path.append(meta["names"][key])
        found[tuple(path)] = [calls, total, self_ns]
        siblings.setdefault(tuple(path[:-1]), []).append(total)
    return found, siblings


def stacks_of_calls(trace, thread_native_id, seeded=()):
    """{path of names: [calls, total, self]} worked out from the trace's Call tuples:
    calls not counting the ids in seeded (running when tracing began)."""
    calls = [c for c in trace if c.thread == thread_native_id]
    by_id = {c.id: c for c in calls}
    found = {}

    def path(call):
        names = []
        while call is not None:
            names.append(call.name)
            call = by_id.get(call.parent)
        return tuple(reversed(names))
    for c in calls:
        entry = found.setdefault(path(c), [0, 0, 0])
        entry[0] += c.id not in seeded
        entry[1] += c.end_ns - c.start_ns
        entry[2] += c.end_ns - c.start_ns
        if c.parent is not None:
            found[path(by_id[c.parent])][2] -= c.end_ns - c.start_ns
    return found


# --- the embedded data ----------------------------------------------------------------

def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def branch(n):
    return [sorted(range(i)) for i in range(n)]


def test_every_distinct_stack_of_each_thread_with_its_calls_total_and_self(tmp_path):
    names = ["<unknown>", "f.py(1): a", "f.py(2): b", "f.py(3): c", "builtins.len"]
    kinds = ["python"] * 4 + ["c"]
    main = [(1, 0, 1000, -1, True),          # running when tracing began: no call
            (2, 10, 400, 0, False), (3, 20, 100, 1, False), (4, 30, 40, 2, False),
            (2, 500, 900, 0, False), (3, 510, 600, 4, False), (3, 700, 750, 4, False),
            (4, 950, 960, 0, False)]
    worker = [(3, 100, 300, -1, False), (2, 120, 200, 0, False), (2, 400, 420, -1, False)]
    trace = made_trace(names, kinds, [("MainThread", main), ("worker", worker)])
    meta = page_meta(trace, tmp_path / "t.html")
    assert meta["flame"]["min_ppm"] == 0 and meta["flame"]["max_depth"] is None
    main_stacks, siblings = decoded_flame(meta, 0)
    a, b, c, n = names[1:]
    assert main_stacks == {(a,): [0, 1000, 1000 - 390 - 400 - 10],
                           (a, b): [2, 790, 790 - 80 - 90 - 50],
                           (a, b, c): [3, 220, 220 - 10], (a, b, c, n): [1, 10, 10],
                           (a, n): [1, 10, 10]}
    assert siblings[(a,)] == [790, 10]          # most total time first
    worker_stacks, _ = decoded_flame(meta, 1)
    assert worker_stacks == {(c,): [1, 200, 120], (c, b): [1, 80, 80], (b,): [1, 20, 20]}
    assert [(t["stacks"], t["shown"], t["total_ns"], t["left_out_ns"])
            for t in meta["flame"]["threads"]] == [(5, 5, 1000, 0), (3, 3, 220, 0)]


def test_a_real_traces_flame_graph_is_its_calls_per_stack(tmp_path):
    with pytrace_cffi.trace() as t:
        branch(30)
        fib(12)
    trace = t.trace
    meta = page_meta(trace, tmp_path / "t.html")
    running_at_start = {c.id for c in trace if c.start_ns == trace.start_ns}
    expected = stacks_of_calls(trace, trace.threads[0].native_id, running_at_start)
    found, siblings = decoded_flame(meta, 0)
    assert found == expected
    assert all(totals == sorted(totals, reverse=True) for totals in siblings.values())


def test_a_reduced_page_keeps_every_stack_in_its_flame_graph(tmp_path):
    with pytrace_cffi.trace() as t:
        fib(15)
    whole = page_meta(t.trace, tmp_path / "whole.html")
    reduced = page_meta(t.trace, tmp_path / "reduced.html", call_budget=50)
    assert reduced["reduced"] is not None and whole["reduced"] is None
    assert reduced["flame"] == whole["flame"]


def pruning_trace():
    """a (1 ms) over b (600 us), c (399 us), d (1 us: 1000 ppm) and e (10 ns: 10 ppm)."""
    names = ["<unknown>"] + [f"f.py({i}): {n}" for i, n in enumerate("abcde", 1)]
    calls = [(1, 0, 1_000_000, -1, False), (2, 0, 600_000, 0, False),
             (3, 600_000, 999_000, 0, False), (4, 999_000, 1_000_000, 0, False),
             (5, 999_990, 1_000_000, 3, False)]
    return made_trace(names, ["python"] * 6, [("MainThread", calls)])


def test_above_the_budget_stacks_under_the_smallest_fitting_fraction_are_left_out():
    shape = StackShape(aggregated(pruning_trace()))
    assert flame_data(shape, budget=5)["min_ppm"] == 0            # everything fits
    data = flame_data(shape, budget=4)      # e (10 ppm) goes at 20 ppm
    assert (data["min_ppm"], data["max_depth"]) == (20, None)
    assert data["threads"][0]["shown"] == 4 and data["threads"][0]["left_out_ns"] == 10
    data = flame_data(shape, budget=3)      # d is 1000 ppm exactly: kept at 1000, not 2000
    assert (data["min_ppm"], data["max_depth"]) == (2000, None)
    [thread] = data["threads"]
    assert (thread["stacks"], thread["shown"], thread["left_out_ns"]) == (5, 3, 1000)
    assert thread["nodes"][0::5] == [0, 1, 1] and thread["nodes"][3::5] == [
        1_000_000, 600_000, 399_000]
    assert 20 in FLAME_FRACTIONS_PPM and 1000 in FLAME_FRACTIONS_PPM


def test_a_chain_too_deep_for_the_budget_is_cut_at_a_depth():
    names = ["<unknown>"] + [f"f.py(1): r{i}" for i in range(6)]
    chain = [(1 + i, 0, 1000, i - 1, False) for i in range(6)]      # all as long as the root
    shape = StackShape(aggregated(made_trace(names, ["python"] * 7, [("MainThread", chain)])))
    data = flame_data(shape, budget=4)
    assert (data["min_ppm"], data["max_depth"]) == (FLAME_FRACTIONS_PPM[-1], 4)
    [thread] = data["threads"]
    assert (thread["shown"], thread["left_out_ns"]) == (4, 1000)
    assert thread["nodes"][0::5] == [0, 1, 2, 3]


def test_the_page_bounds_its_flame_graph(tmp_path, monkeypatch):
    monkeypatch.setattr(html_module, "FLAME_NODE_BUDGET", 3)
    meta = page_meta(pruning_trace(), tmp_path / "t.html")
    assert meta["flame"]["min_ppm"] == 2000
    assert len(meta["flame"]["threads"][0]["nodes"]) == 3 * 5


# --- the imports row ----------------------------------------------------------------------

IMPORT_NAMES = ["<unknown>", "app.py(1): main",
                "<frozen importlib._bootstrap>(1349): _find_and_load", "marshal.loads",
                "posix.stat", "mod.py(1): <module>", "builtins.__import__"]
IMPORT_KINDS = ["python", "python", "python", "c", "c", "python", "c"]


def import_trace():
    """main calls _find_and_load (which calls marshal.loads, posix.stat and a module's
    code, whose __import__ imports again), then posix.stat of its own."""
    calls = [(1, 0, 1000, -1), (2, 100, 600, 0), (3, 110, 150, 1), (4, 160, 170, 1),
             (5, 200, 500, 1), (6, 250, 400, 4), (2, 260, 390, 5), (3, 270, 280, 6),
             (4, 700, 720, 0)]
    us = 1000
    return made_trace(IMPORT_NAMES, IMPORT_KINDS, [("MainThread", [
        (key, start * us, end * us, parent, False) for key, start, end, parent in calls])])


def test_the_import_machinery_as_one_row(tmp_path):
    meta = page_meta(import_trace(), tmp_path / "t.html")
    # _find_and_load, __import__, and marshal.loads (only ever called by them);
    # posix.stat is called by main too, and the module's code is the program's
    assert sorted(meta["names"][k] for k in meta["imports"]["keys"]) == sorted(
        [IMPORT_NAMES[2], IMPORT_NAMES[3], IMPORT_NAMES[6]])
    # calls: 2 + 2 + 1; total: the outer _find_and_load (the inner one is inside it);
    # self: 150 + 120 (the two _find_and_load), 40 + 10 (marshal.loads), 20 (__import__)
    assert meta["imports"]["row"] == [5, 500_000, 340_000]
    # the table keeps the rows the fold hides, and has the others it would show
    assert {row[0] for row in meta["summary"]["rows"]} == set(IMPORT_NAMES[1:])


def test_the_imports_row_of_a_real_import(tmp_path):
    """Every call under the machinery's outermost calls, worked out from the Call
    tuples with the page's own choice of functions."""
    module = tmp_path / "fresh_module_for_flame.py"
    module.write_text("import json\n\ndef f():\n    return json.dumps([1])\n\nf()\n")
    sys.path.insert(0, str(tmp_path))
    try:
        with pytrace_cffi.trace() as t:
            __import__("fresh_module_for_flame")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fresh_module_for_flame", None)
    trace = t.trace
    meta = page_meta(trace, tmp_path / "t.html")
    group = {meta["names"][k] for k in meta["imports"]["keys"]}
    assert any(name.endswith(": _find_and_load") for name in group)
    assert not any(name.endswith(": f") or name.endswith(": <module>") for name in group)
    calls = list(trace)
    by_id = {c.id: c for c in calls}

    def inside(c):
        parent = by_id.get(c.parent)
        while parent is not None:
            if parent.name in group:
                return True
            parent = by_id.get(parent.parent)
        return False
    members = [c for c in calls if c.name in group]
    children = {}
    for c in calls:
        children[c.parent] = children.get(c.parent, 0) + c.end_ns - c.start_ns
    expected = [len(members),
                sum(c.end_ns - c.start_ns for c in members if not inside(c)),
                sum(c.end_ns - c.start_ns - children.get(c.id, 0) for c in members)]
    assert meta["imports"]["row"] == expected


def test_a_trace_without_imports_has_no_imports_row(tmp_path):
    assert page_meta(pruning_trace(), tmp_path / "t.html")["imports"] is None


# --- a job: ranks first ---------------------------------------------------------------

def test_ranks_come_first_their_children_after_them_and_the_launcher_folds():
    facts = {10: {"label": "torchrun", "ppid": 1},
             11: {"label": "python -m agent", "ppid": 10},
             12: {"label": "rank 1", "rank": 1, "ppid": 10},
             13: {"label": "rank 0", "rank": 0, "ppid": 10},
             14: {"label": "DataLoader worker 0", "ppid": 13},
             15: {"label": "rank 2", "ppid": 10}}           # a .pftrace keeps the label only
    trace = types.SimpleNamespace(processes=facts)
    totals = [ProcessTotal(pid, facts[pid]["label"], 1, 1, 0, 1) for pid in facts]
    ordered, folded, ranks = html_module.job_order(trace, totals)
    assert [t.pid for t in ordered] == [13, 14, 12, 15, 10, 11]
    assert folded == {10, 11}
    assert ranks == {12: 1, 13: 0, 15: 2}
    no_ranks = {pid: {"label": f"p{pid}"} for pid in (3, 2)}
    totals = [ProcessTotal(pid, "", 1, 1, 0, 1) for pid in no_ranks]
    assert html_module.job_order(types.SimpleNamespace(processes=no_ranks), totals) == (
        totals, set(), {})


LAUNCHER = r"""
import os, subprocess, sys, time

def agent_poll(procs):
    while any(p.poll() is None for p in procs):
        time.sleep(0.002)

def launch():
    worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "worker.py")
    procs = [subprocess.Popen([sys.executable, worker],
                              env=dict(os.environ, RANK=str(rank), WORLD_SIZE="2"))
             for rank in (1, 0)]
    agent_poll(procs)

launch()
"""

WORKER = r"""
def rank_step(n):
    return sorted(range(n))

def train():
    for _ in range(20):
        rank_step(100)

train()
"""


@pytest.fixture(scope="module")
def job_page(tmp_path_factory):
    """A job's page as run -o writes it: a launcher (no rank) and two ranks."""
    where = tmp_path_factory.mktemp("job")
    (where / "launcher.py").write_text(LAUNCHER)
    (where / "worker.py").write_text(WORKER)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, "-m", "pytrace_cffi", "run", "-o", "job.html",
                           "launcher.py"], cwd=where, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return where / "job.html"


def test_a_jobs_page_lists_its_ranks_first_and_folds_the_launcher(job_page):
    meta = embedded(job_page.read_text(encoding="utf-8"), "pt-meta")
    assert [(p["label"], p["rank"], p["folded"]) for p in meta["processes"]] == [
        ("rank 0", 0, False), ("rank 1", 1, False), ("launcher.py", None, True)]
    # the lanes' data stays in lane order (the launcher first): the page lays it out
    assert meta["threads"][0]["pid"] == meta["processes"][2]["pid"]
    ranks = {row[0].rsplit(": ", 1)[-1]: row[1] for row in meta["ranks"]["summary"]["rows"]}
    assert ranks["rank_step"] == 40 and ranks["train"] == 2 and "agent_poll" not in ranks
    assert meta["ranks"]["processes"] == 2


# --- in Chromium --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def chromium(tmp_path_factory):
    binary = install_chromium()
    if binary is None:
        missing_tool("chromium", CHROMIUM_INSTALL)
    return lambda *args: run_chromium(binary, tmp_path_factory, *args)


# Added after the page's script: acts, then writes what the page shows into the DOM.
PROBE = """<script>
(function () {
  const canvas = document.getElementById("flame-canvas"), box = canvas.getBoundingClientRect();
  const at = (f, row) => ({clientX: box.left + f * box.width, clientY: box.top + 16 * row + 8,
                           bubbles: true});
  const path = () => document.getElementById("flame-path").textContent;
  const seen = {};
  function act(name, thunk) {
    try { thunk(); seen[name] = path(); } catch (error) { seen[name] = `error: ${error}`; }
  }
  $ACTIONS
  const out = document.createElement("pre");
  out.id = "probe";
  out.textContent = JSON.stringify(seen);
  document.body.appendChild(out);
})();
</script></body>"""


def probed(chromium, page, tmp_path, actions, window="1000,1400"):
    probe = tmp_path / f"probe-{page.name}"
    probe.write_text(page.read_text(encoding="utf-8").replace(
        "</body>", PROBE.replace("$ACTIONS", actions), 1), encoding="utf-8")
    dom = chromium("--dump-dom", f"--window-size={window}", "--virtual-time-budget=5000",
                   probe.as_uri())
    found = re.search(r'<pre id="probe">(.*?)</pre>', dom, re.S)
    assert found, "the probe did not run"
    return json.loads(html.unescape(found.group(1))), dom


def focus_trace():
    """a (100 us) over b (60 us, over c: 30 us) and d (30 us)."""
    names = ["<unknown>", "f.py(1): a", "f.py(2): b", "f.py(3): c", "f.py(4): d"]
    calls = [(1, 0, 100_000, -1, False), (2, 0, 60_000, 0, False),
             (3, 0, 30_000, 1, False), (4, 60_000, 90_000, 0, False)]
    return made_trace(names, ["python"] * 5, [("MainThread", calls)])


def test_clicking_a_frame_focuses_it_and_back_returns(chromium, tmp_path):
    page = tmp_path / "focus.html"
    html_module.write_html(focus_trace(), page)
    # rows: 0 the thread, 1 a (whole width), 2 b (0-60%) and d (60-90%), 3 c (0-30%)
    seen, dom = probed(chromium, page, tmp_path, """
      act("opened", () => {});
      act("d", () => canvas.dispatchEvent(new MouseEvent("click", at(0.75, 2))));
      act("back", () => document.getElementById("flame-back").click());
      act("c", () => canvas.dispatchEvent(new MouseEvent("click", at(0.1, 3))));
      act("b, a caller of c", () => canvas.dispatchEvent(new MouseEvent("click", at(0.95, 2))));
      act("a, a caller of b", () => canvas.dispatchEvent(new MouseEvent("click", at(0.95, 1))));
      act("the thread", () => canvas.dispatchEvent(new MouseEvent("click", at(0.5, 0))));
      act("nothing right of d", () => canvas.dispatchEvent(new MouseEvent("click", at(0.95, 2))));
      act("back twice", () => { document.getElementById("flame-back").click();
                                document.getElementById("flame-back").click(); });
      canvas.dispatchEvent(new MouseEvent("mousemove", at(0.3, 2)));
      seen.tooltip = document.getElementById("flame-tooltip").textContent;
    """)
    thread = "MainThread (tid 7)"
    tooltip = seen.pop("tooltip")
    assert seen == {"opened": thread, "d": f"{thread} \u203a a \u203a d", "back": thread,
                    "c": f"{thread} \u203a a \u203a b \u203a c",
                    "b, a caller of c": f"{thread} \u203a a \u203a b",
                    "a, a caller of b": f"{thread} \u203a a", "the thread": thread,
                    "nothing right of d": thread,
                    "back twice": f"{thread} \u203a a \u203a b"}
    # focused on b: the whole width, its share of the thread's time
    assert tooltip.startswith("f.py(2): b")
    assert "total 60.000 \u00b5s (60.0%)" in tooltip and "1 call" in tooltip
    note = re.search(r'id="flame-note">(.*?)</div>', dom, re.S).group(1)
    assert note.startswith("4 distinct stacks, every call counted")


def test_the_flame_graph_draws_and_says_what_it_left_out(chromium, tmp_path, monkeypatch):
    monkeypatch.setattr(html_module, "FLAME_NODE_BUDGET", 3)
    page = tmp_path / "pruned.html"
    html_module.write_html(pruning_trace(), page)
    seen, dom = probed(chromium, page, tmp_path, """
      const pixels = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height).data;
      let coloured = 0;
      for (let i = 0; i < pixels.length; i += 4) {
        const rgb = [pixels[i], pixels[i + 1], pixels[i + 2]];
        if (Math.max(...rgb) - Math.min(...rgb) > 40) coloured++;
      }
      seen.coloured = coloured;
      seen.width = canvas.width;
    """)
    assert seen["coloured"] > seen["width"] * 16      # a's row at least, and b's and c's
    note = re.search(r'id="flame-note">(.*?)</div>', dom, re.S).group(1)
    assert "under 0.2% of their thread's time are left out: 2 of these 5, 1.000 \u00b5s" in note


def test_the_imports_fold_into_one_row_and_back(chromium, tmp_path):
    page = tmp_path / "imports.html"
    html_module.write_html(import_trace(), page)
    seen, dom = probed(chromium, page, tmp_path, """
      const rows = () => Array.from(document.querySelectorAll("#summary tbody tr"),
                                    tr => Array.from(tr.cells, td => td.textContent));
      const button = document.getElementById("fold-imports");
      seen.before = [button.textContent, rows()];
      button.click();
      seen.folded = [button.textContent, rows(),
                     document.getElementById("summary-note").textContent];
      button.click();
      seen.after = [button.textContent, rows()];
    """)
    label, rows = seen["before"]
    assert label == "Fold imports into one row"
    assert {row[0] for row in rows} == set(IMPORT_NAMES[1:])
    label, rows, note = seen["folded"]
    assert label == "Unfold imports"
    assert rows == [["app.py(1): main", "1", "1.000", "0.480"],
                    ["imports (the import machinery as one row)", "5", "0.500", "0.340"],
                    ["mod.py(1): <module>", "1", "0.300", "0.150"],
                    ["posix.stat", "2", "0.030", "0.030"]]
    assert '"imports" is the import machinery (3 functions' in note
    assert seen["after"] == seen["before"]


def test_a_jobs_page_opens_on_its_ranks(chromium, job_page, tmp_path):
    seen, dom = probed(chromium, job_page, tmp_path, """
      const select = document.getElementById("flame-view");
      seen.flame = select.options[select.selectedIndex].textContent;
      seen.table = document.getElementById("summary-process").value;
      seen.rows = Array.from(document.querySelectorAll("#summary tbody tr"),
                             tr => tr.cells[0].textContent);
    """)
    assert seen["flame"].startswith("rank 0 (pid ") and seen["flame"].endswith(")")
    assert "MainThread" in seen["flame"]
    assert seen["table"] == "ranks"
    assert any(row.endswith(": rank_step") for row in seen["rows"])
    assert not any(row.endswith(": agent_poll") for row in seen["rows"])
    note = re.search(r'<div class="note-line" id="order-note">(.*?)</div>', dom, re.S).group(1)
    assert note.startswith("Ranks first. Folded: launcher.py (pid ")
    facts = re.search(r'<span class="facts" id="facts">(.*?)</span>', dom).group(1)
    assert re.search(r"3 processes \(rank 0, pid \d+; rank 1, pid \d+; launcher.py, pid \d+\)",
                     facts), facts


def test_the_flame_graph_opens_on_the_busiest_thread(chromium, tmp_path):
    """A thread that only waits (its one frame running since before tracing began)
    comes first; the flame graph opens on the thread that made the calls."""
    names = ["<unknown>", "threading.py(1): wait", "f.py(1): a", "f.py(2): b"]
    waiter = [(1, 0, 1000, -1, True)]
    worker = [(2, 10, 500, -1, False), (3, 20, 30, 0, False), (3, 40, 50, 0, False)]
    page = tmp_path / "busiest.html"
    html_module.write_html(made_trace(names, ["python"] * 4,
                                      [("waiter", waiter), ("MainThread", worker)]), page)
    seen, _ = probed(chromium, page, tmp_path, """
      const select = document.getElementById("flame-view");
      seen.options = Array.from(select.options, option => option.textContent);
      seen.chosen = select.options[select.selectedIndex].textContent;
    """)
    assert seen["options"] == ["all 2 threads", "waiter (tid 7)", "MainThread (tid 8)"]
    assert seen["chosen"] == "MainThread (tid 8)"

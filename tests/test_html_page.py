"""The HTML page's own files (pytrace_cffi/render/page/: skeleton, stylesheet,
script; package data inlined into every page): shipped with the package, read from
a zip, parsed on their own, and run in Chromium without a JavaScript error, so a
mistake in them fails here, not in a user's browser.

Each check is shown able to fail: the same check on a copy with a planted error."""
import fnmatch
import functools
import html
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import pytrace_cffi
from pytrace_cffi.render import html as html_module
from pytrace_cffi.reading import read_trace
from pytrace_cffi.model.trace import Mark
from helpers import CHROMIUM_INSTALL, missing_tool
from test_html import install_chromium, run_chromium
from test_html_views import pytest_like_trace

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
GOLDEN = os.path.join(HERE, "data", "golden")
PAGE_FILES = (html_module.PAGE_SKELETON, html_module.PAGE_STYLE, html_module.PAGE_SCRIPT,
              html_module.PAGE_FLAME_SCRIPT, html_module.PAGE_VIEWS_SCRIPT)
# Each script, and the text whose brace a planted syntax error doubles.
SCRIPTS = ((html_module.PAGE_SCRIPT, "(function () {"),
           (html_module.PAGE_FLAME_SCRIPT, "function ptFlameGraph(env) {"),
           (html_module.PAGE_VIEWS_SCRIPT, "function ptViews(env) {"))


@functools.lru_cache(maxsize=None)
def chromium_binary():
    """Chromium (installed from Debian when missing, tried once) or None."""
    return install_chromium()


def node_binary():
    return shutil.which("node")


def page_file(name):
    return html_module._page_file(name)


def planted_syntax_error(script, opener="(function () {"):
    """The script with an unclosed brace."""
    assert opener in script
    return script.replace(opener, opener + "{", 1)


# --- shipped ---------------------------------------------------------------------------

def test_the_page_files_are_package_data_and_in_the_sdist():
    """pyproject.toml's package-data (wheels) and MANIFEST.in (sdists) take every
    file the page is made of (a wheel and an sdist built so were checked by hand)."""
    pyproject, manifest = (os.path.join(REPO, name) for name in ("pyproject.toml", "MANIFEST.in"))
    if not (os.path.exists(pyproject) and os.path.exists(manifest)):
        pytest.skip("the project's sources are not beside the tests")
    with open(pyproject, encoding="utf-8") as f:
        package_data = re.search(r'^"pytrace_cffi\.render" = (\[.*\])$', f.read(), re.M)
    assert package_data, "pyproject.toml: no package-data for pytrace_cffi.render"
    patterns = json.loads(package_data.group(1))
    with open(manifest, encoding="utf-8") as f:
        included = [line.split()[1:] for line in f if line.startswith("recursive-include")]
    for name in PAGE_FILES:
        assert any(fnmatch.fnmatch(f"page/{name}", p) for p in patterns), (name, patterns)
        assert any(where == "pytrace_cffi/render/page" and
                   any(fnmatch.fnmatch(name, p) for p in globs)
                   for where, *globs in included), (name, included)


ZIP_IMPORT = r"""
import importlib.util, os, sys, zipfile
package, archive, trace_dir, out = sys.argv[1:]
with zipfile.ZipFile(archive, "w") as z:          # the package without its C core
    for root, dirs, files in os.walk(package):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        for name in files:
            if not name.endswith((".so", ".pyd", ".o", ".c")):
                path = os.path.join(root, name)
                z.write(path, os.path.relpath(path, os.path.dirname(package)))
# a zip cannot hold a C extension: the core is loaded from its file first
[core] = [n for n in os.listdir(package) if n.startswith("_core.") and n.endswith((".so", ".pyd"))]
spec = importlib.util.spec_from_file_location("pytrace_cffi._core", os.path.join(package, core))
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
sys.modules["pytrace_cffi._core"] = module
sys.path.insert(0, archive)
from pytrace_cffi.render.html import write_html
from pytrace_cffi.reading import read_trace
from pytrace_cffi.model.trace import Mark
assert write_html.__code__.co_filename.startswith(archive), write_html.__code__.co_filename
write_html(read_trace(trace_dir), out)
"""


def test_a_page_written_from_a_zip_is_the_same(tmp_path):
    """importlib.resources finds the page's files in a zip import as on disk."""
    package = os.path.dirname(os.path.abspath(pytrace_cffi.__file__))
    trace_dir = os.path.join(GOLDEN, "threads")
    (tmp_path / "zip").mkdir()
    (tmp_path / "disk").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run([sys.executable, "-I", "-c", ZIP_IMPORT, package,
                           str(tmp_path / "pytrace_cffi.zip"), trace_dir,
                           str(tmp_path / "zip" / "t.html")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    html_module.write_html(read_trace(trace_dir), tmp_path / "disk" / "t.html")
    assert (tmp_path / "zip" / "t.html").read_bytes() == \
        (tmp_path / "disk" / "t.html").read_bytes()


# --- parsed on their own -------------------------------------------------------------

NODE_PARSE = """
const vm = require("vm");
let source = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", chunk => { source += chunk; });
process.stdin.on("end", () => { new vm.Script(source, { filename: "page.js" }); });
"""


def node_syntax_error(source):
    """None, or the SyntaxError node reports for source compiled as a browser's
    classic script (vm.Script: no module wrapper, nothing run)."""
    proc = subprocess.run([node_binary(), "-e", NODE_PARSE], input=source,
                          capture_output=True, text=True, timeout=60)
    if proc.returncode == 0:
        return None
    assert "SyntaxError" in proc.stderr, proc.stderr
    return proc.stderr


CHROMIUM_PARSE = """<!DOCTYPE html>
<html><body><pre id="parsed"></pre>
<script type="application/json" id="scripts">$SCRIPTS</script>
<script type="application/json" id="stylesheets">$STYLESHEETS</script>
<script>
const found = {scripts: [], stylesheets: []};
for (const source of JSON.parse(document.getElementById("scripts").textContent)) {
  try { new Function(source); found.scripts.push(null); }      // parsed, not run
  catch (error) { found.scripts.push(`${error.name}: ${error.message}`); }
}
for (const {text, rules} of JSON.parse(document.getElementById("stylesheets").textContent)) {
  const problems = [], sheet = new CSSStyleSheet();
  sheet.replaceSync(text);
  if (sheet.cssRules.length !== rules.length) {
    problems.push(`${sheet.cssRules.length} rules parsed of ${rules.length}`);
  }
  for (const [selector, declarations] of rules) {
    try { new CSSStyleSheet().insertRule(`${selector} {}`); }
    catch (error) { problems.push(`selector ${selector}: ${error.message}`); }
    for (const [property, value] of declarations) {
      if (!CSS.supports(property, value)) problems.push(`${selector}: ${property}: ${value}`);
    }
  }
  found.stylesheets.push(problems);
}
document.getElementById("parsed").textContent = JSON.stringify(found);
</script></body></html>
"""


def css_rules(css):
    """[selector, [[property, value], ...]] of each rule of a flat stylesheet."""
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    *blocks, rest = css.split("}")
    assert not rest.strip(), f"text after the last rule: {rest!r}"
    rules = []
    for block in blocks:
        selector, _, body = block.partition("{")
        assert "{" not in body and not selector.strip().startswith("@"), (
            "this check reads flat rules only (no @media, no nesting): extend it")
        declarations = [[part.strip() for part in d.partition(":")[::2]]
                        for d in body.split(";") if d.strip()]
        rules.append([" ".join(selector.split()), declarations])
    return rules


def chromium_parse(scripts, stylesheets, tmp_path_factory):
    """For each script: None or its SyntaxError; for each stylesheet: what Chromium
    would not take (a rule it drops, a declaration it does not support)."""
    binary = chromium_binary()
    if binary is None:
        return None
    check = tmp_path_factory.mktemp("parse") / "parse.html"
    sheets = [{"text": css, "rules": css_rules(css)} for css in stylesheets]
    check.write_text(CHROMIUM_PARSE.replace("$SCRIPTS", html_module._script_json(scripts))
                     .replace("$STYLESHEETS", html_module._script_json(sheets)),
                     encoding="utf-8")
    dom = run_chromium(binary, tmp_path_factory, "--dump-dom", check.as_uri())
    found = re.search(r'<pre id="parsed">(.*?)</pre>', dom, re.S)
    assert found, "the parse check did not run"
    return json.loads(html.unescape(found.group(1)))


def missing(tool):
    """Skips a check whose tool (node or chromium) is not installed - the page's
    script is parsed by the other where it is - and fails it in CI ($CI set),
    where .ci/run installs both (helpers.missing_tool)."""
    missing_tool(tool, {"node": "Debian: apt-get install nodejs; .ci/run installs it",
                        "chromium": CHROMIUM_INSTALL}[tool])


@pytest.fixture(scope="module")
def parsed_in_chromium(tmp_path_factory):
    style = page_file(html_module.PAGE_STYLE)
    planted_style = style + ("  #summary th:frist-child { color: red; }\n"
                             "  #summary td { colour: red; }\n")
    scripts = []
    for name, opener in SCRIPTS:
        script = page_file(name)
        scripts += [script, planted_syntax_error(script, opener)]
    return chromium_parse(scripts, [style, planted_style], tmp_path_factory)


@pytest.mark.parametrize("ci", [None, "true"])
@pytest.mark.parametrize("tool", ["node", "chromium"])
def test_without_node_or_chromium_the_parse_check_skips_except_in_ci(monkeypatch, ci, tool):
    monkeypatch.delenv("CI", raising=False)
    if ci:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception if ci else pytest.skip.Exception) as raised:
        missing(tool)
    assert (f"$CI is set but {tool} is not installed" if ci else
            f"{tool} is not installed") in str(raised.value)


def test_the_script_parses_in_node():
    if node_binary() is None:
        missing("node")
    for name, opener in SCRIPTS:
        script = page_file(name)
        assert node_syntax_error(script) is None, name
        assert "SyntaxError" in node_syntax_error(planted_syntax_error(script, opener))


def test_the_script_parses_in_chromium(parsed_in_chromium):
    if parsed_in_chromium is None:
        missing("chromium")
    found = parsed_in_chromium["scripts"]
    assert len(found) == 2 * len(SCRIPTS)
    for good, planted in zip(found[0::2], found[1::2]):
        assert good is None
        assert planted.startswith("SyntaxError")


def test_chromium_takes_every_rule_and_declaration_of_the_stylesheet(parsed_in_chromium):
    if parsed_in_chromium is None:
        missing_tool("chromium", CHROMIUM_INSTALL)
    good, planted = parsed_in_chromium["stylesheets"]
    assert good == []
    assert any("rules parsed" in p for p in planted)
    assert any(p.startswith("selector #summary th:frist-child") for p in planted)
    assert "#summary td: colour: red" in planted


# --- run in Chromium ---------------------------------------------------------------------

# Put first in a page's <head>: records every error of the page's scripts, uses the
# page as a user would (hover, click, double-click, zoom, scroll, drag, fold, sort,
# highlight, pick a process, reset, resize; in the flame graph: every view, hover,
# click to focus, scroll, Back; fold the imports) once it has loaded, and after the
# frames that draws, posts what it found to the frame around it.
_ERROR_PROBE = """<script>
(function () {
  const errors = [];
  window.addEventListener("error", event => {
    errors.push(`${event.message} (line ${event.lineno}:${event.colno})`);
  });
  window.addEventListener("unhandledrejection", event => {
    errors.push(`unhandled rejection: ${event.reason}`);
  });
  const consoleError = console.error;
  console.error = (...args) => { errors.push(`console.error: ${args.join(" ")}`);
                                 consoleError.apply(console, args); };
  function exercise() {
    const canvas = document.getElementById("canvas"), box = canvas.getBoundingClientRect();
    const at = (x, y, more) => Object.assign({clientX: box.left + x, clientY: box.top + y,
                                              bubbles: true, cancelable: true}, more);
    const mouse = (type, x, y, more) => canvas.dispatchEvent(new MouseEvent(type, at(x, y, more)));
    const wheel = (x, y, more) => canvas.dispatchEvent(new WheelEvent("wheel", at(x, y, more)));
    const xs = [0.02, 0.3, 0.5, 0.7, 0.98].map(f => f * box.width);
    for (let y = box.height - 3; y > 0; y -= 5) {       // bottom up: folds come last
      for (const x of xs) {
        mouse("mousemove", x, y);
        mouse("mousedown", x, y);
        mouse("mouseup", x, y);
      }
    }
    mouse("mouseleave", 10, 10);
    for (const y of [30, 50, 70, 90]) mouse("dblclick", box.width / 2, y);
    wheel(box.width / 3, 60, {deltaY: -400});
    wheel(box.width / 3, 60, {deltaY: -400, deltaMode: 1});
    wheel(box.width / 3, 60, {deltaY: 300, deltaX: 50});
    wheel(box.width / 3, 60, {deltaY: 1, deltaMode: 2, shiftKey: true});
    mouse("mousedown", 200, 100);                       // a drag
    mouse("mousemove", 260, 140);
    mouse("mousemove", 900, 20);
    mouse("mouseup", 900, 20);
    document.getElementById("reset").click();
    for (const th of document.querySelectorAll("#summary th")) th.click();
    for (const tr of Array.from(document.querySelectorAll("#summary tbody tr")).slice(0, 3)) {
      tr.click();
      tr.click();
    }
    for (const tr of document.querySelectorAll("#step-differences tbody tr")) {
      tr.click();
      tr.click();
    }
    const flame = document.getElementById("flame-canvas"), fbox = flame.getBoundingClientRect();
    const fat = (x, y, more) => Object.assign({clientX: fbox.left + x, clientY: fbox.top + y,
                                               bubbles: true, cancelable: true}, more);
    const frames = (type, x, y, more) =>
      flame.dispatchEvent(new (type === "wheel" ? WheelEvent : MouseEvent)(type, fat(x, y, more)));
    const views = document.getElementById("flame-view");
    for (const option of Array.from(views.options).reverse()) {
      views.value = option.value;
      views.dispatchEvent(new Event("change"));
      for (let y = fbox.height - 3; y > 0; y -= 8) {    // deepest first: focus, then go up
        for (const x of xs) {
          frames("mousemove", x, y);
          frames("click", x, y);
        }
      }
      frames("mouseleave", 10, 10);
      frames("wheel", 50, 20, {deltaY: 300});
      frames("wheel", 50, 20, {deltaY: -2, deltaMode: 1});
      for (let i = 0; i < 4; i++) document.getElementById("flame-back").click();
    }
    for (const tr of document.querySelectorAll("#tests tbody tr")) tr.click();
    for (const th of document.querySelectorAll("#tests th")) th.click();
    for (const id of ["hide-pluggy", "fold-timeline-imports"]) {   // off, on, off, on
      const toggle = document.getElementById(id);
      for (let i = 0; i < 4; i++) {
        toggle.click();
        for (let y = box.height - 3; y > 0; y -= 9) {   // a folded import unfolds
          for (const x of xs) {
            mouse("mousedown", x, y);
            mouse("mouseup", x, y);
          }
        }
      }
    }
    const foldImports = document.getElementById("fold-imports");
    foldImports.click();
    for (const tr of Array.from(document.querySelectorAll("#summary tbody tr")).slice(0, 3)) {
      tr.click();
    }
    const select = document.getElementById("summary-process");
    if (select) {
      for (const option of Array.from(select.options).reverse()) {
        select.value = option.value;
        select.dispatchEvent(new Event("change"));
      }
    }
    foldImports.click();
    window.dispatchEvent(new Event("resize"));
  }
  window.addEventListener("load", () => {
    try { exercise(); } catch (error) { errors.push(`the probe: ${error}`); }
    requestAnimationFrame(() => setTimeout(() => {
      parent.postMessage(JSON.stringify({
        page: location.pathname.split("/").pop(), errors,
        facts: document.getElementById("facts").textContent,
        rows: document.querySelectorAll("#summary tbody tr").length,
        steps: document.getElementById("steps-panel").hidden ? null :
          document.querySelectorAll("#steps tbody tr").length,
        straggler: document.getElementById("straggler-section").hidden ? null :
          document.getElementById("straggler-text").textContent}), "*");
    }, 0));
  });
})();
</script>
"""

_FRAMES = """<!DOCTYPE html>
<html><body><pre id="results">{}</pre>
<script>
const results = {{}};
window.addEventListener("message", event => {{
  const result = JSON.parse(event.data);
  results[result.page] = result;
  document.getElementById("results").textContent = JSON.stringify(results);
}});
</script>
{}
</body></html>
"""


def nothing_traced():
    with pytrace_cffi.trace() as t:
        pass
    return t.trace


def threads_with_dropped_events():
    trace = read_trace(os.path.join(GOLDEN, "threads"))
    trace.dropped_events = 3             # the header's warning
    return trace


def job_of_ranks_with_steps():
    """The golden job with its processes labelled rank 0-2, each main thread given
    STEPS_SHOWN step() instants spread over the trace: the page's Steps table."""
    trace = read_trace(os.path.join(GOLDEN, "job"))
    span = trace.stop_ns - trace.start_ns
    marks = list(trace.marks)
    for rank, pid in enumerate(trace.processes):
        trace.processes[pid]["label"] = f"rank {rank}"
        main = next(t for t in trace.threads if t.native_id == pid)
        marks += [Mark("i", trace.start_ns + span * (k + 1 + rank) // 8,
                                    main.native_id, "pytrace_cffi.step", {})
                  for k in range(STEPS_SHOWN)]
    trace.marks = marks
    return trace


STEPS_SHOWN = 4

def job_with_a_rank():
    """The golden job with its last process a rank: the others start folded."""
    trace = read_trace(os.path.join(GOLDEN, "job"))
    trace.processes[list(trace.processes)[-1]]["rank"] = 0
    return trace


# name -> (trace, call budget): the golden traces (threads with marks and regions; a
# job of three processes, and with a rank; torch names with args), a reduced page, a
# trace of nothing, the job as ranks with steps
PAGES = {
    "threads": (threads_with_dropped_events, html_module.CALL_BUDGET),
    "job": (lambda: read_trace(os.path.join(GOLDEN, "job")), html_module.CALL_BUDGET),
    "ranks": (job_with_a_rank, html_module.CALL_BUDGET),
    "torch": (lambda: read_trace(os.path.join(GOLDEN, "torch")), html_module.CALL_BUDGET),
    "reduced": (lambda: read_trace(os.path.join(GOLDEN, "threads")), 20),
    "nothing": (nothing_traced, html_module.CALL_BUDGET),
    "steps": (job_of_ranks_with_steps, html_module.CALL_BUDGET),
    "pytest": (lambda: pytest_like_trace(imports=True), html_module.CALL_BUDGET),
}

# name -> (page it is a copy of, text of the script, planted in its place): the
# probe sees an error that stops the script, and one in a handler that only a
# click on a call reaches
PLANTED = {
    "planted-syntax": ("threads", "(function () {", "(function () {{"),
    "planted-click": ("threads", "if (hit === null) return;",
                      "if (hit === null) return; throw new Error('planted: a call clicked');"),
    "planted-frame": ("threads", "if (node === null || node === focus) return;",
                      "if (node === null || node === focus) return; "
                      "throw new Error('planted: a frame clicked');"),
}


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory):
    """page name -> what the probe found, for every page of PAGES and PLANTED, each
    in a frame of one page that one headless chromium loads."""
    binary = chromium_binary()
    if binary is None:
        missing_tool("chromium", CHROMIUM_INSTALL)
    where = tmp_path_factory.mktemp("pages")
    texts = {}
    for name, (make, budget) in PAGES.items():
        html_module.write_html(make(), where / f"{name}.html", call_budget=budget)
        texts[name] = (where / f"{name}.html").read_text(encoding="utf-8")
        assert texts[name].startswith("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n")
    assert '"reduced":null' not in texts["reduced"] and '"reduced":null' in texts["threads"]
    for name, (original, text, planted) in PLANTED.items():
        assert texts[original].count(text) == 1, f"page.js changed: {text!r} not found once"
        texts[name] = texts[original].replace(text, planted)
    frames = []
    for name, text in texts.items():
        (where / f"probed-{name}.html").write_text(
            text.replace("<head>\n", "<head>\n" + _ERROR_PROBE, 1), encoding="utf-8")
        frames.append(f'<iframe src="probed-{name}.html" width="1000" height="700"></iframe>')
    (where / "frames.html").write_text(_FRAMES.format("{}", "\n".join(frames)),
                                       encoding="utf-8")
    # a window that shows every frame: one out of view is not drawn (no animation frames)
    window = f"--window-size=1100,{720 * len(frames) + 100}"
    found = {}
    # Now and then (1 frame in ~70 loads here) a frame's report has not arrived when
    # chromium's virtual time runs out: a second load gives the ones missing. A page
    # that never reports stays missing, and its test says so.
    for _ in range(2):
        dom = run_chromium(binary, tmp_path_factory, "--dump-dom", window,
                           "--virtual-time-budget=10000", (where / "frames.html").as_uri())
        loaded = json.loads(html.unescape(re.search(r'<pre id="results">(.*?)</pre>', dom,
                                                    re.S).group(1)))
        found = {**loaded, **found}
        if len(found) == len(texts):
            break
    return {name[len("probed-"):-len(".html")]: result for name, result in found.items()}


@pytest.mark.parametrize("name", list(PAGES))
def test_the_page_runs_without_a_javascript_error(page_runs, name):
    assert name in page_runs, f"the {name} page did not finish loading"
    found = page_runs[name]
    assert found["errors"] == []
    assert " on " in found["facts"] and found["rows"] > 0     # the script ran to the end


def test_the_steps_table_shows_only_for_ranks_with_steps(page_runs):
    assert page_runs["steps"]["steps"] == STEPS_SHOWN
    # its ranks' steps (the first skipped), the one with most time outside collectives
    # (here no collective: all their time)
    assert re.fullmatch(r"rank \d: [\d.]+ ms outside collectives against [\d.]+ ms for the "
                        r"median of the others: its steps are longest", page_runs["steps"]["straggler"])
    assert [name for name, found in page_runs.items() if found.get("straggler") is not None] \
        == ["steps"]
    assert [name for name, found in page_runs.items() if found.get("steps") is not None] \
        == ["steps"]


def test_the_probe_sees_an_error_that_stops_the_script(page_runs):
    [error] = page_runs["planted-syntax"]["errors"]
    assert "SyntaxError" in error
    assert page_runs["planted-syntax"]["facts"] == ""


def test_the_probe_clicks_a_call_and_sees_an_error_in_a_handler(page_runs):
    errors = page_runs["planted-click"]["errors"]
    assert errors and all("planted: a call clicked" in error for error in errors)


def test_the_probe_clicks_a_flame_graph_frame_and_sees_an_error_in_its_handler(page_runs):
    errors = page_runs["planted-frame"]["errors"]
    assert errors and all("planted: a frame clicked" in error for error in errors)

"""%load_ext pytrace_cffi and the %%pytrace cell magic (pytrace_cffi/jupyter.py):
driven through IPython's InteractiveShell, and a notebook executed by nbclient on
an ipykernel. IPython, ipykernel and nbclient are test-only dependencies
(tests/run_all.sh installs them): where they are missing these tests skip, except
in CI ($CI set), where they fail."""
import html
import importlib
import json
import os
import re
import subprocess
import sys

import pytest

import pytrace_cffi
from pytrace_cffi import jupyter
from pytrace_cffi.reading import read_trace

from helpers import CHROMIUM_INSTALL, missing_tool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(pytrace_cffi.__file__)))


def needed(module):
    """module imported, or the test skipped (failed in CI)."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"$CI is set but {module} does not import ({exc}): the Jupyter "
                        "tests must run in CI (pip install ipython ipykernel nbclient)",
                        pytrace=False)
        pytest.skip(f"{module} is not installed (pip install ipython ipykernel nbclient)")


@pytest.mark.parametrize("ci", [None, "true"])
def test_a_missing_jupyter_package_skips_except_in_ci(monkeypatch, ci):
    monkeypatch.delenv("CI", raising=False)
    if ci:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception if ci else pytest.skip.Exception) as raised:
        needed("no_such_jupyter_package")
    assert ("$CI is set but no_such_jupyter_package" if ci else
            "no_such_jupyter_package is not installed") in str(raised.value)


def test_importing_pytrace_cffi_imports_no_ipython():
    code = ("import sys, pytrace_cffi\n"
            "assert callable(pytrace_cffi.load_ipython_extension)\n"
            "print(sorted(m for m in sys.modules if m.startswith(('IPython', "
            "'pytrace_cffi.jupyter', 'pytrace_cffi.render'))))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


@pytest.fixture(scope="module")
def shell(tmp_path_factory):
    """An InteractiveShell with the extension loaded (its own IPYTHONDIR, no history
    file); the interpreter's display and exception hooks put back after."""
    needed("IPython")
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config
    saved = sys.displayhook, sys.excepthook, os.environ.get("IPYTHONDIR")
    os.environ["IPYTHONDIR"] = str(tmp_path_factory.mktemp("ipython"))
    config = Config()
    config.HistoryManager.enabled = False
    ip = InteractiveShell.instance(config=config)
    result = ip.run_cell("%load_ext pytrace_cffi")
    assert result.success, result.error_in_exec
    yield ip
    InteractiveShell.clear_instance()
    sys.displayhook, sys.excepthook = saved[:2]
    if saved[2] is None:
        os.environ.pop("IPYTHONDIR", None)
    else:
        os.environ["IPYTHONDIR"] = saved[2]


def run(shell, cell):
    """(ExecutionResult, [text/html displayed], stdout, stderr) of one cell."""
    from IPython.utils.capture import capture_output
    with capture_output() as captured:
        result = shell.run_cell(cell)
    shown = [o.data["text/html"] for o in captured.outputs if "text/html" in o.data]
    return result, shown, captured.stdout, captured.stderr


def framed_page(shown):
    """(the line above the page, the page's text, its meta) of a displayed page."""
    found = re.fullmatch(r'<p>(.*?)</p><iframe srcdoc="([^"]*)" sandbox="allow-scripts" '
                         r'style="[^"]*"></iframe>', shown, re.S)
    assert found, shown[:300]
    page = html.unescape(found.group(2))
    meta = json.loads(re.search(r'<script type="application/json" id="pt-meta">(.*?)</script>',
                                page, re.S).group(1))
    return html.unescape(found.group(1)), page, meta


def test_a_traced_cell_shows_its_page_and_its_value(shell):
    result, shown, _, _ = run(shell, "%%pytrace\n"
                                     "def cell_work(n):\n"
                                     "    return sorted(range(n))[-1]\n"
                                     "picked = [cell_work(n) for n in (3, 4, 5)]\n"
                                     "picked[0] + 100\n")
    assert result.success, result.error_in_exec
    assert result.result == 102                        # the cell's last expression: Out[n]
    assert shell.user_ns["picked"] == [2, 3, 4]         # its names are the notebook's
    assert jupyter._CELL_VALUE not in shell.user_ns
    [page_html] = shown
    line, page, meta = framed_page(page_html)
    assert line.startswith("pytrace_cffi: ") and " calls on 1 thread, " in line
    assert page.startswith("<!DOCTYPE html>") and 'id="flame-canvas"' in page
    calls = {row[0].rsplit(": ", 1)[-1]: row[1] for row in meta["summary"]["rows"]}
    assert calls["cell_work"] == 3 and calls["builtins.sorted"] == 3
    # IPython's frames are left out: the cell's code is the outermost call
    flame = meta["flame"]["threads"][0]["nodes"]
    outermost = {meta["names"][flame[j + 1]] for j in range(0, len(flame), 5) if flame[j] == 0}
    assert len(outermost) == 1 and outermost.pop().endswith(": <module>")
    assert not any("IPython" in row[0] for row in meta["summary"]["rows"])
    assert not pytrace_cffi._has_session()


def test_run_options_and_an_output_file(shell, tmp_path):
    out = tmp_path / "cell.json"
    result, shown, _, _ = run(shell, f"%%pytrace --no-c-calls -o {out}\n"
                                     "def leaf():\n    return len('abc')\n"
                                     "[leaf() for _ in range(7)];\n")
    assert result.success, result.error_in_exec
    assert result.result is None                     # its last expression ends in ";"
    line, _, meta = framed_page(shown[0])
    assert line.endswith(f"; written to {out}")
    assert set(meta["kinds"]) == {"p"}              # no built-in calls recorded
    written = read_trace(str(out))
    assert sum(1 for c in written if c.name.endswith(": leaf")) == 7
    assert not any(c.kind == "c" for c in written)


@pytest.mark.parametrize("line, says", [
    ("--no-such-option", "unrecognized arguments: --no-such-option"),
    ("-o trace.txt", "'.txt' is not a trace format"),
    ("--max-depth 0", "must be 1 or more"),
])
def test_a_bad_line_is_a_usage_error_and_runs_nothing(shell, line, says):
    from IPython.core.error import UsageError
    shell.user_ns.pop("never_set", None)
    result, shown, _, stderr = run(shell, f"%%pytrace {line}\nnever_set = 1\n")
    assert isinstance(result.error_in_exec, UsageError)
    assert says in str(result.error_in_exec)
    assert shown == [] and "never_set" not in shell.user_ns
    assert not pytrace_cffi._has_session()


def test_help_runs_nothing(shell, capsys):
    shell.user_ns.pop("never_set", None)
    result, shown, stdout, _ = run(shell, "%%pytrace --help\nnever_set = 1\n")
    assert result.success and shown == [] and "never_set" not in shell.user_ns
    assert "--no-c-calls" in stdout and "-o OUT" in stdout


def test_a_cell_that_raises_still_shows_its_trace(shell):
    result, shown, _, _ = run(shell, "%%pytrace\n"
                                     "def failing_step():\n"
                                     "    raise ValueError('cell failed')\n"
                                     "failing_step()\n")
    assert isinstance(result.error_in_exec, ValueError)
    _, _, meta = framed_page(shown[0])
    assert any(row[0].endswith(": failing_step") for row in meta["summary"]["rows"])
    assert not pytrace_cffi._has_session()


def test_a_big_cell_says_its_timeline_is_reduced_and_a_huge_page_is_not_inlined(
        shell, monkeypatch):
    cell = "%%pytrace --no-c-calls\ndef tick(i):\n    return i\nfor i in range(300):\n    tick(i)\n"
    monkeypatch.setattr(jupyter, "INLINE_CALL_BUDGET", 100)
    result, shown, _, _ = run(shell, cell)
    line, _, meta = framed_page(shown[0])
    assert "the timeline below is reduced to keep the notebook small (over 100 calls)" in line
    assert meta["reduced"]["budget"] == 100 and meta["reduced"]["calls"] > 300
    monkeypatch.setattr(jupyter, "INLINE_MAX_BYTES", 1000)
    result, shown, _, _ = run(shell, cell)
    [text] = shown
    assert "<iframe" not in text and "too big to put into the notebook" in text


NOTEBOOK_CELLS = ["%load_ext pytrace_cffi",
                  "%%pytrace --no-c-calls\n"
                  "def notebook_work(n):\n"
                  "    return sum(range(n))\n"
                  "notebook_work(10) + notebook_work(20)\n"]


def test_a_notebook_runs_the_magic_on_a_kernel(tmp_path, monkeypatch):
    """nbclient executes a notebook on an ipykernel of this interpreter (a kernel
    spec of the test's own, so no other installed python3 kernel is picked)."""
    nbformat, nbclient = needed("nbformat"), needed("nbclient")
    needed("ipykernel")
    kernels = tmp_path / "jupyter" / "kernels" / "pytrace-test"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "pytrace test", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [ROOT] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)
                                               for source in NOTEBOOK_CELLS])
    nbclient.NotebookClient(notebook, timeout=180, kernel_name="pytrace-test",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = notebook.cells[1].outputs
    shown = [o for o in outputs if o.output_type == "display_data"]
    values = [o for o in outputs if o.output_type == "execute_result"]
    assert [o.data["text/plain"] for o in values] == ["235"]
    line, _, meta = framed_page(shown[0].data["text/html"])
    assert line.startswith("pytrace_cffi: ")
    calls = {row[0].rsplit(": ", 1)[-1]: row[1] for row in meta["summary"]["rows"]}
    assert calls["notebook_work"] == 2
    # the kernel's own threads (IOPub, heartbeat...) are in the trace too and may be
    # busier than the cell; the cell's thread is the one whose flame has notebook_work
    def names_in(nodes):
        return {meta["names"][nodes[j + 1]].rsplit(": ", 1)[-1] for j in range(0, len(nodes), 5)}
    [number] = [t for t, flame in enumerate(meta["flame"]["threads"])
                if "notebook_work" in names_in(flame["nodes"])]
    assert meta["threads"][number]["name"] == "MainThread"
    flame = meta["flame"]["threads"][number]["nodes"]
    outermost = {meta["names"][flame[j + 1]] for j in range(0, len(flame), 5) if flame[j] == 0}
    assert len(outermost) == 1 and outermost.pop().endswith(": <module>")


# Put first in the framed page's <head>: once it has loaded (its script has run and
# drawn by then), tells the notebook (the frame's parent) what it shows and any error
# of its scripts. (Not from an animation frame: headless chromium often runs none in
# a sandboxed frame before its virtual time ends.)
FRAMED_PROBE = """<script>
const probeErrors = [];
window.addEventListener("error", event => probeErrors.push(event.message));
window.addEventListener("load", () => parent.postMessage(
  JSON.stringify({errors: probeErrors, facts: document.getElementById("facts").textContent,
                  flame: document.getElementById("flame-path").textContent}), "*"));
</script>
"""

NOTEBOOK_PAGE = """<!DOCTYPE html>
<html><body><pre id="reported"></pre>
<script>
window.addEventListener("message", event => {
  document.getElementById("reported").textContent = event.data;
});
</script>
$FRAME
</body></html>
"""


def test_the_framed_page_runs_in_its_sandbox_in_chromium(shell, tmp_path_factory):
    """The iframe the magic displays runs the page's scripts (sandbox allow-scripts,
    no access to the notebook), in headless Chromium."""
    from test_html import install_chromium, run_chromium
    binary = install_chromium()
    if binary is None:
        missing_tool("chromium", CHROMIUM_INSTALL)
    _, shown, _, _ = run(shell, "%%pytrace\ndef framed_work():\n    return sorted('cba')\n"
                                "framed_work()\n")
    _, page, _ = framed_page(shown[0])
    frame = jupyter.page_frame(page.replace("<head>\n", "<head>\n" + FRAMED_PROBE, 1))
    where = tmp_path_factory.mktemp("notebook") / "notebook.html"
    where.write_text(NOTEBOOK_PAGE.replace("$FRAME", frame), encoding="utf-8")
    # Should chromium's virtual time run out before the frame reports (as now and then
    # in test_html_page, and under a loaded machine's CI three loads in a row), a load
    # again with twice the budget.
    for attempt in range(5):
        dom = run_chromium(binary, tmp_path_factory, "--dump-dom", "--window-size=1200,1000",
                           f"--virtual-time-budget={10000 << attempt}", where.as_uri())
        found = re.search(r'<pre id="reported">(.+?)</pre>', dom, re.S)
        if found:
            break
    assert found, f"the framed page never reported; its DOM ends: {dom[-1500:]!r}"
    reported = json.loads(html.unescape(found.group(1)))
    assert reported["errors"] == []
    assert " calls on 1 thread" in reported["facts"]
    assert reported["flame"] == f"MainThread (tid {threading_native_id()})"


def threading_native_id():
    import threading
    return threading.main_thread().native_id

"""Rules of the suite itself: in CI ($CI set) the .pftrace tests' decoder (and the
Jupyter tests' packages) must be there, a missing one fails instead of skipping
every check that needs it."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))

USES_THE_DECODER = """
from helpers import perfetto_protos

pb = perfetto_protos()


def test_decodes():
    assert pb is not None
"""

HAS_ITS_OWN_CHECK = """
from helpers import perfetto_protos


def test_has_its_own_check():
    assert perfetto_protos(required=False) is None
"""


@pytest.mark.parametrize("ci", [None, "true"])
def test_a_missing_perfetto_decoder_skips_except_in_ci(tmp_path, ci):
    blocked = tmp_path / "blocked" / "perfetto"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('perfetto blocked by the test')\n")
    (tmp_path / "test_uses_decoder.py").write_text(USES_THE_DECODER)
    (tmp_path / "test_own_check.py").write_text(HAS_ITS_OWN_CHECK)
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "blocked"), HERE,
                                         env.get("PYTHONPATH", "")])
    if ci:
        env["CI"] = ci
    for name, outcome in (("test_uses_decoder.py", "1 skipped"),
                          ("test_own_check.py", "1 passed")):
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "-rs", name], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=120)
        summary = proc.stdout.splitlines()[-1]
        if ci:          # a collection error or a failed test: the run fails
            assert proc.returncode not in (0, 5), proc.stdout
            assert "$CI is set but the perfetto protos do not import" in proc.stdout
            assert "skipped" not in summary and "passed" not in summary, summary
        else:
            assert summary.startswith(outcome), proc.stdout


def test_run_all_fails_an_interpreter_without_the_decoder_in_ci():
    """tests/run_all.sh: where perfetto cannot be installed, CI fails that
    interpreter instead of printing a line and skipping."""
    script = os.path.join(HERE, "run_all.sh")
    with open(script, encoding="utf-8") as f:
        text = f.read()
    install = text.split('pip install -q perfetto', 1)[1].split("\n    fi\n", 1)[0]
    assert 'if [ -n "${CI:-}" ]' in install and 'bad_versions+=" $v(perfetto)"' in install


def test_run_all_fails_an_interpreter_without_the_jupyter_packages_in_ci():
    """tests/run_all.sh installs the Jupyter tests' packages (test-only); where they
    cannot install, CI fails that interpreter (tests/test_jupyter.py fails too)."""
    with open(os.path.join(HERE, "run_all.sh"), encoding="utf-8") as f:
        text = f.read()
    install = text.split("pip install -q ipython ipykernel nbclient", 1)[1].split(
        "\n    fi\n", 1)[0]
    assert 'if [ -n "${CI:-}" ]' in install and 'bad_versions+=" $v(jupyter)"' in install


def test_pyflakes_finds_nothing():
    """No unused import or name, no redefinition, in the package or the tests
    (run_all.sh installs pyflakes; skipped where it is not installed)."""
    pytest.importorskip("pyflakes")
    root = os.path.dirname(HERE)
    proc = subprocess.run([sys.executable, "-m", "pyflakes", "pytrace_cffi", "tests"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and not proc.stdout, proc.stdout + proc.stderr

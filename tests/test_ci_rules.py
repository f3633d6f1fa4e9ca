"""Rules of the suite itself: in CI ($CI set) the .pftrace tests' decoder (and the
Jupyter tests' packages) must be there, a missing one fails instead of skipping
every check that needs it."""
import os
import re
import shutil
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


@pytest.mark.parametrize("ci", [None, "true"])
def test_a_missing_tool_skips_except_in_ci(monkeypatch, ci):
    """helpers.missing_tool: the chromium, node, go and C compiler tests' rule - a
    skip on a developer's machine, a failure in CI (#31)."""
    from helpers import missing_tool
    monkeypatch.delenv("CI", raising=False)
    if ci:
        monkeypatch.setenv("CI", ci)
    with pytest.raises(pytest.fail.Exception if ci else pytest.skip.Exception) as raised:
        missing_tool("go", "Debian: golang-go")
    assert str(raised.value) == (
        "$CI is set but go is not installed (Debian: golang-go): the tests that need it "
        "must run in CI" if ci else "go is not installed (Debian: golang-go)")


def test_every_tool_test_uses_the_rule():
    """No test skips by itself for a missing chromium or go (they skipped in CI too,
    where .ci/run only said they would): each calls helpers.missing_tool (#31)."""
    users = {}
    for name in sorted(os.listdir(HERE)):
        if name.endswith(".py") and name != "helpers.py":
            with open(os.path.join(HERE, name), encoding="utf-8") as f:
                text = f.read()
            assert not re.search(r"pytest\.skip\([^)]*(chromium|`go`)", text), name
            users[name] = text.count("missing_tool(")
    for name in ("test_html.py", "test_html_flame.py", "test_html_page.py",
                 "test_job_outputs.py", "test_jupyter.py", "test_flame_outputs.py"):
        assert users[name] >= 1, name


@pytest.mark.parametrize("ci", [None, "true"])
def test_ci_run_stops_when_a_tool_cannot_be_installed_in_ci(tmp_path, ci):
    """.ci/run's tools part, run with a PATH where go, node and chromium are missing
    and apt-get fails: in CI it exits 1 naming the first, before any test;
    elsewhere it says each will skip and goes on (#31)."""
    script = os.path.join(os.path.dirname(HERE), ".ci", "run")
    if not os.path.exists(script):
        pytest.skip("the project's sources are not beside the tests")
    with open(script, encoding="utf-8") as f:
        text = f.read()
    tools = text[text.index("missing_tools="):text.index('echo "== example')]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("apt-get", "exit 100"), ("id", "echo 0")):      # root, apt fails
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    (tmp_path / "part").write_text("set -euo pipefail\n" + tools + "echo went on\n")
    env = {"PATH": f"{bin_dir}:/nonexistent", "HOME": str(tmp_path)}
    if ci:
        env["CI"] = ci
    bash = shutil.which("bash")
    proc = subprocess.run([bash, str(tmp_path / "part")], env=env, capture_output=True,
                          text=True, timeout=60)
    if ci:
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert proc.stdout.splitlines()[-1] == (
            "chromium is not installed (Debian: chromium): in CI its tests must run")
    else:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "   apt-get could not install chromium nodejs golang-go" in proc.stdout
        for tool, package in (("chromium", "chromium"), ("node", "nodejs"),
                              ("go", "golang-go")):
            assert f"   {tool} is not installed (Debian: {package}): its tests will skip" \
                in proc.stdout
        assert proc.stdout.endswith("went on\n")


@pytest.mark.skipif(sys.version_info < (3, 10), reason="sys.stdlib_module_names is 3.10+")
def test_no_script_directory_shadows_a_standard_module():
    """A script run from benchmarks/, tests/ or examples/ has its directory first on
    sys.path: a file there named as a standard module (3.14 added `compression`,
    which gzip imports on 3.15) hides it from everything the script imports."""
    root = os.path.dirname(HERE)
    shadows = [f"{folder}/{name}" for folder in ("benchmarks", "tests", "examples")
               for name in sorted(os.listdir(os.path.join(root, folder)))
               if name.endswith(".py") and name[:-3] in sys.stdlib_module_names]
    assert not shadows, f"named as standard modules of Python {sys.version[:4]}: {shadows}"


def test_run_all_covers_3_9_to_3_15_and_ci_needs_3_14_and_3_15():
    """tests/run_all.sh runs every CPython 3.9-3.15 it finds; a missing one is
    skipped with a line, except 3.14 and 3.15 in CI (.ci/run installs them from
    Debian sid: .ci/sid_pythons.sh), which fail the run."""
    with open(os.path.join(HERE, "run_all.sh"), encoding="utf-8") as f:
        text = f.read()
    assert 'ALL_VERSIONS="3.9 3.10 3.11 3.12 3.13 3.14 3.15"' in text
    assert 'REQUIRED_IN_CI="3.14 3.15"' in text
    missing = text.split('if [ -z "$py" ]; then', 1)[1].split("\n    fi\n", 1)[0]
    assert 'if [ -n "${CI:-}" ]' in missing and 'bad_versions+=" $v(missing)"' in missing
    assert 'echo "== Python $v: not installed, skipped"' in missing
    with open(os.path.join(os.path.dirname(HERE), ".ci", "run"), encoding="utf-8") as f:
        ci = f.read()
    assert ci.index("bash .ci/sid_pythons.sh") < ci.index("\nbash tests/run_all.sh")


def test_sid_pythons_says_one_line_and_does_nothing_when_not_root(tmp_path):
    """.ci/sid_pythons.sh needs root and apt-get; elsewhere one line, exit 0, and
    nothing written (no chroot, no wrapper)."""
    script = os.path.join(os.path.dirname(HERE), ".ci", "sid_pythons.sh")
    if not os.path.exists(script):
        pytest.skip("the project's sources are not beside the tests")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("apt-get", "exit 100"), ("id", "echo 1000")):
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path),
           "SID_DIR": str(tmp_path / "sid"), "SID_WRAPPER_DIR": str(tmp_path / "wrappers")}
    proc = subprocess.run([shutil.which("bash"), script], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == ("   sid's Python 3.14 3.15: not root with apt-get here, "
                           "not installed\n")
    assert sorted(os.listdir(tmp_path)) == ["bin"]

"""Restricted use: the package copied under another package's namespace, and the
interpreter in isolated (-I) and no-site (-S) modes."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytrace_cffi

PACKAGE_DIR = os.path.dirname(os.path.abspath(pytrace_cffi.__file__))
SITE_DIR = os.path.dirname(PACKAGE_DIR)
CFFI_DIR = os.path.dirname(os.path.abspath(__import__("_cffi_backend").__file__))

WORK = textwrap.dedent("""
    import importlib, json, sys, threading

    def fib(n):
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    def check(tracer, out):
        with tracer.trace() as t:
            worker = threading.Thread(target=fib, args=(6,))
            worker.start()
            fib(8)
            worker.join()
            with tracer.record_function("region"):
                len("x")
        t.trace.export_chrome_trace(out)
        t.trace.save(out + ".dir")
        loaded = tracer.load(out + ".dir")
        fibs = sum(1 for c in loaded if c.name.endswith(": fib"))
        with open(out) as f:
            events = json.load(f)["traceEvents"]
        assert fibs == 67 + 25, fibs
        assert any(e["name"] == "region" for e in events)
        # the HTML page's files (render/page/, package data) came along
        html = importlib.import_module(tracer.__name__ + ".html")
        html.write_html(t.trace, out + ".html")
        with open(out + ".html", encoding="utf-8") as f:
            page = f.read()
        assert "#summary tbody tr.highlighted" in page, "no stylesheet"
        assert 'const meta = JSON.parse(document.getElementById("pt-meta")' in page, "no script"
        print("ok", sorted(m for m in sys.modules if m.split(".")[0] == "pytrace_cffi"))
""")


def run(args, cwd, code):
    proc = subprocess.run([sys.executable, *args, "-c", code], cwd=cwd, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_vendored_under_another_package(tmp_path):
    host = tmp_path / "host"
    shutil.copytree(PACKAGE_DIR, host / "thirdparty" / "tracer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (host / "thirdparty" / "__init__.py").write_text("")
    code = (f"import sys; sys.path[:0] = [{str(host)!r}, {CFFI_DIR!r}]\n" + WORK +
            "from thirdparty import tracer\ncheck(tracer, 'out.json')\n")
    out = run(["-I"], tmp_path, code)
    # Nothing is imported under the top-level name: not even the C extension,
    # which cffi registers under the name it was built with (the copy takes that
    # entry out again: see the next test).
    assert out.strip() == "ok []"


def test_a_vendored_copy_beside_the_package_leaves_each_its_own_core(tmp_path):
    """A tool's vendored copy and the package itself in one process, imported in
    either order: each traces with its own C core. The copy's import put its core
    in sys.modules under the built name, pytrace_cffi._core: the package's next
    import took the copy's (a TypeError, "types are different", at the first
    trace), or, imported after it, ran on the copy's build."""
    host = tmp_path / "host"
    shutil.copytree(PACKAGE_DIR, host / "thirdparty" / "tracer",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (host / "thirdparty" / "__init__.py").write_text("")
    for first, second in (("pytrace_cffi", "thirdparty.tracer"),
                          ("thirdparty.tracer", "pytrace_cffi")):
        code = (f"import sys; sys.path[:0] = [{str(host)!r}, {SITE_DIR!r}, {CFFI_DIR!r}]\n"
                + WORK + textwrap.dedent(f"""
                    import importlib
                    one, two = (importlib.import_module(n) for n in ({first!r}, {second!r}))
                    for tracer in (one, two, one):
                        check(tracer, tracer.__name__ + ".json")
                        core = sys.modules[tracer.__name__ + "._core"]
                        assert core.__file__.startswith(tracer.__path__[0]), core.__file__
                """))
        assert run(["-I"], tmp_path, code).startswith("ok ")


def test_isolated_mode(tmp_path):
    code = (f"import sys; sys.path[:0] = [{SITE_DIR!r}, {CFFI_DIR!r}]\n" + WORK +
            "import pytrace_cffi\ncheck(pytrace_cffi, 'out.json')\n")
    assert run(["-I"], tmp_path, code).startswith("ok ")


def test_no_site_mode(tmp_path):
    code = (f"import sys; sys.path[:0] = [{SITE_DIR!r}, {CFFI_DIR!r}]\n" + WORK +
            "import pytrace_cffi\ncheck(pytrace_cffi, 'out.json')\n")
    code = "import sys; assert sys.flags.no_site == 1\n" + code
    assert run(["-S"], tmp_path, code).startswith("ok ")

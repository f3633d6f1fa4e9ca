"""python -m pytrace_cffi run: scripts and modules, threads, argv, exit codes."""
import json
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import sys, threading

    def child(n):
        return sum(len(str(i)) for i in range(n))

    def main():
        t = threading.Thread(target=child, args=(25,), name="cli-worker")
        t.start()
        child(10)
        t.join()
        print("argv", sys.argv[1:], "path0", sys.path[0])
        mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
        if mode == "raise":
            raise RuntimeError("script failed")
        if mode == "exit":
            sys.exit(7)
        if mode == "interrupt":
            raise KeyboardInterrupt

    if __name__ == "__main__":
        main()
""")


def run_cli(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "pytrace_cffi", *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def slices(path):
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    return data, [e for e in data["traceEvents"] if e["ph"] == "X"]


@pytest.mark.parametrize("mode, code", [("ok", 0), ("raise", 1), ("exit", 7),
                                        ("interrupt", 130)])
def test_run_script_writes_trace_and_keeps_exit_code(tmp_path, mode, code):
    script_dir = tmp_path / "scripts"
    script_dir.mkdir()
    script = script_dir / "prog.py"
    script.write_text(SCRIPT)
    out = tmp_path / "out.json"
    proc = run_cli(tmp_path, "run", "-o", str(out), str(script), mode, "--flag")
    assert proc.returncode == code, proc.stderr
    assert f"argv ['{mode}', '--flag'] path0 {script_dir}" in proc.stdout
    data, events = slices(out)
    names = [e["name"] for e in events]
    # the script's directory is sys.path[0], so its files read as "prog.py"
    assert names.count("prog.py(4): child") == 2
    assert names.count("prog.py(7): main") == 1
    by_id = {e["args"]["Python id"]: e for e in events}
    lens = [e for e in events if e["name"] == "builtins.len"
            and by_id[e["args"]["Python parent id"]]["name"].startswith("prog.py(")]
    assert len(lens) == 25 + 10 + 1      # the genexprs, and len(sys.argv) in main
    thread_names = {e["args"]["name"] for e in data["traceEvents"] if e["ph"] == "M"}
    assert {"MainThread", "cli-worker"} <= thread_names
    if mode == "raise":
        assert "RuntimeError: script failed" in proc.stderr
    assert not [n for n in names if "pytrace_cffi/" in n and "__main__" not in n]


def test_run_module_with_gzip_output(tmp_path):
    (tmp_path / "mymod.py").write_text(SCRIPT)
    out = tmp_path / "out.json.gz"
    proc = run_cli(tmp_path, "run", "-o", str(out), "--no-c-calls", "-m", "mymod", "ok")
    assert proc.returncode == 0, proc.stderr
    import gzip
    with gzip.open(out, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    assert sum(1 for e in events if e["name"].endswith(": child")) == 2
    assert not [e for e in events if e["name"] == "builtins.len"]


def test_bad_invocations_fail_clearly(tmp_path):
    proc = run_cli(tmp_path, "run", "-o", "x.json", "missing.py")
    assert proc.returncode != 0 and "cannot find script" in proc.stderr
    proc = run_cli(tmp_path, "run", "-o", "x.txt", "missing.py")
    assert proc.returncode != 0
    proc = run_cli(tmp_path, "--help")
    assert proc.returncode == 0 and "run" in proc.stdout

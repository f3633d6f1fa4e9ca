"""`python -m pytrace_cffi attach PID [--duration S] [-o OUT] [run's options]` and
`attach PID --stop`: tracing a running process that was not started under us,
through sys.remote_exec (PEP 768, CPython 3.14+). The script it sends runs in the
target's main thread at its next safe point: it checks the interpreter, puts this
package's directory on the target's sys.path for the import only (when the target
cannot import it already), and calls _attached.begin, which starts tracing and a
thread of ours that ends it (see _attached.py for the files both sides share).
"""
import json
import os
import sys
import tempfile
import time

from .. import formats, options as start_options
from .arguments import check_output

REMOTE_EXEC_VERSION = (3, 14)
_SCRIPT = '''\
import sys
_d, _t, _p = {directory!r}, {token!r}, {parent!r}
def _say(facts):
    import json, os
    with open(_d + "/status-" + _t + ".json.tmp", "w") as f:
        json.dump(facts, f)
    os.replace(_d + "/status-" + _t + ".json.tmp", _d + "/status-" + _t + ".json")
try:
    import os, sysconfig
    _m = sys.modules.get("pytrace_cffi")
    if sys.implementation.name != "cpython" or sys.version_info < (3, 9):
        _say({{"state": "refused", "why": "not CPython 3.9+: " + sys.version}})
    elif sysconfig.get_config_var("Py_GIL_DISABLED"):
        _say({{"state": "refused", "why": "a free-threaded build: pytrace_cffi's abi3 "
                                          "module does not load in it"}})
    elif _m is not None and os.path.dirname(os.path.dirname(os.path.abspath(
            getattr(_m, "__file__", None) or "?"))) != _p:
        _say({{"state": "refused", "why": "it imports another pytrace_cffi already: "
               + str(getattr(_m, "__file__", None))}})
    else:
        _added = _p not in sys.path
        if _added:
            sys.path.insert(0, _p)
        try:
            import pytrace_cffi._attached
        finally:
            if _added and _p in sys.path:
                sys.path.remove(_p)
        pytrace_cffi._attached.begin(_d, _t, sys._getframe().f_code)
except BaseException as _e:
    _say({{"state": "failed", "why": type(_e).__name__ + ": " + str(_e)}})
'''


def add_attach_parser(commands):
    attach = commands.add_parser(
        "attach", help="trace a running Python 3.14+ process, then write OUT",
        usage="%(prog)s PID [--duration S] [-o OUT] [options] | PID --stop",
        description="Starts tracing in a running process that was not started under "
                    "pytrace_cffi, through sys.remote_exec (Python 3.14+: run attach with "
                    "the target's Python version, as the same user or one allowed to "
                    "ptrace it). It traces every thread as `run` does, for --duration "
                    "seconds, or until `attach PID --stop` or the process's exit, then "
                    "the target writes OUT. The target's own output and exit do not "
                    "change. Its child processes are not followed.")
    attach.add_argument("pid", type=int, metavar="PID")
    attach.add_argument("-o", "--output", default="trace.pftrace", metavar="OUT",
                        help="where to write the trace, as `run -o` (default: "
                             "trace.pftrace, relative to this directory)")
    attach.add_argument("--duration", type=float, metavar="SECONDS",
                        help="stop tracing this long after it started, wait for OUT and "
                             "say what was written (without it: attach returns once "
                             "tracing runs; stop it with `attach PID --stop`)")
    attach.add_argument("--stop", action="store_true",
                        help="stop the tracing an earlier attach started in PID, and wait "
                             "for its OUT")
    attach.add_argument("--wait", type=float, default=10.0, metavar="SECONDS",
                        help="how long to wait for the target to run the attach script, "
                             "and for OUT to be written beyond --duration (default 10)")
    for option in start_options.CLI_OPTIONS:
        start_options.add_argument(attach, option)


def attach_dir(pid, make=False):
    """The attach directory of pid: ours (mode 0700, owned by us) under the
    temporary directory, shared with the target through files (see _attached)."""
    uid = os.getuid() if hasattr(os, "getuid") else 0
    base = os.path.join(tempfile.gettempdir(), f"pytrace_cffi-attach-{uid}")
    path = os.path.join(base, str(pid))
    if make:
        for place in (base, path):
            try:
                os.mkdir(place, 0o700)
            except FileExistsError:
                pass
            st = os.lstat(place)
            if not os.path.isdir(place) or os.path.islink(place) or st.st_uid != uid \
                    or st.st_mode & 0o077:
                raise SystemExit(f"pytrace_cffi attach: {place} is not a private directory "
                                 "of yours: remove it and try again")
    return path


def cmd_attach(args):
    if args.stop:
        return _stop(args)
    _usable_here()
    if args.duration is not None and args.duration <= 0:
        raise SystemExit("pytrace_cffi attach: --duration must be > 0")
    options = start_options.from_arguments(args)
    try:
        options = {name: value for name, value in start_options.check(options).items()
                   if name in options}
    except (TypeError, ValueError) as exc:
        raise SystemExit(f"pytrace_cffi attach: {exc}") from None
    check_output(args.output)
    output = start_options.for_output(
        options, args.output, formats.beside(args.output, start_options.DUMPS_BESIDE))
    _target_usable(args.pid)
    directory = attach_dir(args.pid, make=True)
    token = os.urandom(8).hex()
    request = os.path.join(directory, f"request-{token}.json")
    script = os.path.join(directory, f"attach-{token}.py")
    parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    _write(request, json.dumps({"options": options, "output": output,
                                "duration": args.duration}))
    _write(script, _SCRIPT.format(directory=directory, token=token, parent=parent))
    status = os.path.join(directory, f"status-{token}.json")
    try:
        _remote_exec(args.pid, script)
        # ("written": it traced and ended before we looked, the process exiting at once)
        facts = _wait_status(args.pid, status, ("tracing", "refused", "failed", "written"),
                             args.wait)
        if facts is None:
            _write(os.path.join(directory, f"cancel-{token}"), "")
            time.sleep(0.2)         # (it may have run meanwhile)
            facts = _read(status)
        if facts is None:
            script = request = None     # kept: the target reads them when it wakes
            return _no_answer(args.pid, args.wait)
        if facts["state"] == "written":
            return _said(args.pid, facts, output, status)
        if facts["state"] != "tracing":
            _remove(status)
            print(f"pytrace_cffi attach: pid {args.pid}: {facts['state']}: {facts.get('why')}",
                  file=sys.stderr)
            return 1
        print(f"pytrace_cffi: tracing pid {args.pid}"
              + (f" for {args.duration:g} s" if args.duration else
                 f"; stop with: python -m pytrace_cffi attach {args.pid} --stop"),
              file=sys.stderr)
        if args.duration is None:
            return 0
        try:
            facts = _wait_status(args.pid, status, ("written", "failed"),
                                 args.duration + args.wait)
        except KeyboardInterrupt:
            print(f"pytrace_cffi attach: interrupted; pid {args.pid} goes on tracing for its "
                  f"--duration, then writes {output} (or: attach {args.pid} --stop)",
                  file=sys.stderr)
            return 130
        return _said(args.pid, facts, output, status)
    finally:
        if script is not None:
            for path in (script, request, os.path.join(directory, f"cancel-{token}")):
                _remove(path)
        try:
            os.rmdir(directory)         # (when nothing is left in it: no session)
        except OSError:
            pass


def _stop(args):
    directory = attach_dir(args.pid)
    session = _read(os.path.join(directory, "session.json"))
    if not session or not isinstance(session.get("token"), str) or not os.path.isdir(
            f"/proc/{args.pid}"):
        raise SystemExit(f"pytrace_cffi attach: pid {args.pid} is not being traced by an "
                         "attach of yours")
    status = os.path.join(directory, f"status-{session['token']}.json")
    _write(os.path.join(directory, "stop"), "")
    facts = _wait_status(args.pid, status, ("written", "failed"), args.wait)
    return _said(args.pid, facts, None, status)


def _said(pid, facts, output, status):
    """Prints what the target said of its trace (its status file, then removed
    with the attach directory when nothing else is left in it); the exit code."""
    if facts is not None:
        _remove(status)
        try:
            os.rmdir(os.path.dirname(status))
        except OSError:
            pass
    if facts is None:
        gone = not os.path.exists(f"/proc/{pid}")
        print(f"pytrace_cffi attach: pid {pid} "
              + ("ended before it wrote the trace (killed?)" if gone else
                 "has not finished writing the trace yet (still busy in C code, or a "
                 f"large trace): it goes on and writes {output or 'OUT'} when it can"),
              file=sys.stderr)
        return 1
    for line in facts.get("lines", ()):
        print(line, file=sys.stderr)
    if facts["state"] != "written":
        print(f"pytrace_cffi attach: pid {pid}: not written: {facts.get('why')}",
              file=sys.stderr)
        return 1
    print(f"pytrace_cffi: pid {pid} ({facts.get('why')}) -> {facts.get('output')}",
          file=sys.stderr)
    return 0


_OLDER = ("A process on 3.9-3.13 cannot be attached to: start it under `python -m "
          "pytrace_cffi run` (add --flight-recorder to dump it on demand with "
          "`python -m pytrace_cffi dump PID`), or call pytrace_cffi.start() in it")


def _usable_here():
    if sys.version_info < REMOTE_EXEC_VERSION or not hasattr(sys, "remote_exec"):
        raise SystemExit(
            "pytrace_cffi attach: needs CPython 3.14+ (sys.remote_exec, PEP 768) here and in "
            f"the target, of the same minor version; this is {sys.version.split()[0]}. "
            + _OLDER)


def _python_version_of(pid):
    """(major, minor) of the python binary or libpython pid has mapped, or None."""
    import re
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 20)
    except OSError:
        return None
    found = re.search(r"/(?:lib)?python(\d)\.(\d+)(?:\.so|\S*$)", text, re.M)
    return (int(found.group(1)), int(found.group(2))) if found else None


def _target_usable(pid):
    """Refuses (exits) before anything is sent when pid cannot be attached to."""
    if not os.path.exists(f"/proc/{pid}") and sys.platform.startswith("linux"):
        raise SystemExit(f"pytrace_cffi attach: no process {pid}")
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return          # (remote_exec says why)
    disabled = any(e.startswith(b"PYTHON_DISABLE_REMOTE_DEBUG=") and e.partition(b"=")[2]
                   for e in env)
    for i, arg in enumerate(argv[:-1]):
        disabled |= arg == b"-X" and argv[i + 1] in (b"disable-remote-debug",
                                                     b"disable_remote_debug")
    if disabled:
        raise SystemExit(_DISABLED.format(pid=pid))


_DISABLED = ("pytrace_cffi attach: pid {pid} was started with remote debugging disabled "
             "(-X disable-remote-debug or PYTHON_DISABLE_REMOTE_DEBUG): it cannot be "
             "attached to")


def _remote_exec(pid, script):
    try:
        sys.remote_exec(pid, script)
    except PermissionError as exc:
        raise SystemExit(
            f"pytrace_cffi attach: no permission to attach to pid {pid} ({exc.strerror}): "
            "run as its user, and where /proc/sys/kernel/yama/ptrace_scope is 1 or more, "
            "as root or with CAP_SYS_PTRACE") from None
    except (OSError, RuntimeError) as exc:
        text = str(exc)
        if not os.path.exists(f"/proc/{pid}"):
            why = "it has exited"
        elif "not enabled" in text:
            why = _DISABLED.format(pid=pid).partition(": ")[2]
        elif "Can't send commands" in text:
            import re
            theirs = re.findall(r"Python (\d+\.\d+)", text)[-1:] or ["3.X"]
            why = (f"{text}: run attach with the target's own Python version "
                   f"(python{theirs[0]} -m pytrace_cffi attach ...)")
        elif "PyRuntime" in text:
            theirs = _python_version_of(pid)
            why = f"it is not a CPython {sys.version_info[0]}.{sys.version_info[1]} process"
            if theirs is not None and theirs < REMOTE_EXEC_VERSION:
                why = (f"it runs Python {theirs[0]}.{theirs[1]}, and attach needs 3.14+ in the "
                       "target (sys.remote_exec). " + _OLDER)
            elif theirs is not None:
                why += (f" (it looks like Python {theirs[0]}.{theirs[1]}: run attach with "
                        f"python{theirs[0]}.{theirs[1]})")
        else:
            why = text
        raise SystemExit(f"pytrace_cffi attach: cannot attach to pid {pid}: {why}") from None


def _no_answer(pid, seconds):
    if not os.path.exists(f"/proc/{pid}"):
        print(f"pytrace_cffi attach: pid {pid} exited before it ran the attach script",
              file=sys.stderr)
    else:
        print(f"pytrace_cffi attach: pid {pid} did not run the attach script within "
              f"{seconds:g} s: its main thread is blocked in C code (a call that does not "
              "return to Python, or waits for the GIL) and runs such a script only at its "
              "next Python bytecode. It will not start tracing then (cancelled); try again, "
              "or a longer --wait", file=sys.stderr)
    return 1


def _wait_status(pid, path, states, seconds):
    """The status file's facts once its state is one of states, or None after
    seconds (or once pid has exited without saying so)."""
    deadline = time.monotonic() + seconds
    while True:
        facts = _read(path)
        if facts is not None and facts.get("state") in states:
            return facts
        if not os.path.exists(f"/proc/{pid}"):
            facts = _read(path)
            return facts if facts is not None and facts.get("state") in states else None
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)


def _read(path):
    try:
        with open(path, encoding="utf-8") as f:
            facts = json.load(f)
    except (OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) else None


def _write(path, text):
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass

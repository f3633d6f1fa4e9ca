"""Which process this is, and the job directory it belongs to.

The facts a followed process records about itself (process.json: parent, argv,
host, a label such as ``rank N`` or ``DataLoader worker N``), the names of the
files in a job's directory, the small JSON files written and read there, and
this process's place in a `run` job (see overflow_dir and _run_over).
"""
import contextlib
import json
import os
import sys

from .._files import replaced_atomically
from .._names import program_name
from .._safe_read import read_bounded
from ..errors import TraceFormatError

ENV = "PYTRACE_CFFI_FOLLOW"
BOOT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_boot")
DEFAULT_MAX_EVENTS = 1 << 20
PROCESS_FILE = "process.json"
KEYS_FILE = "keys.jsonl"
JOB_FILE = "job.json"
UNFOLLOWED_FILE = "unfollowed.jsonl"
LAUNCHED_FILE = "launched.jsonl"
FINISH_FILE = "finish.json"         # `run`'s finish, handed to an exec'd image
RUN_DONE_FILE = "run_finished.json"  # `run` has written OUT: its processes stop recording
NOT_PYTHON = "not a Python interpreter"
# The label of a multiprocessing child that ended before its name came from its
# parent (a Pool worker terminated while it started up): the job's reader names
# it from launched.jsonl when its launch was noted with the name (jobs.py).
UNNAMED_MP_CHILD = "multiprocessing child"
STARTING_AT_FINISH = ("it is running, but was still starting up when its run finished: it is "
                      "not traced")

_child_job = None          # set by the bootstrap: the process being started is a child
_armed = None              # (job dir, options): a forkserver, untraced, whose forks trace
# A `run` job (ENV carries them to its processes): the pid of the process running
# `run`, and the directory beside its OUT, where the per-process traces continue
# when their own place fills up (see _KeyNames.keep_place).
_run_pid = None
_spill_beside = None
# then in `run`'s current directory (the documented fallback of a failed write)
_spill_fallback = None


# -- which process is this -------------------------------------------------

def _command_line():
    """The full command line (sys.argv hides `-c` code): sys.orig_argv or /proc."""
    orig = getattr(sys, "orig_argv", None)
    if orig:
        return list(orig)
    try:
        with open("/proc/self/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return list(sys.argv)


def _int_env(name):
    value = os.environ.get(name, "")
    return int(value) if value.isdigit() else None


def _process_group():
    """(rank, world size) of torch.distributed's default group when the program
    made one (torch imported by it; never imported here), else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:        # noqa: BLE001 - a label is never worth a failure
        pass
    return None


def process_facts(forked=False):
    """ppid, argv, host and a label for this process (see the module docstring);
    forked: made by a bare os.fork (its program name then says so)."""
    facts = {"ppid": os.getppid(), "argv": list(sys.argv), "host": _host()}
    rank = _int_env("RANK")
    if rank is not None:
        facts.update(label=f"rank {rank}", rank=rank, local_rank=_int_env("LOCAL_RANK"),
                     world_size=_int_env("WORLD_SIZE"))
        return facts
    group = _process_group()        # a rank of mp.spawn's: no RANK, its group says
    if group is not None:
        facts.update(label=f"rank {group[0]}", rank=group[0], world_size=group[1])
        return facts
    data = sys.modules.get("torch.utils.data")
    info = None
    if data is not None:
        try:
            info = data.get_worker_info()
        except Exception:        # noqa: BLE001 - a label is never worth a failure
            info = None
    if info is not None:
        facts.update(label=f"DataLoader worker {info.id}", worker_id=info.id,
                     num_workers=info.num_workers)
        return facts
    mp = sys.modules.get("multiprocessing")
    if mp is not None:
        try:
            name = mp.current_process().name
        except Exception:        # noqa: BLE001
            name = "MainProcess"
        if name != "MainProcess":
            facts["label"] = name
            return facts
    if "--multiprocessing-fork" in sys.argv or (forked and _armed is not None):
        facts["label"] = UNNAMED_MP_CHILD           # ended before its name came
        return facts
    if forked:
        name = _forking_process_name()
        if name:                                     # multiprocessing "fork", early
            facts["label"] = name
            return facts
    facts["label"] = program_name() + (" (fork)" if forked else "")
    return facts


def _forking_process_name():
    """In a child of multiprocessing's fork start method before _bootstrap names
    it: the Process object's name, from the Popen._launch frame that forked."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_launch" and os.path.basename(code.co_filename) == "popen_fork.py":
            name = getattr(frame.f_locals.get("process_obj"), "name", None)
            return name if isinstance(name, str) else None
        frame = frame.f_back
    return None


def _host():
    try:
        return os.uname().nodename
    except AttributeError:
        import socket
        return socket.gethostname()


def _new_process_dir(job_dir):
    """DIR/proc-<pid>, or proc-<pid>-<n> when taken (a reused pid, or exec)."""
    base = os.path.join(job_dir, f"proc-{os.getpid()}")
    path, n = base, 1
    while True:
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            n += 1
            path = f"{base}-{n}"


def enter_job(job_dir, root):
    """This process's directory in the job's, job_dir (made if missing), made
    new: DIR/proc-<pid> (_new_process_dir). root: the job's first process, which
    clears what an earlier job left in job_dir. ValueError when the job's run is
    over (_run_over) or job_dir cannot be used."""
    over = None if root else _run_over(job_dir)
    if over:
        raise ValueError(f"not tracing: {over}")
    try:
        os.makedirs(job_dir, exist_ok=True)
        if root:
            for name in (JOB_FILE, UNFOLLOWED_FILE, LAUNCHED_FILE, FINISH_FILE, RUN_DONE_FILE):
                if os.path.exists(os.path.join(job_dir, name)):
                    os.unlink(os.path.join(job_dir, name))
        return _new_process_dir(job_dir)
    except OSError as exc:
        raise ValueError(f"cannot use {job_dir!r} as the trace directory: {exc}") from None


def _write_json(path, data):
    with replaced_atomically(path, lambda tmp: open(tmp, "w", encoding="utf-8")) as f:
        json.dump(data, f)


def _say(text):
    try:
        print(f"pytrace_cffi: {text}", file=sys.stderr)
    except Exception:            # noqa: BLE001
        pass


def _read_json_file(path):
    """The JSON value of one of our small files in a job's directory (a regular file,
    not through a link, bounded: see _safe_read.py); FileNotFoundError when missing,
    TraceFormatError when it cannot be read or is not JSON."""
    data = read_bounded(path)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise TraceFormatError(f"{path}: not valid JSON ({exc})") from None


def _process_facts(directory):
    """(process.json's facts, or {}; what is wrong with it, or None when it is
    fine or missing)."""
    path = os.path.join(directory, PROCESS_FILE)
    try:
        facts = _read_json_file(path)
    except FileNotFoundError:
        return {}, None
    except TraceFormatError as exc:
        return {}, str(exc)
    if not isinstance(facts, dict):
        return {}, f"{path}: not an object"
    return facts, None


def _pid_of_name(directory):
    """The pid a process directory's name gives (proc-<pid>, proc-<pid>-<n>), or None."""
    name = os.path.basename(os.path.normpath(directory))
    number = name[len("proc-"):].split("-")[0]
    return int(number) if name.startswith("proc-") and number.isdigit() else None


def _is_pid(value):
    return type(value) is int and 0 < value < 1 << 32


def _alive(pid):
    if not _is_pid(pid):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:        # a zombie (our own child, not yet waited for) has exited
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def _read_jsonl(path):
    """([(line number, JSON object)] of a file we append one line at a time
    (keys.jsonl, launched.jsonl, unfollowed.jsonl), [a phrase per line that is not
    one, and for a file that cannot be read]); ([], []) when there is none."""
    name = os.path.basename(path)
    try:
        data = read_bounded(path)
    except FileNotFoundError:
        return [], []
    except TraceFormatError as exc:
        return [], [str(exc)]
    found, damaged = [], []
    lines = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            # the last line without its newline: its writer ended as it wrote it
            what = ("cut short" if number == len(lines) else
                    "nested too deeply" if isinstance(exc, RecursionError) else "not JSON")
            damaged.append(f"{name} line {number} is {what}")
            continue
        if isinstance(record, dict):
            found.append((number, record))
        else:
            damaged.append(f"{name} line {number} is not an object")
    return found, damaged


def overflow_dir(job_dir):
    """Where a `run` job's per-process traces continue when their own file system
    fills up ($TMPDIR, by default): beside OUT, named after the job directory;
    None outside `run`."""
    if _spill_beside is None:
        return None
    name = os.path.basename(os.path.normpath(job_dir))
    return os.path.join(_spill_beside, name + ".overflow")


def overflow_dirs(job_dir):
    """Every place a `run` job's per-process traces may continue, in order:
    overflow_dir beside OUT, then the same name in `run`'s current directory
    (when OUT's file system is full too); empty outside `run`."""
    beside = overflow_dir(job_dir)
    if beside is None:
        return []
    places = [beside]
    if _spill_fallback is not None and _spill_fallback != _spill_beside:
        places.append(os.path.join(_spill_fallback, os.path.basename(beside)))
    return places


def _run_over(job_dir):
    """Why this process of a `run` job should stop recording: `run` wrote OUT
    (RUN_DONE_FILE in the job directory) or ended; None while it goes on."""
    if _run_pid is None or _run_pid == os.getpid():
        return None
    if os.path.exists(os.path.join(job_dir, RUN_DONE_FILE)):
        return f"its run (pid {_run_pid}) had finished"
    if not _alive(_run_pid):
        return f"its run (pid {_run_pid}) had ended"
    return None


def _join_run(config):
    """Takes the `run` facts of PYTRACE_CFFI_FOLLOW's config (see _run_pid)."""
    global _run_pid, _spill_beside, _spill_fallback
    run_pid, beside = config.get("run_pid"), config.get("spill_beside")
    fallback = config.get("spill_fallback")
    _run_pid = run_pid if isinstance(run_pid, int) and not isinstance(run_pid, bool) else None
    _spill_beside = beside if isinstance(beside, str) and os.path.isabs(beside) else None
    _spill_fallback = fallback if isinstance(fallback, str) and os.path.isabs(fallback) \
        else None



def run_here(output):
    """This process runs `run` (its window writing output): its job's processes
    stop recording once it has finished or ended, and their traces continue
    beside output when their own place fills up."""
    global _run_pid, _spill_beside, _spill_fallback
    _run_pid = os.getpid()
    _spill_beside = os.path.dirname(os.path.abspath(output.rstrip(os.sep)))
    try:
        _spill_fallback = os.getcwd()
    except OSError:
        _spill_fallback = None


def following(session):
    """Whether session (pytrace_cffi's running one, or None) follows children:
    a session.FollowSession."""
    return session is not None and session.follows_children


def handed_over(job_dir):
    """The finish DIR/finish.json hands this process (the image an exec of the
    process running `run` started: see finish.RunFinish.before_exec), taken out of
    the directory; or None."""
    path = os.path.join(job_dir, FINISH_FILE)
    try:
        finish = _read_json_file(path)
    except (OSError, TraceFormatError):
        return None
    if not isinstance(finish, dict) or finish.get("pid") != os.getpid() or \
            not isinstance(finish.get("output"), str):
        return None
    with contextlib.suppress(OSError):
        os.unlink(path)
    return finish

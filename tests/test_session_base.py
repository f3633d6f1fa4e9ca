"""What the package asks of a session is declared once (issue 32): every session
class derives from _session_base.SessionBase, a plain Session says its defaults,
and a ring session is handed its flight recorder's class from the package's top."""
import pytrace_cffi
from pytrace_cffi._session_base import SessionBase
from pytrace_cffi._tracer import Session
from pytrace_cffi.follow.session import FollowSession


def test_every_session_class_derives_from_the_base():
    for cls in (Session, FollowSession):
        assert issubclass(cls, SessionBase), cls


def test_a_plain_session_says_the_defaults():
    session = Session()                 # made, never started
    assert (session.job_dir, session.temporary_job, session.output_file,
            session.follows_children, session.flight, session.process_meta,
            session.fixed_ns_per_tick, session.spill_problem, session.recorders_lost,
            session.sigterm_waits) == (None, False, None, False, None, None, None, None,
                                       (), None)
    result = object()
    assert session.write_output_file(result) is result
    assert session.forget_output_file() is None and session.finish_live({}) is None


def test_a_ring_session_is_handed_its_recorder_from_the_top(tmp_path):
    import inspect
    from pytrace_cffi.flight.recorder import FlightRecorder
    from pytrace_cffi.follow import session as follow_session
    source = inspect.getsource(follow_session)
    assert "importlib" not in source and "flight.recorder" not in source
    assert not hasattr(FollowSession, "RECORDER") and not hasattr(FollowSession, "recorder")
    assert not hasattr(pytrace_cffi._running, "api")      # no registry at all
    pytrace_cffi.start(flight_recorder="1M", output=str(tmp_path / "job"))
    try:
        assert type(pytrace_cffi._running.session.flight) is FlightRecorder
    finally:
        pytrace_cffi.stop()


def test_a_failed_start_leaves_no_temporary_job(tmp_path, monkeypatch):
    """A flight recorder without output records into a temporary job: a start()
    that fails (another profiler's hook, say) leaves nothing of it behind."""
    import glob
    monkeypatch.setenv("TMPDIR", str(tmp_path))         # where the job is made

    def refused(self):
        raise RuntimeError("refused")
    monkeypatch.setattr(Session, "start", refused)
    try:
        pytrace_cffi.start(flight_recorder="1M")
    except RuntimeError:
        pass
    else:
        pytrace_cffi.stop()
        raise AssertionError("start() did not fail")
    assert not pytrace_cffi._running.has_session()
    assert glob.glob(str(tmp_path / "pytrace_cffi-flight-*")) == []

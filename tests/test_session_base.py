"""What the package asks of a session is declared once (issue 32): every session
class derives from _session_base.SessionBase, a plain Session says its defaults,
and a ring session finds its flight recorder by the name FollowSession declares."""
import pytrace_cffi
from pytrace_cffi._session_base import SessionBase
from pytrace_cffi._tracer import Session
from pytrace_cffi.follow.session import FollowSession, _named
from pytrace_cffi.follow.written import WritingSession


def test_every_session_class_derives_from_the_base():
    for cls in (Session, FollowSession, WritingSession):
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


def test_a_ring_session_finds_its_recorder_by_name():
    from pytrace_cffi.flight.recorder import FlightRecorder
    assert FollowSession.RECORDER == "..flight.recorder:FlightRecorder"
    assert _named(FollowSession.RECORDER) is FlightRecorder
    assert not hasattr(FollowSession, "recorder")     # nothing sets it from outside
    assert not hasattr(pytrace_cffi._running, "api")      # no registry at all

"""What the package asks of a session is declared once (issue 32): every session
class derives from _session_base.SessionBase, and a plain Session says its
defaults."""
from pytrace_cffi._session_base import SessionBase
from pytrace_cffi._tracer import Session
from pytrace_cffi.follow.session import FollowSession
from pytrace_cffi.follow.written import WritingSession


def test_every_session_class_derives_from_the_base():
    for cls in (Session, FollowSession, WritingSession):
        assert issubclass(cls, SessionBase), cls


def test_a_plain_session_says_the_defaults():
    session = Session()                 # made, never started
    assert (session.job_dir, session.temporary_job, session.output_file,
            session.follows_children, session.flight, session.process_meta,
            session.fixed_ns_per_tick, session.spill_problem, session.gc_callback_lost,
            session.sigterm_waits) == (None, False, None, False, None, None, None, None,
                                       False, None)
    result = object()
    assert session.write_output_file(result) is result
    assert session.forget_output_file() is None and session.finish_live({}) is None


"""The flight recorder: start(flight_recorder=...) / run --flight-recorder keeps
each process's newest events in a ring (ring.py) for as long as it runs, and
dumps them without stopping (recorder.py); dumps.py reads the dumps back.

flight_session makes start()'s session for it: a FollowSession in ring mode
(follow/session.py; it makes its FlightRecorder), whose job directory is output
(a directory), or a new temporary one, removed at stop, when output is None or a
file (written at stop, as start(output=FILE) writes one: follow/written.py).
"""
from .._files import new_directory
from .recorder import FlightRecorder

__all__ = ["FlightRecorder", "flight_session"]


def flight_session(options, follow_children):
    """start()'s session for options with flight_recorder (checked), not started."""
    from .. import options as start_options
    from ..follow import identity
    from ..follow.session import FollowSession
    from ..follow.written import WritingSession
    output = options["output"]
    if options["dumps_dir"] is None:        # beside the job's other files
        options = dict(options, dumps_dir=start_options.default_dumps_dir(output))
    if start_options.output_file(output) is not None:
        return WritingSession(options, output, follow_children)
    temporary = output is None
    job = new_directory("pytrace_cffi-flight-") if temporary else output
    session = FollowSession(dict(options, output=job), root=identity._child_job is None,
                            children=follow_children)
    session.temporary_job = temporary
    return session

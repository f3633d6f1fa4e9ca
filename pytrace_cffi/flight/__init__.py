"""The flight recorder: start(flight_recorder=...) / run --flight-recorder keeps
each process's newest events in a ring (options.StartPlan sizes it) for as long
as it runs, and dumps them without stopping (recorder.py); dumps.py reads the
dumps back.

start()'s session for it is a FollowSession in ring mode (follow/session.py),
handed this recorder's class from the package's top; its job directory is
output (a directory), or a new temporary one, removed at stop, when output is
None, or one of its own when output is a file (written at stop, as
start(output=FILE) writes one).
"""
from .recorder import FlightRecorder

__all__ = ["FlightRecorder"]

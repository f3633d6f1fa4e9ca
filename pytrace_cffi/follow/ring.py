"""The flight recorder's ring, as start()'s options give it: a size in events
(the C core's max_events without a spill file: the oldest chunk is dropped) and,
given seconds, an age past which chunks are dropped too. A FollowSession in ring
mode records so; the recorder's dumps (flight/) sit on top of it."""
from ..options import flight_ring

EVENT_BYTES = 8         # pt_event: a 32-bit delta and a 32-bit key|kind


def ring_of(spec):
    """(ring events, age ns or None) of a flight_recorder option, or None when off."""
    if spec in (None, False):
        return None
    size, seconds = flight_ring(spec)
    return size // EVENT_BYTES, (int(seconds * 1e9) if seconds else None)


def describe_ring(ring):
    """The ring in words, for meta.json and the docs' tables."""
    events, age_ns = ring
    text = f"the newest {events * EVENT_BYTES >> 20} MiB of events ({events} events)"
    return text + (f", at most {age_ns / 1e9:g} s old" if age_ns else "")

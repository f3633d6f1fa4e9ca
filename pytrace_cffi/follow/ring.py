"""The flight recorder's ring in words. options.StartPlan decides the ring from
start()'s options: a size in events (the C core's max_events without a spill
file: the oldest chunk is dropped) and, given seconds, an age past which chunks
are dropped too. A FollowSession in ring mode records so; the recorder's dumps
(flight/) sit on top of it."""
from ..options import EVENT_BYTES


def describe_ring(ring):
    """The ring in words, for meta.json and the docs' tables."""
    events, age_ns = ring
    text = f"the newest {events * EVENT_BYTES >> 20} MiB of events ({events} events)"
    return text + (f", at most {age_ns / 1e9:g} s old" if age_ns else "")

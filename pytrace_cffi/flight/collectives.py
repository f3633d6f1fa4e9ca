"""`report`'s collectives: a job's ranks lined up by torch.distributed's
sequence numbers, from each process dump's "collectives" (_collectives.py
writes it).

Per process group, each rank's sequence number is torch's count of the
collectives it has issued in that group (a rank waiting in a collective has
issued it); the ranks at the highest number are the ones that arrived, the
others have not:

    group 0 (default_pg, ranks 0-3): rank 1's last collective is seq 22
    (all_reduce, 4 MiB); ranks 0, 2-3 wait in seq 23 (all_reduce, 4 MiB)
        not arrived at seq 23: rank 1

"waits in": the rank's frames are in that collective now; "last collective":
they are not (the rank is elsewhere, or waits for an async collective's work).
A collective is described by its kind and its input's bytes, from the call the
rank's recorder noted, else from torch's own flight recorder's entry of that
sequence number. Groups with ranks behind come first. A dump's "collectives"
is read defensively: what is not as written (a hostile or damaged file) is left
out, never raised.
"""
from collections import namedtuple

from .._progress import ranges

GROUPS_SHOWN = 16           # groups described in the text; the rest counted
RANKS_NAMED = 8             # processes without a rank named in one part

Position = namedtuple("Position", "rank label pid seq waiting kind bytes")
Position.__doc__ = """Where one process is in one group: its rank (None when it has
none), label, pid, torch's sequence number (None when unknown), whether its frames
are in that collective now, and the collective's kind and input bytes (None when
not known)."""
Lineup = namedtuple("Lineup", "name description ranks positions")
Lineup.__doc__ = """A process group across the dumps: its name, description,
member ranks (global) and each dumped process's Position."""


def lineups(processes):
    """The Lineups of the process groups the processes' dumps name (processes:
    hang_report.ProcessDumps), groups with ranks behind first, then by name; and
    the problems the dumps reported, as (who, text)."""
    found, problems = {}, []
    for process in processes:
        field = process.collectives
        if not isinstance(field, dict):
            continue
        rank = field.get("rank") if _is_int(field.get("rank")) else process.rank
        for text in _list(field.get("problems")):
            if isinstance(text, str):
                problems.append((_who_one(rank, process), text))
        for group in _list(field.get("groups")):
            if not isinstance(group, dict) or not isinstance(group.get("name"), str):
                continue
            name = group["name"]
            entry = found.setdefault(name, {"description": None, "ranks": set(),
                                            "positions": []})
            if isinstance(group.get("description"), str) and not entry["description"]:
                entry["description"] = group["description"]
            entry["ranks"].update(r for r in _list(group.get("ranks")) if _is_int(r))
            entry["positions"].append(_position(process, rank, field, name, group))
    result = [Lineup(name, entry["description"], sorted(entry["ranks"]),
                     sorted(entry["positions"], key=_order))
              for name, entry in found.items()]
    result.sort(key=lambda lineup: (not _behind(lineup), _name_order(lineup.name)))
    return result, problems


def _position(process, rank, field, name, group):
    seq = group.get("seq") if _is_int(group.get("seq")) else None
    waiting = next((w for w in _list(field.get("waiting"))
                    if isinstance(w, dict) and w.get("group") == name), None)
    if seq is None:
        seq = _status_seq(field, name)
    if waiting is not None and _is_int(waiting.get("seq")):
        seq = waiting["seq"] if seq is None else max(seq, waiting["seq"])
    kind, size = _described(field, name, seq, waiting)
    return Position(rank, process.label, process.pid, seq,
                    waiting is not None and (seq is None or waiting.get("seq") in (None, seq)),
                    kind, size)


def _status_seq(field, name):
    """The last collective torch's flight recorder says the group enqueued."""
    recorder = field.get("torch_flight_recorder")
    status = recorder.get("pg_status") if isinstance(recorder, dict) else None
    group = status.get(name) if isinstance(status, dict) else None
    text = group.get("last_enqueued_collective") if isinstance(group, dict) else None
    try:
        seq = int(text)
    except (TypeError, ValueError):
        return None
    return seq if seq >= 0 else None


def _described(field, name, seq, waiting):
    """(kind, bytes) of the group's collective seq: the one waited in, else the
    newest call noted, else torch's flight recorder's entry."""
    if seq is None:
        return None, None
    candidates = [waiting] if waiting is not None else []
    candidates += list(reversed(_list(field.get("calls"))))
    recorder = field.get("torch_flight_recorder")
    if isinstance(recorder, dict):
        candidates += list(reversed(_list(recorder.get("entries"))))
    for call in candidates:
        if (isinstance(call, dict) and call.get("group") == name and call.get("seq") == seq
                and isinstance(call.get("kind"), str)):
            size = call.get("bytes")
            return call["kind"], size if _is_int(size) and size >= 0 else None
    return None, None


def _is_int(value):
    return type(value) is int and -1 << 63 <= value < 1 << 63


def _list(value):
    return value if isinstance(value, list) else []


def _order(position):
    return (position.rank is None, position.rank or 0, str(position.label), position.pid)


def _name_order(name):
    return (0, int(name), name) if name.isascii() and name.isdigit() else (1, 0, name)


def _top(lineup):
    return max((p.seq for p in lineup.positions if p.seq is not None), default=None)


def _behind(lineup):
    """The positions whose sequence number is below the group's highest."""
    top = _top(lineup)
    return [p for p in lineup.positions if p.seq is not None and p.seq < top]


def _missing(lineup):
    """The group's ranks no dump holds."""
    dumped = {p.rank for p in lineup.positions}
    return [rank for rank in lineup.ranks if rank not in dumped]


# -- words -----------------------------------------------------------------------

def size_text(count):
    """Bytes as "16 B", "4 MiB", "3.91 KiB"."""
    if count < 1024:
        return f"{count} B"
    value = float(count)
    for unit in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        value /= 1024
        if value < 1024 or unit == "PiB":
            return f"{value:.3g} {unit}"


def _what(position):
    parts = [position.kind] if position.kind else []
    if position.bytes is not None:
        parts.append(size_text(position.bytes))
    return f" ({', '.join(parts)})" if parts else ""


def _who_one(rank, process):
    return f"rank {rank}" if rank is not None else f"{process.label} (pid {process.pid})"


def who(positions):
    """"rank 1", "ranks 0, 2-3", then processes without a rank by label and pid."""
    ranks = [p.rank for p in positions if p.rank is not None]
    others = [f"{p.label} (pid {p.pid})" for p in positions if p.rank is None]
    if len(others) > RANKS_NAMED:
        others = others[:RANKS_NAMED] + [f"{len(others) - RANKS_NAMED} more"]
    parts = [("rank " if len(set(ranks)) == 1 else "ranks ") + ranges(ranks)] if ranks else []
    return ", ".join(parts + others)


def _plural(positions):
    return len(positions) > 1


def lineup_text(lineup):
    """The group's headline: its positions by sequence number, lowest first."""
    parts = {}
    for position in lineup.positions:
        key = (position.seq is None, position.seq or 0, position.waiting, position.kind,
               position.bytes)
        parts.setdefault(key, []).append(position)
    texts = []
    for key in sorted(parts, key=lambda k: k[:3] + (_order(parts[k][0]),)):
        members = parts[key]
        first = members[0]
        if first.seq is None:
            texts.append(f"{who(members)}: sequence number not known")
        elif first.waiting:
            texts.append(f"{who(members)} wait{'' if _plural(members) else 's'} in seq "
                         f"{first.seq}{_what(first)}")
        else:
            texts.append(f"{who(members)}'s last collective is seq {first.seq}"
                         f"{_what(first)}" if first.seq else
                         f"{who(members)} called no collective yet")
    about = [lineup.description] if lineup.description else []
    if lineup.ranks:
        about.append(("rank " if len(lineup.ranks) == 1 else "ranks ") + ranges(lineup.ranks))
    title = f"group {lineup.name}" + (f" ({', '.join(about)})" if about else "")
    return f"{title}: {'; '.join(texts)}"


def section_lines(processes):
    """report's lines about the processes' collectives ([] when no dump has any)."""
    found, problems = lineups(processes)
    if not found and not problems:
        return []
    lines = ["collectives by sequence number (torch.distributed):"]
    for lineup in found[:GROUPS_SHOWN]:
        lines.append(lineup_text(lineup))
        behind = _behind(lineup)
        if behind:
            lines.append(f"    not arrived at seq {_top(lineup)}: {who(behind)}")
        missing = _missing(lineup)
        if missing:
            lines.append(f"    no dump of {'rank' if len(missing) == 1 else 'ranks'} "
                         f"{ranges(missing)}")
    if len(found) > GROUPS_SHOWN:
        rest = found[GROUPS_SHOWN:]
        late = sum(1 for lineup in rest if _behind(lineup))
        lines.append(f"{len(rest)} more groups not shown ({late} with ranks behind): "
                     "report --json lists them")
    for whose, text in problems:
        lines.append(f"    {whose}: {text}")
    return lines


def section_data(processes):
    """The same as JSON-ready data: a list of groups."""
    found, problems = lineups(processes)
    return {"groups": [{
        "group": lineup.name, "description": lineup.description, "ranks": lineup.ranks,
        "seq": _top(lineup), "text": lineup_text(lineup),
        "not_arrived": [p._asdict() for p in _behind(lineup)],
        "no_dump": _missing(lineup),
        "positions": [p._asdict() for p in lineup.positions]} for lineup in found],
        "problems": [{"who": whose, "text": text} for whose, text in problems]}

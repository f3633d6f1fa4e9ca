"""A .pftrace of many lanes (threads, or asyncio tasks' lanes) read back: what each
sequence interns again (its names, in the packet of each name's first begin) is
the file's, kept once (readers/pftrace_names.py, c_src/pt_pfnames.c), so a lane
costs Python its descriptor and clock packets only (#34 item 3); C still takes a
begin only when its sequence interned every iid it names, and iids that mean
other names in other sequences read as each sequence says. And the HTML page's
numbers of the kept calls, written in C, are what Python wrote."""
import random
import threading

import pytest

import pytrace_cffi
from pytrace_cffi import TraceFormatError
from pytrace_cffi._core import ffi
from pytrace_cffi.errors import TraceError
from pytrace_cffi.readers import pftrace as pftrace_reader
from pytrace_cffi.readers.pftrace_packets import parse
from pytrace_cffi.reading import read_trace
from pytrace_cffi.render import html as html_module
from pytrace_cffi.render.protobuf import bytes_field, int_field
from pytrace_cffi.render.summary import summarize

LANES = 40


def alpha():
    return beta() + gamma()


def beta():
    return 1


def gamma():
    return 2


def lanes_trace(lanes=LANES):
    """A trace of `lanes` threads, each calling the same functions."""
    def lane():
        for _ in range(3):
            alpha()
    with pytrace_cffi.trace() as t:
        threads = [threading.Thread(target=lane) for _ in range(lanes)]
        for thread in threads:
            thread.start()
            thread.join()
    return t.trace


def entries(data):
    """The Trace.packet entries of an uncompressed .pftrace."""
    fields = parse(data)
    assert set(fields) == {1}
    return fields[1]


def encoded(fields):
    """A thread's packet from parse()'s fields (varints and bytes only)."""
    return b"".join(int_field(number, value) if isinstance(value, int)
                    else bytes_field(number, value)
                    for number in sorted(fields) for value in fields[number])


def sequences(packets):
    """sequence id -> the indexes of its packets, thread sequences only."""
    out = {}
    for index, packet in enumerate(packets):
        sequence = parse(packet)[10][0]
        if sequence != 1:
            out.setdefault(sequence, []).append(index)
    return out


def name_iid(packets, indexes, name):
    """The iid a sequence's packets intern name under, and the packet that does."""
    for index in indexes:
        interned = parse(packets[index]).get(12)
        for entry in parse(interned[0]).get(2, ()) if interned else ():
            entry = parse(entry)
            if entry[2][0].decode().endswith(name):
                return entry[1][0], index
    raise AssertionError(f"{name} is not interned")


OURS = {"alpha", "beta", "bet2", "gamma"}


def short(name):
    """A function's name less its file and line ("t.py(28): alpha": alpha)."""
    return name.rsplit(": ", 1)[-1]


def written(tmp_path, packets, name="t.pftrace"):
    path = tmp_path / name
    path.write_bytes(b"".join(bytes_field(1, packet) for packet in packets))
    return path


def test_a_lane_costs_python_its_descriptor_and_clock_only(tmp_path, monkeypatch):
    trace = lanes_trace()
    trace.export_perfetto(tmp_path / "t.pftrace", compress=False)
    decoded = {"scan": {}, "walk": {}}     # per sequence id, the packets Python decoded
    for reader, kind in ((pftrace_reader._Scan, "scan"), (pftrace_reader._Replay, "walk")):
        def counting(self, data, location, real=reader.packet, kind=kind):
            sequence = parse(data)[10][0]
            decoded[kind][sequence] = decoded[kind].get(sequence, 0) + 1
            return real(self, data, location)
        monkeypatch.setattr(reader, "packet", counting)
    ours = read_trace(tmp_path / "t.pftrace")
    assert list(ours) == list(trace)
    # per lane its first packet (descriptor, defaults, categories) and its clock's;
    # the names only in the first lane's packets of the first read (each lane
    # decoded them all again, in each read, before); a walk also decodes the next
    # lane's first packet, where it stops
    scan = [count for _, count in sorted(decoded["scan"].items())][-LANES:]
    assert scan[0] > 2 and scan[1:] == [2] * (LANES - 1), scan
    walk = [count for _, count in sorted(decoded["walk"].items())][-LANES:]
    assert walk[:-1] == [3] * (LANES - 1) and walk[-1] <= 3, walk


def test_a_begin_naming_an_iid_its_own_sequence_did_not_intern_is_refused(tmp_path):
    trace = lanes_trace(3)
    trace.export_perfetto(tmp_path / "t.pftrace", compress=False)
    packets = entries((tmp_path / "t.pftrace").read_bytes())
    last = sequences(packets)[max(sequences(packets))]
    iid, index = name_iid(packets, last, "beta")
    # the last lane's begin of beta without its interned name: the earlier lanes
    # interned that iid, this one did not
    fields = parse(packets[index])
    del fields[12]
    packets[index] = encoded(fields)
    with pytest.raises(TraceFormatError, match=f"event name {iid} is not interned"):
        read_trace(written(tmp_path, packets))


def test_an_iid_that_means_another_name_in_another_lane_reads_as_each_says(tmp_path):
    trace = lanes_trace(3)
    trace.export_perfetto(tmp_path / "t.pftrace", compress=False)
    packets = entries((tmp_path / "t.pftrace").read_bytes())
    lanes = [indexes for _, indexes in sorted(sequences(packets).items())][-3:]
    # the middle lane interns beta's iid as bet2, in the packet before the one of
    # beta's first begin (alpha's): the begin's bytes are those known for beta
    _, at_alpha = name_iid(packets, lanes[1], "alpha")
    _, at_beta = name_iid(packets, lanes[1], "beta")
    alpha_fields, beta_fields = parse(packets[at_alpha]), parse(packets[at_beta])
    renamed = beta_fields.pop(12)[0].replace(b"beta", b"bet2")
    alpha_fields[12] = [alpha_fields[12][0] + renamed]
    packets[at_alpha], packets[at_beta] = encoded(alpha_fields), encoded(beta_fields)
    ours = read_trace(written(tmp_path, packets))
    lane_tids = [t.native_id for t in ours.threads][-3:]
    for _ in range(2):          # the first read's names, then a walk's again
        names = {tid: sorted({short(c.name) for c in ours if c.thread == tid} & OURS)
                 for tid in lane_tids}
        assert names == {lane_tids[0]: ["alpha", "beta", "gamma"],
                         lane_tids[1]: ["alpha", "bet2", "gamma"],
                         lane_tids[2]: ["alpha", "beta", "gamma"]}
    rows = {short(row.name): row.calls for row in summarize(ours, limit=None)}
    calls = {short(row.name): row.calls for row in summarize(trace, limit=None)}
    assert rows["bet2"] == 3 and rows["beta"] == calls["beta"] - 3


def python_reduced_text(records, start_ns, reduction=None):
    """The page's numbers as render/html.py wrote them in Python (the oracle)."""
    previous_start, previous_index, parts, taken_at = start_ns, -1, [], []
    for start, end, index, self_ns, key, depth in records:
        if reduction is not None:
            min_ns, top_levels = reduction
            take = depth < top_levels or (end - start >= min_ns and
                                          (depth == 0 or taken_at[depth - 1]))
            del taken_at[depth:]
            taken_at.append(take)
            if not take:
                continue
        parts.append(f"{start - previous_start},{end - start},{key},{depth},"
                     f"{index - previous_index - 1},{self_ns}")
        previous_start, previous_index = start, index
    return ",".join(parts), len(parts)


def test_the_pages_numbers_of_kept_calls_are_pythons(monkeypatch):
    generator = random.Random(34)
    big = (1 << 63) - 1
    for round_ in range(60):
        records, depth, start, index = [], 0, generator.choice([0, -big + 10, big - 10 ** 9]), 0
        for _ in range(generator.choice([1, 5, 300, 20000])):
            depth = generator.randint(0, depth + 1) if records else 0
            start += generator.randint(0, 1000)
            index += generator.randint(1, 3)
            end = start + generator.choice([0, 1, 50, 999, 10 ** 6])
            records.append((start, end, index, generator.randint(-10 ** 12, 10 ** 12),
                            generator.randint(0, (1 << 32) - 1), depth))
        kept = ffi.new("pt_reduced[]", len(records))
        for place, (start, end, index, self_ns, key, depth) in enumerate(records):
            kept[place] = {"start": start, "end": end, "index": index, "self_ns": self_ns,
                           "key": key, "depth": depth}
        start_ns = generator.choice([0, records[0][0] + 5, -big])
        reduction = None if round_ % 3 == 0 else html_module.Reduction(
            generator.choice([1, 60, 1000]), generator.randint(0, 2), 0, 0, 0)
        expected = python_reduced_text(records, start_ns, reduction and reduction[:2])
        assert html_module._reduced_text(kept, len(records), start_ns, reduction) == expected
        raw = bytes(ffi.buffer(kept))
        assert html_module._reduced_text(raw, len(records), start_ns, reduction) == expected
    # in pieces of a few calls at a time, as of many
    monkeypatch.setattr(html_module, "TEXT_CALLS_PER_PIECE", 1)
    assert html_module._reduced_text(kept, len(records), start_ns, reduction) == expected


def test_kept_calls_without_their_parent_are_an_error():
    kept = ffi.new("pt_reduced[]", [{"start": 0, "end": 100, "depth": 0},
                                    {"start": 1, "end": 99, "depth": 3}])
    with pytest.raises(TraceError, match="lack a parent"):
        html_module._reduced_text(kept, 2, 0, html_module.Reduction(1, 0, 0, 0, 0))

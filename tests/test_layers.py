"""The model's place among the layers (issue 32): record -> model -> render,
readers -> model, the command line on top. Read from the source with `ast`
(test_structure's graph: imports inside functions count); the streams protocol
checked on the classes themselves.

- model/ imports nothing from render/, readers/, follow/, flight/ or the command line;
- no renderer imports a module outside model/ that defines a concrete stream
  class (a reader's, the join's) or anything under follow/: the writers know
  model.streams.CallStreams;
- each of the five classes a trace streams from is a CallStreams;
- no getattr/hasattr probes one of our own objects for a named attribute.
"""
import ast
import importlib

from pytrace_cffi.model.streams import CallStreams

from test_structure import EDGES, PACKAGE, TREES, _under, _where

MODEL = f"{PACKAGE}.model"
ABOVE_THE_MODEL = [f"{PACKAGE}.{name}" for name in ("render", "readers", "follow", "flight",
                                                     "cli", "__main__")]
# The five classes of issue 32 that hand out a trace's calls, by module.
STREAM_CLASSES = {
    f"{PACKAGE}.model.walk": "Streams",
    f"{PACKAGE}.model.saved": "_SlicesFile",
    f"{PACKAGE}.readers.chrome_lines": "_JsonStreams",
    f"{PACKAGE}.readers.pftrace": "_PftraceStreams",
    f"{PACKAGE}.follow.join": "_JoinedStreams",
}


def _defines_streams(tree):
    """The classes of a module that hand out calls as streams do (slices()
    and table(), or a CallStreams base), by name."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods = {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
            bases = {getattr(base, "id", getattr(base, "attr", None)) for base in node.bases}
            if "slices" in methods or "CallStreams" in bases:
                found.append(node.name)
    return found


def test_the_model_imports_nothing_above_it():
    wrong = [_where(module, target) for module in sorted(EDGES) if _under(module, MODEL)
             for target in sorted(EDGES[module])
             if any(_under(target, above) for above in ABOVE_THE_MODEL)]
    assert not wrong, ("model/ imports upward (record -> model -> render; readers -> "
                       "model): " + "; ".join(wrong))


def test_renderers_know_the_protocol_not_the_stream_classes():
    concrete = {module for module, tree in TREES.items()
                if not _under(module, MODEL) and _defines_streams(tree)}
    assert {m for m in STREAM_CLASSES if not _under(m, MODEL)} <= concrete  # it sees them
    wrong = [_where(module, target) for module in sorted(EDGES)
             if _under(module, f"{PACKAGE}.render")
             for target in sorted(EDGES[module])
             if target in concrete or _under(target, f"{PACKAGE}.follow")]
    assert not wrong, ("a renderer imports a concrete reader or join class (depend on "
                       "model.streams.CallStreams instead): " + "; ".join(wrong))


def test_every_stream_class_is_a_call_streams():
    for module, name in STREAM_CLASSES.items():
        cls = getattr(importlib.import_module(module), name)
        assert issubclass(cls, CallStreams), f"{module}.{name} is not a CallStreams"
        assert name in _defines_streams(TREES[module])
    # and no other class hands out calls without declaring the protocol
    undeclared = [f"{module}.{name}" for module, tree in sorted(TREES.items())
                  for name in _defines_streams(tree)
                  if not issubclass(getattr(importlib.import_module(module), name),
                                    CallStreams)]
    assert not undeclared, f"classes with slices() outside the protocol: {undeclared}"


def test_the_protocol_says_none_by_default():
    """What a stream without records or encoded parts answers (the writers ask
    rather than probe with getattr)."""
    class Empty(CallStreams):
        stats = [(0, 0, 0)]

        def slices(self, index):
            return iter(())
    streams = Empty()
    assert streams.records(0) is None and streams.encoded_part(0) is None
    assert streams.open_at_start is None and streams.spans is None
    streams.encoded_parts = [("part-0", 7, 100)]
    assert streams.encoded_part(0) == ("part-0", 7, 100)
    [(array, n)] = streams.table()
    assert n == 0


def test_no_renderer_probes_a_trace_for_live_parts():
    found = [f"{module} line {node.lineno}" for module, tree in sorted(TREES.items())
             for node in ast.walk(tree)
             if isinstance(node, ast.Constant) and node.value == "live_parts"]
    assert not found, "live parts are the streams' encoded_part(index): " + "; ".join(found)


def test_no_module_probes_a_trace_for_its_streams():
    """Every trace has _streams (a CallStreams, or None) and every streams the
    protocol's attributes: asking with getattr(x, "_streams"/"clock", None) would
    hide a trace or streams that lost them."""
    found = [f"{module} line {node.lineno}" for module, tree in sorted(TREES.items())
             for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
             and isinstance(node.args[1], ast.Constant)
             and node.args[1].value in ("_streams", "live_parts", "records", "encoded_parts")]
    assert not found, "read trace._streams and its protocol directly: " + "; ".join(found)


# The names our own objects go by (traces, sessions, a walk's event sources,
# results, the flight recorder, the torch watcher, a run, streams, a process's
# dump or result). Their attributes are declared (a class attribute on the base,
# a method of the protocol), so they are read plainly.
OUR_OBJECTS = {"trace", "session", "source", "result", "recorder", "watcher", "run",
               "streams", "process"}
# Probes where such a name holds an object that is not ours: (module, attribute).
NOT_OURS = {
    ("pytrace_cffi._hiding", "co_filename"),     # hiding(source): a code object or a built-in
}


def _probed_name(node):
    """The name a getattr/hasattr call probes (x, or the last part of a.b.x), or None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def test_no_module_probes_our_own_objects_with_getattr():
    """getattr(trace, "thread_counts", None) or hasattr(session, "x") joins layers
    by a guess: the attribute belongs to the declared interface (issue 32). Probes
    of Python's, the standard library's or torch's objects (os, sys, a tensor) are
    not ours and stay."""
    found = [f"{module} line {node.lineno}: {node.func.id}({_probed_name(node.args[0])}, "
             f"{node.args[1].value!r})"
             for module, tree in sorted(TREES.items())
             for node in ast.walk(tree)
             if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
             and node.func.id in ("getattr", "hasattr") and len(node.args) >= 2
             and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
             and _probed_name(node.args[0]) in OUR_OBJECTS
             and (module, node.args[1].value) not in NOT_OURS]
    assert not found, ("declare the attribute (a class attribute on the base class, a "
                       "method of the protocol) and read it plainly: " + "; ".join(found))

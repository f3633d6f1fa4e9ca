"""Readers of the flame-graph outputs written independently of the writers:
speedscope's JSON schema (tests/data/speedscope, checked by a validator of the
draft-07 keywords it uses) and event nesting, and pprof's profile.proto decoded
by the protobuf package from message classes built here from its field numbers
(github.com/google/pprof/proto/profile.proto)."""
import gzip
import json
import os
from collections import namedtuple

import pytest

SCHEMA_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "speedscope",
                           "file-format-schema.json")
_KEYWORDS = {"$schema", "$ref", "definitions", "title", "type", "const", "enum", "required",
             "properties", "items", "anyOf"}
_TYPES = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def schema_errors(document, limit=10):
    """Where document breaks speedscope's schema (at most limit places)."""
    with open(SCHEMA_PATH, encoding="utf-8") as f:
        schema = json.load(f)
    errors = []
    _check(document, schema, schema["definitions"], "$", errors)
    return errors[:limit]


def _check(value, schema, definitions, where, errors):
    unknown = set(schema) - _KEYWORDS
    assert not unknown, f"the validator does not know {unknown}"
    if "$ref" in schema:
        prefix = "#/definitions/"
        assert schema["$ref"].startswith(prefix)
        _check(value, definitions[schema["$ref"][len(prefix):]], definitions, where, errors)
    if "anyOf" in schema:
        def fails(option):
            found = []
            _check(value, option, definitions, where, found)
            return found
        if all(fails(option) for option in schema["anyOf"]):
            errors.append(f"{where}: none of anyOf matches")
    if "type" in schema and not _TYPES[schema["type"]](value):
        errors.append(f"{where}: not a {schema['type']}: {value!r}")
        return
    if "const" in schema and value != schema["const"]:
        errors.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{where}: {value!r} not in {schema['enum']}")
    for key in schema.get("required", ()):
        if key not in value:
            errors.append(f"{where}: no {key!r}")
    for key, sub in schema.get("properties", {}).items():
        if key in value:
            _check(value[key], sub, definitions, f"{where}.{key}", errors)
    if "items" in schema:
        for index, item in enumerate(value):
            _check(item, schema["items"], definitions, f"{where}[{index}]", errors)


def evented_errors(profile, n_frames, limit=10):
    """What speedscope would refuse in an evented profile: a frame out of range,
    time going back or past endValue, a close that is not of the innermost open
    frame, frames left open."""
    errors, stack, last = [], [], profile["startValue"]
    for index, event in enumerate(profile["events"]):
        if not 0 <= event["frame"] < n_frames:
            errors.append(f"event {index}: frame {event['frame']} out of range")
        if event["at"] < last:
            errors.append(f"event {index}: at {event['at']} before {last}")
        last = event["at"]
        if event["type"] == "O":
            stack.append(event["frame"])
        elif not stack or stack.pop() != event["frame"]:
            errors.append(f"event {index}: closes frame {event['frame']}, not the innermost")
    if stack:
        errors.append(f"{len(stack)} frames left open")
    if last > profile["endValue"]:
        errors.append(f"an event at {last}, after endValue {profile['endValue']}")
    return errors[:limit]


# --- pprof ----------------------------------------------------------------------

_UINT64, _INT64, _BOOL, _STRING, _MESSAGE = 4, 3, 8, 9, 11       # FieldDescriptorProto.Type
_MESSAGES = {
    "Profile": [("sample_type", 1, "ValueType", True), ("sample", 2, "Sample", True),
                ("mapping", 3, "Mapping", True), ("location", 4, "Location", True),
                ("function", 5, "Function", True), ("string_table", 6, _STRING, True),
                ("drop_frames", 7, _INT64, False), ("keep_frames", 8, _INT64, False),
                ("time_nanos", 9, _INT64, False), ("duration_nanos", 10, _INT64, False),
                ("period_type", 11, "ValueType", False), ("period", 12, _INT64, False),
                ("comment", 13, _INT64, True), ("default_sample_type", 14, _INT64, False)],
    "ValueType": [("type", 1, _INT64, False), ("unit", 2, _INT64, False)],
    "Sample": [("location_id", 1, _UINT64, True), ("value", 2, _INT64, True),
               ("label", 3, "Label", True)],
    "Label": [("key", 1, _INT64, False), ("str", 2, _INT64, False), ("num", 3, _INT64, False),
              ("num_unit", 4, _INT64, False)],
    "Mapping": [("id", 1, _UINT64, False), ("memory_start", 2, _UINT64, False),
                ("memory_limit", 3, _UINT64, False), ("file_offset", 4, _UINT64, False),
                ("filename", 5, _INT64, False), ("build_id", 6, _INT64, False),
                ("has_functions", 7, _BOOL, False), ("has_filenames", 8, _BOOL, False),
                ("has_line_numbers", 9, _BOOL, False), ("has_inline_frames", 10, _BOOL, False)],
    "Location": [("id", 1, _UINT64, False), ("mapping_id", 2, _UINT64, False),
                 ("address", 3, _UINT64, False), ("line", 4, "Line", True),
                 ("is_folded", 5, _BOOL, False)],
    "Line": [("function_id", 1, _UINT64, False), ("line", 2, _INT64, False),
             ("column", 3, _INT64, False)],
    "Function": [("id", 1, _UINT64, False), ("name", 2, _INT64, False),
                 ("system_name", 3, _INT64, False), ("filename", 4, _INT64, False),
                 ("start_line", 5, _INT64, False)],
}
_profile_class = None


def profile_class():
    """perftools.profiles.Profile as a protobuf message class (skips the test
    where the protobuf package is not installed, fails in CI)."""
    global _profile_class
    if _profile_class is None:
        try:
            from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
        except ImportError as exc:
            if os.environ.get("CI"):
                pytest.fail(f"$CI is set but protobuf does not import ({exc})", pytrace=False)
            pytest.skip("the protobuf package is not installed")
        proto = descriptor_pb2.FileDescriptorProto(name="profile.proto",
                                                   package="perftools.profiles",
                                                   syntax="proto3")
        for name, fields in _MESSAGES.items():
            message = proto.message_type.add(name=name)
            for field_name, number, kind, repeated in fields:
                field = message.field.add(name=field_name, number=number,
                                          label=3 if repeated else 1)
                if isinstance(kind, str):
                    field.type, field.type_name = _MESSAGE, f".perftools.profiles.{kind}"
                else:
                    field.type = kind
        pool = descriptor_pool.DescriptorPool()
        pool.Add(proto)
        _profile_class = message_factory.GetMessageClass(
            pool.FindMessageTypeByName("perftools.profiles.Profile"))
    return _profile_class


Decoded = namedtuple("Decoded", "string_table sample_types period_type default_sample_type "
                                "duration_nanos time_nanos samples functions message")
Function = namedtuple("Function", "name filename start_line")


def _no_unknown_fields(message, where="Profile"):
    from google.protobuf.message import Message
    from google.protobuf.unknown_fields import UnknownFieldSet
    assert len(UnknownFieldSet(message)) == 0, f"{where} has fields profile.proto does not"
    for field, value in message.ListFields():
        if field.message_type is not None:
            for item in ([value] if isinstance(value, Message) else value):
                _no_unknown_fields(item, f"{where}.{field.name}")


def decode_pprof(path):
    """A gzip-compressed pprof file, decoded: samples as (stack of function names
    root first, values, {label key: label}); functions by id."""
    with gzip.open(path, "rb") as f:
        profile = profile_class().FromString(f.read())
    _no_unknown_fields(profile)
    strings = list(profile.string_table)

    def value_type(message):
        return strings[message.type], strings[message.unit]
    functions = {f.id: Function(strings[f.name], strings[f.filename], f.start_line)
                 for f in profile.function}
    assert len(functions) == len(profile.function)
    locations = {}
    for location in profile.location:
        (line,) = location.line
        locations[location.id] = functions[line.function_id].name
    assert len(locations) == len(profile.location)
    samples = [(tuple(locations[i] for i in reversed(sample.location_id)), list(sample.value),
                {strings[label.key]: strings[label.str] for label in sample.label})
               for sample in profile.sample]
    return Decoded(strings, [value_type(t) for t in profile.sample_type],
                   value_type(profile.period_type), strings[profile.default_sample_type],
                   profile.duration_nanos, profile.time_nanos, samples,
                   list(functions.values()), profile)

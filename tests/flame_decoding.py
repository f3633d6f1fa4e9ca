"""Readers of the flame-graph outputs written independently of the writers:
speedscope's JSON schema (tests/data/speedscope, checked by a validator of the
draft-07 keywords it uses) and event nesting."""
import json
import os

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


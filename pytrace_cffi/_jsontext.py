"""JSON text that every reader takes, and text that UTF-8 can hold.

JSON has no NaN or infinities: json.dumps would write bare NaN / Infinity, which
strict parsers (a browser's JSON.parse, Perfetto's importer) refuse. A non-finite
float is written as the string "NaN", "Infinity" or "-Infinity" instead (JavaScript's
spellings); a counter's value reads back as the float (NON_FINITE).

A name from a path that is not UTF-8 holds its undecodable bytes as lone
surrogates (surrogateescape, as Python shows it). Our own files keep them (JSON's
\\udcXX escapes, read back as they were); a format that others read must be valid
UTF-8 (Chrome JSON, .pftrace strings, the HTML page): there each becomes U+FFFD.

Both conversions copy a value only when it needs them, so the common case costs one
json.dumps.
"""
import json
import math
import re

NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
# Args nest a level or two (a record_function arg's list of sizes): a file whose
# args nest deeper than this is refused as it is read, so no writer (.pftrace's
# annotations are encoded recursively) ever meets one.
MAX_ARGS_DEPTH = 32
_SURROGATE = re.compile("[\ud800-\udfff]")


_FINITE = json.JSONEncoder(allow_nan=False)     # made once: json.dumps with an
                                                # option makes an encoder per call


def dumps(value, **kwargs):
    """json.dumps(value) with non-finite floats as strings (see the module's doc)."""
    encode = _FINITE.encode if not kwargs else json.JSONEncoder(allow_nan=False,
                                                                **kwargs).encode
    try:
        return encode(value)
    except ValueError:
        return encode(_converted(value, False))


def dump(value, out):
    """json.dump(value, out) (a text file at its start) with non-finite floats as
    strings: written as it is encoded, and again from a copy when it holds one."""
    try:
        json.dump(value, out, allow_nan=False)
    except ValueError:
        out.seek(0)
        out.truncate()
        json.dump(_converted(value, False), out, allow_nan=False)


def dumps_utf8(value, **kwargs):
    """dumps(value), with every lone surrogate in its strings (keys too) as U+FFFD:
    for a format others read."""
    text = dumps(value, **kwargs)
    # ensure_ascii spells every lone surrogate (and every pair a character beyond
    # the BMP needs) \ud...: only then can a string hold one.
    if "\\ud" in text and _holds_surrogate(value):
        text = dumps(_converted(value, True), **kwargs)
    return text


def utf8_text(text):
    """text with each lone surrogate (an undecodable byte of a path) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def finite_number(value):
    """A counter's value as written (a number, or a non-finite one's string) as a
    number; None when it is neither."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        return NON_FINITE.get(value)
    return None


def _non_finite_text(value):
    return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"


def _holds_surrogate(value):
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(k for k in item if isinstance(k, str))
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return False


def _converted(value, texts):
    """A copy of value with non-finite floats as strings and, when texts, lone
    surrogates as U+FFFD. Containers are rebuilt (dicts, lists; a tuple becomes a
    list, as JSON writes it); everything else is kept."""
    if isinstance(value, float):
        return value if math.isfinite(value) else _non_finite_text(value)
    if isinstance(value, str):
        return utf8_text(value) if texts else value
    if isinstance(value, dict):
        return {_converted(k, texts) if isinstance(k, (str, float)) else k: _converted(v, texts)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_converted(v, texts) for v in value]
    return value


def too_deep(value, limit=MAX_ARGS_DEPTH):
    """Whether value (a JSON value) nests objects and arrays more than limit deep
    (an object alone is 1 deep)."""
    if isinstance(value, dict):
        for child in value.values():
            if isinstance(child, (dict, list, tuple)):
                break
        else:
            return False                # args as they mostly are: flat
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False

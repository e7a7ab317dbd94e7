"""A JSON object read under the gate's rules for hostile shapes (docs/CONTRACTS.md §2 rule 7).

For a document that is not an input record but is still read from outside, such as a recorded
decision in a replay file (§12): parsed by ``orjson`` (which stops at 1,024 levels with its own
error, never a ``RecursionError``), then refused when it nests deeper than ``MAX_DEPTH`` levels,
repeats a key or holds an integer outside 64 bits, with the gate's own walks
(:mod:`topics.hostile`). What it returns can be serialised again and compared without a
recursion limit being reached.
"""

from __future__ import annotations

from typing import Any

import orjson

from topics.hostile import MAX_DEPTH, colons_in, exact_scan, needs_exact_scan, shape_of


def parse_bounded(raw: bytes | None) -> dict[str, Any] | str:
    """The JSON object in ``raw``, or why it is refused (a short reason, never the content)."""
    if raw is None:
        return "no value"
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "not a UTF-8 JSON document"
    if type(obj) is not dict:
        return "not a JSON object"
    shape = shape_of(obj)
    if shape.depth > MAX_DEPTH:
        return f"nesting deeper than {MAX_DEPTH} levels"
    found = None
    if shape.big_number or (
        raw.count(b":") != shape.keys and needs_exact_scan(raw, shape.keys, colons_in(obj))
    ):
        found = exact_scan(raw)
    if found == "duplicate_key":
        return "a key is repeated within one object"
    if found == "big_int":
        return "an integer outside the signed 64-bit range"
    if found == "too_deep":
        return f"nesting deeper than {MAX_DEPTH} levels"
    return obj


__all__ = ["parse_bounded"]

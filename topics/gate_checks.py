"""The checks the gate runs on records of every kind, and :class:`Reject`, the rejection they
raise: hostile shapes (§2 rule 7), forbidden-key paths (§4.2), the record key's match, and how a
rejection's detail names paths and schema errors."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import ValidationError

from topics.hostile import (
    MAX_DEPTH,
    colons_in,
    exact_scan,
    is_forbidden_key,
    needs_exact_scan,
    safe_key,
    safe_path,
    shape_of,
)
from topics.records import ID_PATTERN, DeadLetterReason

_ID_RE = re.compile(ID_PATTERN)
ID_FULLMATCH = _ID_RE.fullmatch


class Reject(Exception):
    """Internal to the gate: carries a rejection out of the check functions (:meth:`Gate.admit
    <topics.gate.Gate.admit>` makes it a dead letter)."""

    def __init__(self, reason: DeadLetterReason, detail: str, paths: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.reason: DeadLetterReason = reason
        self.detail = detail
        self.paths = tuple(paths)


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def forbidden_key_paths(
    obj: Mapping[str, Any] | Sequence[Any], safe: frozenset[str] = frozenset()
) -> list[str]:
    """Dotted paths (list indexes as numbers, keys as :func:`~topics.hostile.safe_key`) of every
    §4.2 forbidden key in ``obj``, at any depth, compared after NFKC, case folding and removing
    zero-width characters. Iterative: no recursion limit on deep documents. ``safe``: keys known
    not to be forbidden (exact spelling), not compared again."""
    found: list[str] = []
    stack: list[tuple[Any, str]] = [(obj, "")]
    while stack:
        node, prefix = stack.pop()
        if type(node) is dict:
            for k, v in node.items():
                if k not in safe and is_forbidden_key(k):
                    found.append(prefix + safe_key(k))
                tv = type(v)
                if (tv is dict and v) or (tv is list and v):
                    stack.append((v, prefix + safe_key(k) + "."))
        else:
            for i, v in enumerate(node):
                tv = type(v)
                if (tv is dict and v) or (tv is list and v):
                    stack.append((v, f"{prefix}{i}."))
    found.sort()
    return found


def is_id(value: object) -> bool:
    return type(value) is str and _ID_RE.fullmatch(value) is not None


def validation_paths(exc: ValidationError) -> list[str]:
    paths: list[str] = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        path = safe_path(err["loc"]) or "(record)"
        if path not in paths:
            paths.append(path)
    return paths


def validation_detail(exc: ValidationError) -> str:
    parts: list[str] = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False)[:8]:
        path = safe_path(err["loc"]) or "(record)"
        parts.append(f"{err['type']} at {cut(path, 100)}")
    return "schema: " + "; ".join(parts)


def paths_text(paths: Sequence[str]) -> str:
    shown = ", ".join(cut(p, 80) for p in paths[:6])
    return shown + (f" (+{len(paths) - 6} more)" if len(paths) > 6 else "")


def key_matches(key: bytes | str | None, device_id: str) -> bool:
    if key is None:
        return False
    if type(key) is str:
        return key == device_id
    return key == device_id.encode()


def check_hostile(obj: dict[str, Any], raw: bytes, safe: frozenset[str]) -> bool:
    """§2 rule 7: a repeated key is ``not_json``; nesting deeper than 16 levels or an integer
    outside the signed 64-bit range is ``schema_invalid`` (after the privacy check: a
    forbidden key in such a record is a ``privacy_violation``). Returns whether no forbidden
    key (§4.2) is in ``obj`` (keys in ``safe`` are not looked at), found on the same walk."""
    shape = shape_of(obj, safe)
    found = None
    if shape.depth <= MAX_DEPTH and (
        shape.big_number
        or (raw.count(b":") != shape.keys and needs_exact_scan(raw, shape.keys, colons_in(obj)))
    ):
        found = exact_scan(raw)
        if found == "duplicate_key":
            raise Reject("not_json", "a key is repeated within one object")
    if shape.depth > MAX_DEPTH or found == "too_deep":
        detail = f"nesting deeper than {MAX_DEPTH} levels"
    elif found == "big_int":
        detail = "an integer outside the signed 64-bit range"
    else:
        return shape.clean
    paths = forbidden_key_paths(obj)
    if paths:
        raise Reject("privacy_violation", "forbidden key at " + paths_text(paths), paths)
    raise Reject("schema_invalid", detail)

"""Hostile shapes (docs/CONTRACTS.md §2 rule 7) and what a dead letter may show of a record (§10).

Pure helpers of the gate:

- :func:`shape_of` walks a parsed document once, iteratively (no recursion limit): how many keys
  it holds, how deep it nests, whether an integer lies outside the signed 64-bit range, whether a
  forbidden key is in it;
- :func:`has_duplicate_key` / :func:`exact_scan` find what a last-wins parser hides: a repeated
  key at any depth (``orjson`` and ``json`` keep the last copy) and an integer literal past 64
  bits (``orjson`` turns it into a float). The exact scan is the standard library's parser with
  ``object_pairs_hook`` and ``parse_int``; the gate runs it only when a cheap count says it may
  find something (see :func:`needs_exact_scan`);
- :func:`key_norm` is how a key is compared with the forbidden list: NFKC, case folding, zero-width
  and other format characters and combining marks removed;
- :func:`safe_key` is the one rule for how a dead letter names a key, in ``offending_paths``,
  ``detail`` and the payload copy: as itself when it is an identifier, else by its hash (every
  writer of names into a dead letter calls it: the gate, the condition validator, the redactor);
- :class:`Redactor` makes a dead letter's redacted payload copy: every key kept (named by
  :func:`safe_key`), the value of every key the contract does not define replaced by null, at any
  depth, cut at 16 KiB.
"""

from __future__ import annotations

import hashlib
import json
import re
import types
import typing
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, get_args, get_origin

import orjson
from pydantic import BaseModel

from topics.records import (
    FORBIDDEN_KEYS,
    ID_PATTERN,
    MAX_RECORD_BYTES,
    DeviceContext,
    ExperiencePlan,
    Observation,
    TaskEvent,
)

#: The deepest nesting of objects and arrays a record may have (the top object is level 1).
MAX_DEPTH = 16
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

_ID_RE = re.compile(ID_PATTERN)
_SAFE_KEY_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
#: orjson reads an integer literal past 64 bits as a float: one this large may have been one
_BIG_FLOAT = float(2**63)


# --------------------------------------------------------------------------------------------
# keys
# --------------------------------------------------------------------------------------------


def key_norm(key: str) -> str:
    """``key`` as it is compared with the forbidden list: NFKC, case folded, without zero-width
    (format, ``Cf``) characters and combining marks (so ``PİN``, ``ｐｉｎ`` and ``p\\u200bin`` are
    all ``pin``)."""
    if key.isascii():
        return key.lower()
    folded = unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", key).casefold())
    return "".join(c for c in folded if unicodedata.category(c) not in ("Cf", "Mn", "Me"))


def is_forbidden_key(key: str) -> bool:
    """A §4.2 forbidden key, compared after :func:`key_norm`."""
    if key.isascii():
        return key.lower() in FORBIDDEN_KEYS
    return key_norm(key) in FORBIDDEN_KEYS


def safe_key(key: str) -> str:
    """How a dead letter names a key: as itself when it is an identifier
    (``[A-Za-z0-9_.-]{1,64}``), else ``<key:`` + the first 8 hex digits of its SHA-256 + ``>``."""
    if _SAFE_KEY_RE.fullmatch(key) is not None:
        return key
    return "<key:" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:8] + ">"


def safe_path(parts: Iterable[str | int]) -> str:
    """A dotted path of keys (:func:`safe_key`) and list indexes."""
    return ".".join(str(p) if isinstance(p, int) else safe_key(p) for p in parts)


# --------------------------------------------------------------------------------------------
# shapes
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Shape:
    """What one walk over a parsed document found."""

    keys: int
    depth: int
    #: an integer outside the signed 64-bit range, or a float that may have been one
    big_number: bool
    #: no §4.2 forbidden key outside the walk's safe keys (meaningful only for a complete walk:
    #: one that did not stop at a depth over ``MAX_DEPTH``)
    clean: bool = True


def shape_of(obj: Any, safe: frozenset[str] = frozenset()) -> Shape:
    """Keys, nesting depth, out-of-range integers and forbidden keys (those not in ``safe``) of a
    parsed document, in one iterative walk. Colons are counted by :func:`colons_in`, only when
    the document's raw colons differ from its keys."""
    keys = 0
    deepest = 0
    big = False
    clean = True
    stack: list[tuple[Any, int]] = [(obj, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        if depth > deepest:
            deepest = depth
            if depth > MAX_DEPTH:
                # no need to look further: the record is refused for its depth
                return Shape(keys, depth, big, clean)
        if type(node) is dict:
            keys += len(node)
            if clean and not node.keys() <= safe:
                for k in node.keys() - safe:
                    if is_forbidden_key(k):
                        clean = False
                        break
            values = node.values()
        else:
            values = node
        for v in values:
            tv = type(v)
            if tv is dict or tv is list:
                push((v, depth + 1))
            elif (tv is int and not INT64_MIN <= v <= INT64_MAX) or (tv is float and abs(v) >= _BIG_FLOAT):
                big = True
    return Shape(keys, deepest, big, clean)


def colons_in(obj: Any) -> int:
    """The colons inside the keys and string values of a parsed document (iterative)."""
    colons = 0
    stack: list[Any] = [obj]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        if type(node) is dict:
            for k in node:
                colons += k.count(":")
            values = node.values()
        else:
            values = node
        for v in values:
            tv = type(v)
            if tv is dict or tv is list:
                push(v)
            elif tv is str:
                colons += v.count(":")
    return colons


def needs_exact_scan(raw: bytes, keys: int, colons: int = 0) -> bool:
    """Whether ``raw`` may hide a repeated key from a last-wins parse that found ``keys`` keys and
    ``colons`` colons inside its keys and strings. Every key has its ``:``; without ``\\u`` escapes
    (which could spell a colon the raw count misses) a parsed string holds no more colons than its
    raw text, and a hidden first copy only adds colons, so equal counts rule out a repeated key."""
    if raw.count(b":") == keys:
        return False
    return b"\\u" in raw or raw.count(b":") != keys + colons


class _Duplicate(Exception):
    pass


class _BigInt(Exception):
    pass


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    d = dict(pairs)
    if len(d) != len(pairs):
        raise _Duplicate
    return d


def _int(text: str) -> int:
    value = int(text)
    if not INT64_MIN <= value <= INT64_MAX:
        raise _BigInt
    return value


def exact_scan(raw: bytes) -> Literal["duplicate_key", "big_int", "too_deep"] | None:
    """The exact check of a document ``orjson`` already parsed: a repeated key at any depth, or an
    integer literal outside the signed 64-bit range (``orjson`` reads one as a float)."""
    try:
        json.loads(raw, object_pairs_hook=_pairs, parse_int=_int)
    except _Duplicate:
        return "duplicate_key"
    except _BigInt:
        return "big_int"
    except RecursionError:
        return "too_deep"
    except ValueError:
        return None  # the stricter parser (orjson) admitted it: nothing hidden to report
    return None


def has_duplicate_key(raw: bytes) -> bool:
    return exact_scan(raw) == "duplicate_key"


# --------------------------------------------------------------------------------------------
# redacted payload copies (§10)
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class KeyShape:
    """The keys the contract defines at one place of a record: ``fields`` by name, and
    ``id_keys`` for maps keyed by IDs (``area_names``). A key not defined here keeps its name but
    loses its value (null); a scalar under a defined key is kept."""

    fields: dict[str, KeyShape] = field(default_factory=dict)
    id_keys: KeyShape | None = None


def _model_in(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _dict_in(annotation: Any) -> tuple[Any, Any] | None:
    if get_origin(annotation) is dict:
        k, v = get_args(annotation)
        return k, v
    if get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        for arg in get_args(annotation):
            found = _dict_in(arg)
            if found is not None:
                return found
    return None


def _literal_values(annotation: Any) -> tuple[str, ...]:
    if get_origin(annotation) is Literal:
        return tuple(str(a) for a in get_args(annotation))
    if get_origin(annotation) is typing.Annotated:
        return _literal_values(get_args(annotation)[0])
    return ()


def shape_of_model(model: type[BaseModel], overrides: dict[str, KeyShape]) -> KeyShape:
    """The defined keys of a record model (nested models and maps with literal keys followed);
    ``overrides`` gives the shape of free-keyed maps by field name (facts, args, ...)."""
    out = KeyShape()
    for name, info in model.model_fields.items():
        if name in overrides:
            out.fields[name] = overrides[name]
            continue
        annotation = info.annotation
        sub = _model_in(annotation)
        mapping = _dict_in(annotation)
        if mapping is not None:
            keys = _literal_values(mapping[0])
            inner_model = _model_in(mapping[1])
            inner = shape_of_model(inner_model, overrides) if inner_model else KeyShape()
            out.fields[name] = KeyShape(fields=dict.fromkeys(keys, inner)) if keys else KeyShape()
        elif sub is not None:
            out.fields[name] = shape_of_model(sub, overrides)
        else:
            out.fields[name] = KeyShape()
    return out


def _redact(node: Any, shape: KeyShape, depth: int) -> Any:
    tn = type(node)
    if tn is dict:
        if depth > MAX_DEPTH:
            return None
        out: dict[str, Any] = {}
        for k, v in node.items():
            sub = shape.fields.get(k)
            if sub is None and shape.id_keys is not None and _ID_RE.fullmatch(k) is not None:
                sub = shape.id_keys
            # a key that is not an identifier is named by its hash, as in ``detail`` (§10)
            out[safe_key(k)] = None if sub is None else _redact(v, sub, depth + 1)
        return out
    if tn is list:
        if depth > MAX_DEPTH:
            return None
        return [_redact(v, shape, depth + 1) for v in node]
    return node


class Redactor:
    """Redacted payload copies of the records of each input kind (§10): every key kept, named by
    :func:`safe_key` (free text in a key name is hashed), the value of every key the contract does
    not define null."""

    def __init__(self, fact_names: Iterable[str], arg_names: Iterable[str]) -> None:
        leafs = KeyShape()
        overrides = {
            "facts": KeyShape(fields=dict.fromkeys(fact_names, leafs)),
            "args": KeyShape(fields=dict.fromkeys(arg_names, leafs)),
            "area_names": KeyShape(id_keys=leafs),
        }
        self.shapes: dict[str, KeyShape] = {
            "observations": shape_of_model(Observation, overrides),
            "task-events": shape_of_model(TaskEvent, overrides),
            "plans": shape_of_model(ExperiencePlan, overrides),
            "device-context": shape_of_model(DeviceContext, overrides),
        }

    def payload(self, kind: str, obj: Any) -> str | None:
        """The redacted copy of the parsed record ``obj`` as JSON text, at most 16 KiB; None when
        there is nothing parsed to copy or not even its top-level keys fit."""
        if type(obj) is not dict:
            return None
        shape = self.shapes.get(kind, KeyShape())
        for limit in (MAX_DEPTH, 1):
            text = orjson.dumps(_redact(obj, shape, 1 if limit == MAX_DEPTH else MAX_DEPTH))
            if len(text) <= MAX_RECORD_BYTES:
                return text.decode("utf-8")
        return None


__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_DEPTH",
    "KeyShape",
    "Redactor",
    "Shape",
    "colons_in",
    "exact_scan",
    "has_duplicate_key",
    "is_forbidden_key",
    "key_norm",
    "needs_exact_scan",
    "safe_key",
    "safe_path",
    "shape_of",
    "shape_of_model",
]

"""Conditions over device context: three states, fail-closed (docs/CONTRACTS.md §9.2).

A condition is JSON: leaves ``{"path": "DOMAIN.KEY", "op": ..., "value": ...}`` and the
combinators ``{"all": [...]}``, ``{"any": [...]}``, ``{"not": {...}}`` (at most 16 leaves and
depth 4, a leaf alone being depth 1). Two pure functions:

- :func:`condition_problems` validates a condition where it is written (a plan's
  ``preconditions``: ``plan_invalid``; a catalog ``requires``: the registry refuses to load): an
  unknown path (or a *grounding*/*evidence* key), operator or shape, a value that is not a valid
  value of its key, or ``$args.NAME`` outside a catalog entry is an error, never a pass.
- :func:`evaluate` gives :class:`Result`: ``KNOWN`` with a truth value, ``STALE`` or ``UNKNOWN``,
  with the paths and why. The domain is looked at first (missing or ``available: false`` is
  ``UNKNOWN``, stale is ``STALE``, whatever the operator); then a missing key or a value of
  another type is ``UNKNOWN``. A missing value never makes ``not_equals`` or ``not_in`` true.
  ``all``/``any``/``not`` combine exactly as §9.2 says. Only ``KNOWN true`` passes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from topics.context import DOMAIN_TABLE, ContextView, KeySpec
from topics.hostile import safe_key

State = Literal["KNOWN", "STALE", "UNKNOWN"]
OPERATORS: tuple[str, ...] = (
    "equals",
    "not_equals",
    "in",
    "not_in",
    "lt",
    "lte",
    "gt",
    "gte",
    "is_true",
    "is_false",
    "contains",
)
COMBINATORS: tuple[str, ...] = ("all", "any", "not")
MAX_LEAVES = 16
MAX_DEPTH = 4
#: The most values an ``in`` / ``not_in`` list may hold.
MAX_IN_VALUES = 32
ARGS_PREFIX = "$args."
_NUMERIC_OPS = frozenset({"lt", "lte", "gt", "gte"})
_BOOL_OPS = frozenset({"is_true", "is_false"})
_LIST_OPS = frozenset({"in", "not_in"})


@dataclass(frozen=True, slots=True)
class Result:
    """A condition's three-state result: ``KNOWN`` (with ``value``), ``STALE`` or ``UNKNOWN``;
    ``reasons`` name the paths that made it what it is, and why (the values read, for KNOWN)."""

    state: State
    value: bool = False
    reasons: tuple[str, ...] = field(default=())

    @property
    def passes(self) -> bool:
        """Only ``KNOWN true`` passes."""
        return self.state == "KNOWN" and self.value

    @property
    def label(self) -> str:
        """``KNOWN true``, ``KNOWN false``, ``STALE`` or ``UNKNOWN``."""
        return f"KNOWN {'true' if self.value else 'false'}" if self.state == "KNOWN" else self.state

    def describe(self) -> str:
        """The timeline's text: the result and, for STALE and UNKNOWN, the paths and why."""
        if self.passes or not self.reasons:
            return f"condition {self.label}"
        return f"condition {self.label}: {'; '.join(self.reasons[:4])}"


KNOWN_TRUE = Result("KNOWN", True)
KNOWN_FALSE = Result("KNOWN", False)


# --------------------------------------------------------------------------------------------
# validation
# --------------------------------------------------------------------------------------------


def condition_problems(cond: object, *, args: Sequence[str] | None = None) -> list[str]:
    """Every reason ``cond`` is not a valid condition; empty when it is valid.

    ``args``: the request's argument names a catalog ``requires`` may read as ``$args.NAME``
    (None where a condition is not attached to a request, e.g. plan preconditions)."""
    problems: list[str] = []
    leaves = [0]

    def walk(node: object, where: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            problems.append(f"{where}: deeper than {MAX_DEPTH} levels")
            return
        if not isinstance(node, dict):
            problems.append(f"{where}: must be an object")
            return
        if "path" in node or "op" in node:
            leaves[0] += 1
            problems.extend(_leaf_problems(node, where, args))
            return
        if len(node) != 1:
            problems.append(f"{where}: must be one leaf or exactly one of all, any, not")
            return
        ((name, body),) = node.items()
        if name not in COMBINATORS:
            problems.append(f"{where}: unknown combinator '{safe_key(str(name))}'")
        elif name == "not":
            walk(body, f"{where}.not", depth + 1)
        elif not isinstance(body, list) or not body:
            problems.append(f"{where}.{name}: must be a non-empty list")
        else:
            for i, part in enumerate(body):
                walk(part, f"{where}.{name}.{i}", depth + 1)

    walk(cond, "condition", 1)
    if leaves[0] > MAX_LEAVES:
        problems.append(f"condition: more than {MAX_LEAVES} leaves")
    return problems


def _leaf_problems(leaf: dict[str, Any], where: str, args: Sequence[str] | None) -> list[str]:
    path, op = leaf.get("path"), leaf.get("op")
    if not isinstance(op, str) or op not in OPERATORS:
        return [f"{where}.op: unknown operator"]
    allowed = {"path", "op"} if op in _BOOL_OPS else {"path", "op", "value"}
    if leaf.keys() != allowed:
        extra = sorted(safe_key(str(k)) for k in leaf.keys() - allowed)
        missing = sorted(allowed - leaf.keys())
        what = f"unknown field '{extra[0]}'" if extra else f"missing field '{missing[0]}'"
        return [f"{where}: {what}"]
    if not isinstance(path, str):
        return [f"{where}.path: must be DOMAIN.KEY"]
    spec = _path_spec(path)
    if spec is None:
        return [f"{where}.path: unknown path '{safe_key(path)}'"]
    if not spec.projected:
        return [f"{where}.path: {safe_key(path)} is grounding or evidence, not state"]
    value = leaf.get("value")
    if spec.type == "area_list" or op == "contains":
        if not (spec.type == "area_list" and op == "contains"):
            return [f"{where}: contains applies to map.areas only, and map.areas only takes contains"]
        if isinstance(value, str) and value.startswith(ARGS_PREFIX):
            name = value[len(ARGS_PREFIX) :]
            if args is None or name not in args:
                return [f"{where}.value: '{ARGS_PREFIX}{safe_key(name)}' names no argument of the request"]
            return []
        if not KeySpec("id").allows(value):
            return [f"{where}.value: must be an area_id"]
        return []
    if op in _BOOL_OPS:
        return [] if spec.type == "bool" else [f"{where}: {op} needs a boolean key"]
    if op in _NUMERIC_OPS:
        if spec.type not in ("int", "number"):
            return [f"{where}: {op} needs a numeric key"]
        if not _number(value):
            return [f"{where}.value: must be a number"]
        return []
    if op in _LIST_OPS:
        if not isinstance(value, list) or not value or len(value) > MAX_IN_VALUES:
            return [f"{where}.value: must be a non-empty list of at most {MAX_IN_VALUES} values"]
        if not all(spec.allows(v) for v in value):
            return [f"{where}.value: holds a value that {safe_key(path)} never takes"]
        return []
    if not spec.allows(value):
        return [f"{where}.value: not a value {safe_key(path)} takes"]
    return []


def _path_spec(path: str) -> KeySpec | None:
    domain, dot, key = path.partition(".")
    spec = DOMAIN_TABLE.get(domain)
    if not dot or spec is None:
        return None
    return spec.keys.get(key)


def _number(value: object) -> bool:
    return isinstance(value, int | float) and type(value) is not bool and math.isfinite(value)


def condition_paths(cond: object) -> list[str]:
    """The ``DOMAIN.KEY`` paths a (valid) condition reads, in order, without repeats."""
    out: list[str] = []

    def walk(node: object) -> None:
        if not isinstance(node, dict):
            return
        if "path" in node:
            path = node.get("path")
            if isinstance(path, str) and path not in out:
                out.append(path)
            return
        for body in node.values():
            if isinstance(body, list):
                for part in body:
                    walk(part)
            else:
                walk(body)

    walk(cond)
    return out


# --------------------------------------------------------------------------------------------
# evaluation
# --------------------------------------------------------------------------------------------


def evaluate(
    cond: Mapping[str, Any],
    context: ContextView,
    now_ms: int,
    *,
    args: Mapping[str, Any] | None = None,
) -> Result:
    """The three-state result of a valid condition on ``context`` at ``now_ms`` (receive-time
    clock). ``args``: the request's args, for ``$args.NAME`` values."""
    if "path" in cond:
        return _leaf(cond, context, now_ms, args)
    ((name, body),) = cond.items()
    if name == "not":
        inner = evaluate(body, context, now_ms, args=args)
        return Result("KNOWN", not inner.value) if inner.state == "KNOWN" else inner
    parts = [evaluate(part, context, now_ms, args=args) for part in body]
    decisive = name != "all"  # all: a KNOWN false decides; any: a KNOWN true decides
    deciding = [p for p in parts if p.state == "KNOWN" and p.value == decisive]
    if deciding:
        return Result("KNOWN", decisive, _reasons(deciding))
    for state in ("STALE", "UNKNOWN"):
        hits = [p for p in parts if p.state == state]
        if hits:
            return Result(state, False, _reasons([p for p in parts if p.state != "KNOWN"]))
    return Result("KNOWN", not decisive, _reasons(parts))


def _reasons(parts: Sequence[Result]) -> tuple[str, ...]:
    out: list[str] = []
    for part in parts:
        out.extend(r for r in part.reasons if r not in out)
    return tuple(out)


def _shown(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)[:64]


def _leaf(
    leaf: Mapping[str, Any], context: ContextView, now_ms: int, args: Mapping[str, Any] | None
) -> Result:
    path: str = leaf["path"]
    op: str = leaf["op"]
    domain, _, key = path.partition(".")
    env = context.get(domain)
    if env is None:
        return Result("UNKNOWN", False, (f"{domain} (no envelope)",))
    if not env.available:
        return Result("UNKNOWN", False, (f"{domain} (unavailable)",))
    if env.skewed(now_ms):
        return Result("UNKNOWN", False, (f"{domain} (observed in the future: clock skew)",))
    age = env.age_ms(now_ms)
    if age > env.ttl_ms:
        return Result("STALE", False, (f"{domain} (age {age} ms > ttl {env.ttl_ms} ms)",))
    if key not in env.data:
        return Result("UNKNOWN", False, (f"{path} (missing)",))
    actual = env.data[key]
    expected = leaf.get("value")
    if isinstance(expected, str) and expected.startswith(ARGS_PREFIX):
        expected = (args or {}).get(expected[len(ARGS_PREFIX) :])
        if expected is None:
            return Result("UNKNOWN", False, (f"{path} (request has no {leaf['value'][len(ARGS_PREFIX) :]})",))
    truth = _compare(op, actual, expected)
    if truth is None:
        return Result("UNKNOWN", False, (f"{path} (value of another type)",))
    if op == "contains":
        return Result("KNOWN", truth, (f"{path} {'has' if truth else 'lacks'} {_shown(expected)}",))
    return Result("KNOWN", truth, (f"{path} is {_shown(actual)}",))


def _same_type(a: object, b: object) -> bool:
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb
    if ta in (int, float) and tb in (int, float):
        return True
    return ta is tb and ta is str


def _compare(op: str, actual: Any, expected: Any) -> bool | None:
    """The truth of one operator, or None when ``actual`` is not of the type the operator reads."""
    if op in ("is_true", "is_false"):
        if type(actual) is not bool:
            return None
        return bool(actual) if op == "is_true" else not actual
    if op in ("equals", "not_equals"):
        if not _same_type(actual, expected):
            return None
        return bool(actual == expected) == (op == "equals")
    if op in ("in", "not_in"):
        if not isinstance(expected, list) or not expected or not all(_same_type(actual, v) for v in expected):
            return None
        return (actual in expected) == (op == "in")
    if op in _NUMERIC_OPS:
        if not (_number(actual) and _number(expected)):
            return None
        if op == "lt":
            return bool(actual < expected)
        if op == "lte":
            return bool(actual <= expected)
        if op == "gt":
            return bool(actual > expected)
        return bool(actual >= expected)
    if op == "contains":
        if type(actual) is not list or type(expected) is not str:
            return None
        ids = [a.get("area_id") for a in actual if isinstance(a, dict)]
        return bool(expected in ids)
    return None


__all__ = [
    "ARGS_PREFIX",
    "COMBINATORS",
    "KNOWN_FALSE",
    "KNOWN_TRUE",
    "MAX_DEPTH",
    "MAX_LEAVES",
    "OPERATORS",
    "Result",
    "State",
    "condition_paths",
    "condition_problems",
    "evaluate",
]

"""The gate: raw Kafka bytes in, a typed record or a typed rejection (a dead letter) out.

Every input record passes docs/CONTRACTS.md §4.3 steps 1–3 (size, JSON, privacy, schema, key); an
observation also passes step 4 (fact values), a plan §3's validation against the capability
catalog. :meth:`Gate.admit` never raises for any input bytes or key: a bad record becomes a
:class:`Rejected` carrying its :class:`~topics.records.DeadLetter` (§10), so a bad record never
stops its partition.

Observations take a hand-written fast path (orjson, one iterative pass over the keys, checks
equivalent to the pydantic model, then ``model_construct``); the other kinds are rare and use
``model_validate``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args

import orjson
from pydantic import BaseModel, ValidationError

from topics.conditions import condition_problems
from topics.context import MAX_CLOCK_SKEW_MS, data_problems, skewed_paths
from topics.hostile import (
    INT64_MAX,
    INT64_MIN,
    MAX_DEPTH,
    Redactor,
    colons_in,
    exact_scan,
    is_forbidden_key,
    needs_exact_scan,
    safe_key,
    safe_path,
    shape_of,
)
from topics.kafka_key import key_problem, shown_key
from topics.records import (
    ID_PATTERN,
    MAX_RECORD_BYTES,
    Correlation,
    DeadLetter,
    DeadLetterReason,
    DeviceContext,
    ExperiencePlan,
    Observation,
    TaskEvent,
)
from topics.registry import ContractSpec, FactSpec, Registry
from topics.steps import PLANNER_EXPOSURES, missing_args, step_problem
from topics.text import visible

GateKind = Literal["observations", "task-events", "plans", "device-context"]
GATE_KINDS: tuple[str, ...] = get_args(GateKind)

#: Reason codes whose dead letter may carry a copy of the payload (§10).
PAYLOAD_REASONS: frozenset[str] = frozenset(
    {
        "schema_invalid",
        "key_mismatch",
        "unknown_contract",
        "cross_device",
        "plan_invalid",
        "clock_skew",
        "experience_rate",
    }
)

#: The most areas a plan may name (as many as a device's map may hold, §9.1).
MAX_PLAN_AREAS = 64

_ID_RE = re.compile(ID_PATTERN)
_ID_FULLMATCH = _ID_RE.fullmatch
_object_new = object.__new__
# the slots every pydantic model instance has (BaseModel.__slots__), set as model_construct does
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__
_MAX_PATHS = 32
#: the most IDs the gate remembers as valid (:meth:`Gate._is_known_id`)
_KNOWN_IDS_MAX = 65_536
#: the most correlations the gate keeps built (:meth:`Gate._fast_observation`)
_CORRELATIONS_MAX = 16_384
#: the most valid values the gate remembers per string fact without an enum
_KNOWN_VALUES_MAX = 4_096
_MAX_PATH_LEN = 200
_MAX_DETAIL_LEN = 500

# the observation's fields come from its model; tests/unit/test_observation_schema.py checks that
# the fast path, the checked path and the schema paths judge every field as the model does
_OBS_REQUIRED = tuple(name for name, f in Observation.model_fields.items() if f.is_required())
_OBS_FIELDS = frozenset(Observation.model_fields)
_CORRELATION_FIELDS = tuple(Correlation.model_fields)
_CORRELATION_SET = frozenset(_CORRELATION_FIELDS)

_M = TypeVar("_M", bound=BaseModel)


def _observation(
    obj: dict[str, Any],
    event_id: str,
    device_id: str,
    ctype: str,
    source: str,
    observed_at_ms: Any,
    freshness_ms: Any,
    ttl: Any,
    conf: Any,
    rcd: bool,
    correlation: Any,
    facts: dict[str, Any],
) -> Observation:
    """The admitted observation from its checked fields (``obj``: the record as read)."""
    return _build(
        Observation,
        {
            "event_id": event_id,
            "device_id": device_id,
            "type": ctype,
            "source": source,
            "observed_at_ms": observed_at_ms,
            "freshness_ms": freshness_ms,
            "ttl_ms": ttl,
            "confidence": conf,
            "privacy_class": "semantic_only",
            "requires_cloud_decision": rcd,
            "correlation": correlation,
            "facts": facts,
        },
        set(obj),
    )


def _build(cls: type[_M], values: dict[str, Any], fields_set: set[str]) -> _M:
    """What ``cls.model_construct`` does for a model without aliases, extras or private
    attributes, given every field in declaration order: the caller has validated the values
    exactly as ``model_validate`` would (tests compare the two). The four slots of a pydantic model
    are set through their descriptors (what ``object.__setattr__`` finds, without looking)."""
    m = _object_new(cls)
    _set_dict(m, values)
    _set_fields_set(m, fields_set)
    _set_extra(m, None)
    _set_private(m, None)
    return m


@dataclass(frozen=True, slots=True)
class _ContractCheck:
    """A contract's checks, precomputed for the fast path."""

    facts: Mapping[str, FactSpec]
    allowed: frozenset[str]
    #: The allowed fact names that are not forbidden keys (all of them, in a sane registry).
    safe_allowed: frozenset[str]
    required: tuple[tuple[str, ...], ...]
    required_all: frozenset[str]
    any_of: tuple[frozenset[str], ...]
    #: String values known to be valid, by fact: a string fact's enum, or (no enum) the values its
    #: :meth:`FactSpec.allows` accepted so far (they repeat record after record; the gate's own
    #: memory, emptied when it holds ``_KNOWN_VALUES_MAX``); empty for a bool or int fact
    known_str: Mapping[str, frozenset[str] | set[str]]

    @classmethod
    def of(cls, spec: ContractSpec) -> _ContractCheck:
        known_str: dict[str, frozenset[str] | set[str]] = {}
        for name, fact in spec.facts.items():
            if fact.type != "str":
                known_str[name] = frozenset()
            elif fact.enum is not None:
                known_str[name] = fact.enum
            else:
                known_str[name] = set()
        return cls(
            facts=spec.facts,
            allowed=frozenset(spec.facts),
            safe_allowed=frozenset(k for k in spec.facts if not is_forbidden_key(k)),
            required=spec.required,
            required_all=frozenset(g[0] for g in spec.required if len(g) == 1),
            any_of=tuple(frozenset(g) for g in spec.required if len(g) > 1),
            known_str=known_str,
        )


@dataclass(frozen=True, slots=True)
class Admitted:
    """A record that passed the gate, with the size in bytes of its value."""

    record: Observation | TaskEvent | ExperiencePlan | DeviceContext
    size: int
    #: a plan's JSON form (``model_dump(mode="json")``), made once by the gate's checks and kept
    #: by the core as the experience's plan; None for the other kinds
    json: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Rejected:
    """A record the gate refused; ``event_id`` is the record's ID when it could be read safely.
    ``value`` is its dead letter's JSON form (what the pipeline writes), ``dead_letter`` the same
    as a model."""

    value: dict[str, Any]
    event_id: str | None

    @property
    def dead_letter(self) -> DeadLetter:
        return DeadLetter.model_validate(self.value)


# an Admitted's and a Rejected's slots, for the gate's hot path (a frozen dataclass's __init__
# writes each one through object.__setattr__)
_set_admitted_record = Admitted.__dict__["record"].__set__
_set_admitted_size = Admitted.__dict__["size"].__set__
_set_admitted_json = Admitted.__dict__["json"].__set__
_set_rejected_value = Rejected.__dict__["value"].__set__
_set_rejected_event_id = Rejected.__dict__["event_id"].__set__


# --------------------------------------------------------------------------------------------
# Dead letters
# --------------------------------------------------------------------------------------------


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def make_dead_letter(
    reason_code: DeadLetterReason,
    raw: bytes,
    *,
    source_topic: str,
    partition: int,
    offset: int,
    key: bytes | str | None,
    received_at_ms: int,
    event_id: str | None,
    detail: str,
    offending_paths: Iterable[str] = (),
    payload: str | None = None,
) -> DeadLetter:
    """The §10 dead letter of ``raw`` (the original record value), as a model: see
    :func:`dead_letter_json`."""
    return DeadLetter.model_validate(
        dead_letter_json(
            reason_code,
            raw,
            source_topic=source_topic,
            partition=partition,
            offset=offset,
            key=key,
            received_at_ms=received_at_ms,
            event_id=event_id,
            detail=detail,
            offending_paths=offending_paths,
            payload=payload,
        )
    )


def dead_letter_json(
    reason_code: DeadLetterReason,
    raw: bytes,
    *,
    source_topic: str,
    partition: int,
    offset: int,
    key: bytes | str | None,
    received_at_ms: int,
    event_id: str | None,
    detail: str,
    offending_paths: Iterable[str] = (),
    payload: str | None = None,
) -> dict[str, Any]:
    """The §10 dead letter of ``raw`` (the original record value) in its JSON form, built directly:
    exactly :class:`~topics.records.DeadLetter`'s ``model_dump(mode="json")`` (tests compare the
    two), without a pydantic round trip per rejected record.

    ``payload`` is the redacted copy of the parsed record (:class:`topics.hostile.Redactor`), kept
    only for the reasons that carry one: the raw bytes are never copied. An ``event_id`` that is
    not a valid ID is left out. ``detail`` and ``offending_paths`` must name keys by
    :func:`topics.hostile.safe_key` only, never values. ``key`` (the record's Kafka key) is shown
    by :func:`topics.kafka_key.shown_key`: itself, or a bounded form of a key over 256 bytes or not
    UTF-8 text."""
    if reason_code not in PAYLOAD_REASONS:
        payload = None
    if event_id is not None and _ID_FULLMATCH(event_id) is None:
        event_id = None
    return {
        "reason_code": reason_code,
        "source_topic": source_topic,
        "partition": partition,
        "offset": offset,
        "key": shown_key(key),
        "event_id": event_id,
        "detail": _cut(detail, _MAX_DETAIL_LEN),
        "offending_paths": [_cut(p, _MAX_PATH_LEN) for p in offending_paths][:_MAX_PATHS],
        "payload_sha256": hashlib.sha256(raw).hexdigest(),
        "payload_size": len(raw),
        "payload": payload,
        "received_at_ms": received_at_ms,
    }


# --------------------------------------------------------------------------------------------
# Checks shared by every kind
# --------------------------------------------------------------------------------------------


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


def _is_id(value: object) -> bool:
    return type(value) is str and _ID_RE.fullmatch(value) is not None


def _validation_paths(exc: ValidationError) -> list[str]:
    paths: list[str] = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False):
        path = safe_path(err["loc"]) or "(record)"
        if path not in paths:
            paths.append(path)
    return paths


def _validation_detail(exc: ValidationError) -> str:
    parts: list[str] = []
    for err in exc.errors(include_url=False, include_input=False, include_context=False)[:8]:
        path = safe_path(err["loc"]) or "(record)"
        parts.append(f"{err['type']} at {_cut(path, 100)}")
    return "schema: " + "; ".join(parts)


def _paths_text(paths: Sequence[str]) -> str:
    shown = ", ".join(_cut(p, 80) for p in paths[:6])
    return shown + (f" (+{len(paths) - 6} more)" if len(paths) > 6 else "")


# --------------------------------------------------------------------------------------------
# §3 plan validation
# --------------------------------------------------------------------------------------------


def plan_problems(
    plan: ExperiencePlan, registry: Registry, dump: dict[str, Any] | None = None
) -> list[tuple[str, str]]:
    """Every reason ``plan`` cannot run, as (path, problem) pairs; empty when it is valid.
    ``dump``: the plan's ``model_dump(mode="json")`` when the caller has it already.

    Checks (docs/CONTRACTS.md §3, §11): steps and ``allowed_action_contracts`` name catalog
    capabilities and operations exposed to a planner (not ``NO_GO``); required args are present
    and well typed (``area_ids`` within the plan's areas); step IDs are unique; ``depends_on``
    names earlier-declared or later steps of the plan and has no cycle; subscriptions name
    registry contracts and plan steps; no exclusive resource (the camera) is held by two
    capabilities (``resource_conflict``). A step's catalog check is :func:`topics.steps.step_problem`,
    as for dispatches and model replans."""
    problems: list[tuple[str, str]] = []
    areas = set(plan.areas)
    if len(areas) != len(plan.areas):
        problems.append(("areas", "duplicate area"))
    if len(plan.areas) > MAX_PLAN_AREAS:
        # a home's map has at most 64 areas (§9.1); per-area state stays bounded (§2 rule 8)
        problems.append(("areas", f"more than {MAX_PLAN_AREAS} areas"))
    step_ids: set[str] = set()
    for i, step in enumerate(plan.steps):
        if step.step_id in step_ids:
            problems.append((f"steps.{i}.step_id", "duplicate step_id"))
        step_ids.add(step.step_id)

    holders: dict[str, list[str]] = {}
    for i, step in enumerate(plan.steps):
        found = step_problem(registry, step.capability, step.operation, None, exposures=PLANNER_EXPOSURES)
        if found is not None:
            problems.append((f"steps.{i}.{found.where}", found.problem))
            continue
        cap = registry.capabilities[step.capability]
        for arg in missing_args(registry, step.capability, step.operation, step.args):
            problems.append((f"steps.{i}.args.{arg}", "missing required arg"))
        for arg, value in step.args.items():
            atype = registry.arg_types.get(arg)
            if atype == "str" and not (isinstance(value, str) and value):
                problems.append((f"steps.{i}.args.{arg}", "must be a non-empty string"))
            elif atype == "str_list":
                if not (isinstance(value, list) and value and all(_is_id(v) for v in value)):
                    problems.append((f"steps.{i}.args.{arg}", "must be a non-empty list of IDs"))
                elif arg == "area_ids" and not set(value) <= areas:
                    problems.append((f"steps.{i}.args.{arg}", "names an area not in the plan's areas"))
        for res in cap.resources:
            if res in registry.plan_exclusive_resources:
                users = holders.setdefault(res, [])
                if step.capability not in users:
                    users.append(step.capability)
        for j, dep in enumerate(step.depends_on or ()):
            if dep not in step_ids:
                problems.append((f"steps.{i}.depends_on.{j}", "unknown step"))
            elif dep == step.step_id:
                problems.append((f"steps.{i}.depends_on.{j}", "a step cannot depend on itself"))

    for res, users in sorted(holders.items()):
        if len(users) > 1:
            problems.append(("steps", f"resource_conflict: {res} held by {' and '.join(users)}"))

    if _has_cycle(plan):
        problems.append(("steps", "depends_on has a cycle"))

    for i, contract in enumerate(plan.allowed_action_contracts):
        capability, _, operation = contract.partition(".")
        found = step_problem(registry, capability, operation, None, exposures=PLANNER_EXPOSURES)
        if found is not None:
            problems.append((f"allowed_action_contracts.{i}", found.problem))

    for i, sub in enumerate(plan.observation_policy.subscriptions):
        if sub.contract_id not in registry.contracts:
            problems.append((f"observation_policy.subscriptions.{i}.contract_id", "unknown contract"))
        for j, sid in enumerate(sub.step_ids):
            if sid not in step_ids:
                problems.append((f"observation_policy.subscriptions.{i}.step_ids.{j}", "unknown step"))

    if plan.area_names is not None:
        for area in plan.area_names:
            if area not in areas:
                problems.append((f"area_names.{safe_key(area)}", "names an area not in the plan's areas"))
    for path in _unprintable(plan.model_dump(mode="json") if dump is None else dump):
        problems.append((path, "not visible text (a control, format, invisible or bidirectional character)"))
    if plan.preconditions is not None:
        problems.extend(("preconditions", p) for p in condition_problems(plan.preconditions))
    return problems


#: Plan text is visible text (§2 rule 10): the rule of device context's text too (:mod:`topics.text`)
printable = visible


def _unprintable(dump: dict[str, Any]) -> list[str]:
    """The paths of the plan's strings (keys included) that are not :func:`printable` (``dump``:
    the plan's JSON form)."""
    try:
        text = orjson.dumps(dump).decode("utf-8")
    except orjson.JSONEncodeError:
        text = "\\"
    # an encoded form that is visible text without a backslash (orjson writes a control character
    # below U+0020 as an escape): every string and key is visible, no walk needed
    if "\\" not in text and visible(text):
        return []
    found: list[str] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(dump, ())]
    while stack:
        node, where = stack.pop()
        if type(node) is dict:
            for k, v in node.items():
                if not printable(k):
                    found.append(safe_path((*where, k)))
                stack.append((v, (*where, k)))
        elif type(node) is list:
            stack.extend((v, (*where, i)) for i, v in enumerate(node))
        elif type(node) is str and not printable(node):
            found.append(safe_path(where))
    return sorted(found)


def context_data_problems(ctx: DeviceContext) -> list[str]:
    """The paths of every ``data`` key a domain does not list, or whose value is bad (§9.1)."""
    bad: list[str] = []
    for domain, env in ctx.domains.items():
        bad.extend(data_problems(domain, env.data))
    return bad


def _has_cycle(plan: ExperiencePlan) -> bool:
    deps = {s.step_id: [d for d in (s.depends_on or ()) if d != s.step_id] for s in plan.steps}
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in deps:
        if state.get(root):
            continue
        stack: list[tuple[str, int]] = [(root, 0)]
        state[root] = 1
        while stack:
            node, idx = stack[-1]
            children = deps.get(node, [])
            if idx < len(children):
                stack[-1] = (node, idx + 1)
                child = children[idx]
                mark = state.get(child, 0)
                if mark == 1:
                    return True
                if mark == 0 and child in deps:
                    state[child] = 1
                    stack.append((child, 0))
            else:
                state[node] = 2
                stack.pop()
    return False


# --------------------------------------------------------------------------------------------
# The gate
# --------------------------------------------------------------------------------------------


class _Reject(Exception):
    """Internal: carries a rejection out of the check functions."""

    def __init__(self, reason: DeadLetterReason, detail: str, paths: Sequence[str] = ()) -> None:
        super().__init__(reason)
        self.reason: DeadLetterReason = reason
        self.detail = detail
        self.paths = tuple(paths)


class Gate:
    """Admits or rejects raw input records against one :class:`~topics.registry.Registry`."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._checks = {cid: _ContractCheck.of(spec) for cid, spec in registry.contracts.items()}
        facts = {name for spec in registry.contracts.values() for name in spec.facts}
        self.redactor = Redactor(facts, registry.arg_types)
        candidates = set(_OBS_FIELDS) | _CORRELATION_SET | facts
        # every key a record of any kind defines (plans' and task events' fields, args, ...)
        shapes = list(self.redactor.shapes.values())
        while shapes:
            shape = shapes.pop()
            candidates.update(shape.fields)
            shapes.extend(shape.fields.values())
            if shape.id_keys is not None:
                shapes.append(shape.id_keys)
        #: Keys that are certainly not forbidden (exact spelling): skipped by the fast check.
        self._safe_keys = frozenset(k for k in candidates if not is_forbidden_key(k))
        #: Device, experience, workflow and step IDs that matched the ID pattern (they repeat
        #: record after record): a set lookup instead of a regex match; emptied when full. The
        #: answer is the regex's either way.
        self._known_ids: set[str] = set()
        #: Correlations already built from three valid IDs, by (experience, workflow, step) ID:
        #: a record's correlation repeats those of the records before it. The models are frozen,
        #: so observations may share one; emptied when full.
        self._correlations: dict[tuple[str, str, str], Correlation] = {}

    @property
    def registry(self) -> Registry:
        return self._registry

    def admit(
        self,
        kind: GateKind,
        key: bytes | str | None,
        value: bytes | None,
        *,
        source_topic: str,
        partition: int,
        offset: int,
        received_at_ms: int,
    ) -> Admitted | Rejected:
        """Check one record (§4.3 steps 1–4 for observations; §2 rule 6 for the others)."""
        raw = b"" if value is None else value
        obj: Any = None
        try:
            bad_key = key_problem(key)
            if bad_key is not None:
                raise _Reject("key_invalid", bad_key)
            if len(raw) > MAX_RECORD_BYTES:
                raise _Reject("too_large", f"record of {len(raw)} bytes is over {MAX_RECORD_BYTES}")
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise _Reject("not_json", "not a UTF-8 JSON document") from None
            if type(obj) is not dict:
                obj = None
                raise _Reject("not_json", "not a JSON object")
            if kind == "observations":
                record: Observation | TaskEvent | ExperiencePlan | DeviceContext = self._observation(
                    obj, key, raw
                )
            elif kind == "task-events":
                record = self._generic(TaskEvent, obj, key, raw)
            elif kind == "plans":
                plan = self._generic(ExperiencePlan, obj, key, raw)
                plan_json = plan.model_dump(mode="json")
                problems = plan_problems(plan, self._registry, plan_json)
                if problems:
                    detail = "plan: " + "; ".join(f"{_cut(p, 80)}: {msg}" for p, msg in problems[:6])
                    raise _Reject("plan_invalid", detail, [p for p, _ in problems])
                return Admitted(record=plan, size=len(raw), json=plan_json)
            elif kind == "device-context":
                context: DeviceContext = self._generic(DeviceContext, obj, key, raw)
                bad = context_data_problems(context)
                if bad:
                    raise _Reject(
                        "fact_invalid",
                        "device context: unlisted key or bad value at " + _paths_text(bad),
                        bad,
                    )
                skewed = skewed_paths(context, received_at_ms)
                if skewed:
                    detail = f"observed more than {MAX_CLOCK_SKEW_MS} ms after the receive time at "
                    raise _Reject("clock_skew", detail + _paths_text(skewed), skewed)
                record = context
            else:
                raise _Reject("schema_invalid", f"unknown input kind {kind!r}")
        except _Reject as rej:
            event_id = self._event_id(obj, kind)
            dl = dead_letter_json(
                rej.reason,
                raw,
                source_topic=source_topic,
                partition=partition,
                offset=offset,
                key=key,
                received_at_ms=received_at_ms,
                event_id=event_id,
                detail=rej.detail,
                offending_paths=rej.paths,
                payload=self.redactor.payload(kind, obj) if rej.reason in PAYLOAD_REASONS else None,
            )
            # Rejected(dl, dl["event_id"]), without the frozen dataclass's checked attribute writes
            rejected = _object_new(Rejected)
            _set_rejected_value(rejected, dl)
            _set_rejected_event_id(rejected, dl["event_id"])
            return rejected
        # Admitted(record, len(raw)), without the frozen dataclass's checked attribute writes
        admitted = _object_new(Admitted)
        _set_admitted_record(admitted, record)
        _set_admitted_size(admitted, len(raw))
        _set_admitted_json(admitted, None)
        return admitted

    # ----------------------------------------------------------------------------------------

    @staticmethod
    def _event_id(obj: Any, kind: str) -> str | None:
        if type(obj) is not dict:
            return None
        value = obj.get("experience_id") if kind == "plans" else obj.get("event_id")
        return value if _is_id(value) else None

    @staticmethod
    def _key_matches(key: bytes | str | None, device_id: str) -> bool:
        if key is None:
            return False
        if type(key) is str:
            return key == device_id
        return key == device_id.encode()

    def _generic(
        self,
        model: type[TaskEvent] | type[ExperiencePlan] | type[DeviceContext],
        obj: dict[str, Any],
        key: Any,
        raw: bytes,
    ) -> Any:
        clean = self._hostile(obj, raw, self._safe_keys)
        paths = [] if clean else forbidden_key_paths(obj, self._safe_keys)
        if paths:
            raise _Reject("privacy_violation", "forbidden key at " + _paths_text(paths), paths)
        try:
            record = model.model_validate(obj)
        except ValidationError as exc:
            raise _Reject("schema_invalid", _validation_detail(exc), _validation_paths(exc)) from None
        if not self._key_matches(key, record.device_id):
            raise _Reject("key_mismatch", "device_id differs from the record key", ["device_id"])
        return record

    def _observation(self, obj: dict[str, Any], key: Any, raw: bytes) -> Observation:
        fast = self._fast_observation(obj, key)
        if fast is None:
            return self._checked_observation(obj, key, self._hostile(obj, raw, self._safe_keys))
        # flat by construction: the top level, the facts and the correlation hold every key
        keys = len(obj) + len(fast.facts) + (3 if fast.correlation is not None else 0)
        if raw.count(b":") != keys:
            # IDs may hold colons: count them too (the keys of the fast path hold none)
            corr = obj.get("correlation")
            strings = [*obj.values(), *fast.facts.values(), *(corr.values() if corr else ())]
            colons = sum(v.count(":") for v in strings if type(v) is str)
            if needs_exact_scan(raw, keys, colons) and exact_scan(raw) == "duplicate_key":
                raise _Reject("not_json", "a key is repeated within one object")
        return fast

    @staticmethod
    def _hostile(obj: dict[str, Any], raw: bytes, safe: frozenset[str]) -> bool:
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
                raise _Reject("not_json", "a key is repeated within one object")
        if shape.depth > MAX_DEPTH or found == "too_deep":
            detail = f"nesting deeper than {MAX_DEPTH} levels"
        elif found == "big_int":
            detail = "an integer outside the signed 64-bit range"
        else:
            return shape.clean
        paths = forbidden_key_paths(obj)
        if paths:
            raise _Reject("privacy_violation", "forbidden key at " + _paths_text(paths), paths)
        raise _Reject("schema_invalid", detail)

    def _is_known_id(self, value: str) -> bool:
        """``value`` (a str) matches the ID pattern; remembered in ``_known_ids`` if so."""
        if _ID_FULLMATCH(value) is None:
            return False
        known = self._known_ids
        if len(known) >= _KNOWN_IDS_MAX:
            known.clear()
        known.add(value)
        return True

    def _fast_observation(self, obj: dict[str, Any], key: Any) -> Observation | None:
        """The common case in one pass: an observation whose every top-level field is known and
        well typed, whose correlation is three IDs and whose facts are allowlisted scalars has no
        forbidden key anywhere and passes steps 2–4. Returns None on the first doubt; the ordered
        checks of :meth:`_checked_observation` then find the reason."""
        if not obj.keys() <= _OBS_FIELDS:
            return None
        get = obj.get
        fullmatch = _ID_FULLMATCH
        known = self._known_ids
        event_id: Any = get("event_id")
        device_id: Any = get("device_id")
        ctype: Any = get("type")
        source: Any = get("source")
        observed_at_ms: Any = get("observed_at_ms")
        freshness_ms: Any = get("freshness_ms")
        facts: Any = get("facts")
        ttl: Any = get("ttl_ms")
        rcd: Any = get("requires_cloud_decision", False)
        if not (
            get("privacy_class") == "semantic_only"
            and type(event_id) is str
            and fullmatch(event_id) is not None
            and type(device_id) is str
            and (device_id in known or self._is_known_id(device_id))
            and type(ctype) is str
            and type(source) is str
            and 0 < len(source) <= 256
            and type(observed_at_ms) is int
            and 0 <= observed_at_ms <= INT64_MAX
            and type(freshness_ms) is int
            and 0 <= freshness_ms <= INT64_MAX
            and type(facts) is dict
            and (ttl is None or (type(ttl) is int and 0 <= ttl <= INT64_MAX))
            and type(rcd) is bool
        ):
            return None
        check = self._checks.get(ctype)
        if check is None or not facts.keys() <= check.safe_allowed:
            return None
        if not (key == device_id if type(key) is str else key == device_id.encode()):
            return None
        conf: Any = get("confidence")
        if conf is not None:
            tc = type(conf)
            if (tc is float or tc is int) and 0.0 <= conf <= 1.0:
                conf = float(conf)
            else:
                return None
        corr: Any = get("correlation")
        correlation: Correlation | None = None
        if corr is not None:
            if not (
                type(corr) is dict
                and len(corr) == 3
                and type(ce := corr.get("experience_id")) is str
                and type(cw := corr.get("workflow_id")) is str
                and type(cs := corr.get("step_id")) is str
            ):
                return None
            ids = (ce, cw, cs)
            correlation = self._correlations.get(ids)
            if correlation is None:
                if not (
                    (ce in known or self._is_known_id(ce))
                    and (cw in known or self._is_known_id(cw))
                    and (cs in known or self._is_known_id(cs))
                ):
                    return None
                correlation = _build(
                    Correlation,
                    {"experience_id": ce, "workflow_id": cw, "step_id": cs},
                    {"experience_id", "workflow_id", "step_id"},
                )
                if len(self._correlations) >= _CORRELATIONS_MAX:
                    self._correlations.clear()
                self._correlations[ids] = correlation
        if not check.required_all <= facts.keys():
            return None
        for any_of in check.any_of:
            if facts.keys().isdisjoint(any_of):
                return None
        known_str = check.known_str
        for k, v in facts.items():
            if type(v) is str:
                if v in known_str[k]:
                    continue
                spec = check.facts[k]
                if spec.enum is not None or not spec.allows(v):
                    return None  # (an enum's values are all known)
                learned = known_str[k]
                assert type(learned) is set  # a str fact without an enum: values learned
                if len(learned) >= _KNOWN_VALUES_MAX:
                    learned.clear()
                learned.add(v)
            elif not check.facts[k].allows(v) or (type(v) is int and not INT64_MIN <= v <= INT64_MAX):
                return None
        return _observation(
            obj, event_id, device_id, ctype, source, observed_at_ms, freshness_ms, ttl, conf, rcd,
            correlation, facts,
        )  # fmt: skip

    def _checked_observation(self, obj: dict[str, Any], key: Any, clean: bool) -> Observation:
        """§4.3 steps 2–4 in order, finding the reason and the paths of a rejection. ``clean``: no
        forbidden key is in ``obj`` (from :meth:`_hostile`'s walk)."""
        # Step 2: privacy. The quick check only proves cleanliness; paths are found when needed.
        get = obj.get
        ctype: Any = get("type")
        facts: Any = get("facts")
        privacy_class: Any = get("privacy_class", "semantic_only")
        check = self._checks.get(ctype) if type(ctype) is str else None
        if (
            not clean
            or privacy_class != "semantic_only"
            or (check is not None and type(facts) is dict and not facts.keys() <= check.allowed)
        ):
            raise self._privacy_reject(obj, ctype, facts, privacy_class, check, self._safe_keys)

        # Step 3: schema, then key, then contract.
        event_id: Any = get("event_id")
        device_id: Any = get("device_id")
        source: Any = get("source")
        observed_at_ms = get("observed_at_ms")
        freshness_ms = get("freshness_ms")
        ttl = get("ttl_ms")
        conf = get("confidence")
        rcd = get("requires_cloud_decision", False)
        corr = get("correlation")
        fullmatch = _ID_FULLMATCH
        ok = (
            type(event_id) is str
            and fullmatch(event_id) is not None
            and type(device_id) is str
            and fullmatch(device_id) is not None
            and type(ctype) is str
            and fullmatch(ctype) is not None
            and type(source) is str
            and 0 < len(source) <= 256
            and type(observed_at_ms) is int
            and observed_at_ms >= 0
            and type(freshness_ms) is int
            and freshness_ms >= 0
            and type(facts) is dict
            and "privacy_class" in obj
            and obj.keys() <= _OBS_FIELDS
            and (ttl is None or (type(ttl) is int and ttl >= 0))
            and type(rcd) is bool
        )
        if ok and conf is not None:
            tc = type(conf)
            if (tc is float or tc is int) and 0.0 <= conf <= 1.0:
                conf = float(conf)
            else:
                ok = False
        correlation: Correlation | None = None
        if ok and corr is not None:
            if (
                type(corr) is dict
                and len(corr) == 3
                and type(ce := corr.get("experience_id")) is str
                and fullmatch(ce) is not None
                and type(cw := corr.get("workflow_id")) is str
                and fullmatch(cw) is not None
                and type(cs := corr.get("step_id")) is str
                and fullmatch(cs) is not None
            ):
                correlation = _build(
                    Correlation,
                    {"experience_id": ce, "workflow_id": cw, "step_id": cs},
                    set(_CORRELATION_FIELDS),
                )
            else:
                ok = False
        if not ok:
            bad = _observation_schema_paths(obj)
            raise _Reject("schema_invalid", "schema: missing, mistyped or unknown " + _paths_text(bad), bad)
        if not self._key_matches(key, device_id):
            raise _Reject("key_mismatch", "device_id differs from the record key", ["device_id"])
        if check is None:
            raise _Reject("unknown_contract", "type is not a registry contract", ["type"])

        # Step 4: fact values and required facts.
        specs = check.facts
        valid = check.required_all <= facts.keys()
        if valid:
            for any_of in check.any_of:
                if facts.keys().isdisjoint(any_of):
                    valid = False
        if valid:
            for k, v in facts.items():
                spec = specs[k]
                enum = spec.enum
                if enum is not None and type(v) is str:
                    if v not in enum:
                        valid = False
                        break
                elif not spec.allows(v):
                    valid = False
                    break
        if not valid:
            invalid = [f"facts.{safe_key(k)}" for k, v in facts.items() if not specs[k].allows(v)]
            for group in check.required:
                if not any(name in facts for name in group):
                    invalid.extend(f"facts.{name}" for name in group)
            raise _Reject(
                "fact_invalid",
                "fact value of wrong type, enum, range or length, or a missing required fact, at "
                + _paths_text(invalid),
                invalid,
            )
        return _observation(
            obj, event_id, device_id, ctype, source, observed_at_ms, freshness_ms, ttl, conf, rcd,
            correlation, facts,
        )  # fmt: skip

    @staticmethod
    def _privacy_reject(
        obj: dict[str, Any],
        ctype: Any,
        facts: Any,
        privacy_class: Any,
        check: _ContractCheck | None,
        safe: frozenset[str],
    ) -> _Reject:
        paths = forbidden_key_paths(obj, safe)
        parts = []
        if paths:
            parts.append("forbidden key at " + _paths_text(paths))
        if privacy_class != "semantic_only":
            parts.append("privacy_class is not semantic_only")
            paths.append("privacy_class")
        if check is not None and type(facts) is dict:
            outside = [
                f"facts.{safe_key(k)}"
                for k in facts
                if k not in check.allowed and f"facts.{safe_key(k)}" not in paths
            ]
            if outside:
                parts.append(f"fact not in the {ctype} allowlist at " + _paths_text(outside))
                paths.extend(outside)
        return _Reject("privacy_violation", "; ".join(parts), paths)


def _observation_schema_paths(obj: dict[str, Any]) -> list[str]:
    """The paths of every schema problem of an observation (the slow path of the gate)."""
    bad = sorted(safe_key(k) for k in obj if k not in _OBS_FIELDS)
    bad.extend(name for name in _OBS_REQUIRED if name not in obj)

    def check(name: str, ok: bool) -> None:
        if name in obj and not ok:
            bad.append(name)

    get = obj.get
    source, oam, fresh, ttl = get("source"), get("observed_at_ms"), get("freshness_ms"), get("ttl_ms")
    conf, corr = get("confidence"), get("correlation")
    check("event_id", _is_id(get("event_id")))
    check("device_id", _is_id(get("device_id")))
    check("type", _is_id(get("type")))
    check("source", type(source) is str and 0 < len(source) <= 256)
    check("observed_at_ms", type(oam) is int and oam >= 0)
    check("freshness_ms", type(fresh) is int and fresh >= 0)
    check("ttl_ms", ttl is None or (type(ttl) is int and ttl >= 0))
    check(
        "confidence",
        conf is None or (type(conf) in (int, float) and 0.0 <= conf <= 1.0),
    )
    check("requires_cloud_decision", type(get("requires_cloud_decision")) is bool)
    check("facts", type(get("facts")) is dict)
    if type(corr) is dict:
        bad.extend(f"correlation.{k}" for k in _CORRELATION_FIELDS if not _is_id(corr.get(k)))
        bad.extend(f"correlation.{safe_key(k)}" for k in corr if k not in _CORRELATION_SET)
    else:
        check("correlation", corr is None)
    return bad or ["(record)"]


__all__ = [
    "GATE_KINDS",
    "PAYLOAD_REASONS",
    "Admitted",
    "Gate",
    "GateKind",
    "Rejected",
    "context_data_problems",
    "dead_letter_json",
    "forbidden_key_paths",
    "make_dead_letter",
    "plan_problems",
]

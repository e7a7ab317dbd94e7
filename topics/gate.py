"""The gate: raw Kafka bytes in, a typed record or a typed rejection (a dead letter) out.

Every input record passes docs/CONTRACTS.md §4.3 steps 1–3 (size, JSON, privacy, schema, key); an
observation also passes step 4 (fact values), a plan §3's validation against the capability
catalog. :meth:`Gate.admit` never raises for any input bytes or key: a bad record becomes a
:class:`Rejected` carrying its :class:`~topics.records.DeadLetter` (§10), so a bad record never
stops its partition.

Observations take a hand-written fast path (orjson, one iterative pass over the keys, checks
equivalent to the pydantic model, then ``model_construct``); the other kinds are rare and use
``model_validate``.

This module owns :class:`Gate`, the entry point, and re-exports the public names of its parts:
the kinds and verdicts (:mod:`topics.gate_verdicts`), the checks shared by every kind
(:mod:`topics.gate_checks`), dead letters (:mod:`topics.gate_dead_letters`), plan validation
(:mod:`topics.gate_plans`) and the observation path (:mod:`topics.gate_observations`).
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from topics.context import MAX_CLOCK_SKEW_MS, data_problems, skewed_paths
from topics.gate_checks import (
    Reject,
    check_hostile,
    cut,
    forbidden_key_paths,
    is_id,
    key_matches,
    paths_text,
    validation_detail,
    validation_paths,
)
from topics.gate_contract_check import ContractCheck
from topics.gate_dead_letters import PAYLOAD_REASONS, dead_letter_json
from topics.gate_observations import CORRELATION_SET, OBS_FIELDS, ObservationChecks
from topics.gate_plans import MAX_PLAN_AREAS as MAX_PLAN_AREAS
from topics.gate_plans import plan_problems
from topics.gate_plans import printable as printable
from topics.gate_verdicts import GATE_KINDS, Admitted, GateKind, Rejected
from topics.hostile import Redactor, is_forbidden_key
from topics.kafka_key import key_problem
from topics.records import (
    MAX_RECORD_BYTES,
    Correlation,
    DeviceContext,
    ExperiencePlan,
    Observation,
    TaskEvent,
)
from topics.registry import Registry

_object_new = object.__new__


# an Admitted's and a Rejected's slots, for the gate's hot path (a frozen dataclass's __init__
# writes each one through object.__setattr__)
_set_admitted_record = Admitted.__dict__["record"].__set__
_set_admitted_size = Admitted.__dict__["size"].__set__
_set_admitted_json = Admitted.__dict__["json"].__set__
_set_rejected_value = Rejected.__dict__["value"].__set__
_set_rejected_event_id = Rejected.__dict__["event_id"].__set__


def context_data_problems(ctx: DeviceContext) -> list[str]:
    """The paths of every ``data`` key a domain does not list, or whose value is bad (§9.1)."""
    bad: list[str] = []
    for domain, env in ctx.domains.items():
        bad.extend(data_problems(domain, env.data))
    return bad


class Gate(ObservationChecks):
    """Admits or rejects raw input records against one :class:`~topics.registry.Registry`."""

    def __init__(self, registry: Registry) -> None:
        self._registry = registry
        self._checks = {cid: ContractCheck.of(spec) for cid, spec in registry.contracts.items()}
        facts = {name for spec in registry.contracts.values() for name in spec.facts}
        self.redactor = Redactor(facts, registry.arg_types)
        candidates = set(OBS_FIELDS) | CORRELATION_SET | facts
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
                raise Reject("key_invalid", bad_key)
            if len(raw) > MAX_RECORD_BYTES:
                raise Reject("too_large", f"record of {len(raw)} bytes is over {MAX_RECORD_BYTES}")
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                raise Reject("not_json", "not a UTF-8 JSON document") from None
            if type(obj) is not dict:
                obj = None
                raise Reject("not_json", "not a JSON object")
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
                    detail = "plan: " + "; ".join(f"{cut(p, 80)}: {msg}" for p, msg in problems[:6])
                    raise Reject("plan_invalid", detail, [p for p, _ in problems])
                return Admitted(record=plan, size=len(raw), json=plan_json)
            elif kind == "device-context":
                context: DeviceContext = self._generic(DeviceContext, obj, key, raw)
                bad = context_data_problems(context)
                if bad:
                    raise Reject(
                        "fact_invalid",
                        "device context: unlisted key or bad value at " + paths_text(bad),
                        bad,
                    )
                skewed = skewed_paths(context, received_at_ms)
                if skewed:
                    detail = f"observed more than {MAX_CLOCK_SKEW_MS} ms after the receive time at "
                    raise Reject("clock_skew", detail + paths_text(skewed), skewed)
                record = context
            else:
                raise Reject("schema_invalid", f"unknown input kind {kind!r}")
        except Reject as rej:
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
        return value if is_id(value) else None

    def _generic(
        self,
        model: type[TaskEvent] | type[ExperiencePlan] | type[DeviceContext],
        obj: dict[str, Any],
        key: Any,
        raw: bytes,
    ) -> Any:
        clean = check_hostile(obj, raw, self._safe_keys)
        paths = [] if clean else forbidden_key_paths(obj, self._safe_keys)
        if paths:
            raise Reject("privacy_violation", "forbidden key at " + paths_text(paths), paths)
        try:
            record = model.model_validate(obj)
        except ValidationError as exc:
            raise Reject("schema_invalid", validation_detail(exc), validation_paths(exc)) from None
        if not key_matches(key, record.device_id):
            raise Reject("key_mismatch", "device_id differs from the record key", ["device_id"])
        return record


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
    "plan_problems",
]

"""Recorded decisions in a replay (``--decisions recorded``, §12): matching them to triggers,
checking them like a model answer, and the divergences between them and the replay.

Every divergence names its device and experience, and a replay's divergences come grouped by
device (in a stable order: within a device, as the replay met them), so ``--jobs N``, which replays
each device in one job, writes the same ``divergences.jsonl`` as ``--jobs 1``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from supervisor import rules
from supervisor.checks import recorded_verdict
from supervisor.verdict import Verdict
from tables.state import ExperienceState, Trigger

#: the fields of a recorded decision compared with the replay's
COMPARED = ("decision", "reason_code", "backend", "state_etag", "budget_after")


class _Record(Protocol):
    @property
    def suffix(self) -> str: ...

    @property
    def value(self) -> bytes | None: ...


@dataclass
class RecordedDecisions:
    """Decisions found in the input, by trigger: (device_id, experience_id, trigger_event_id).
    Never by decision ID, whose formula may differ in an older export."""

    by_trigger: dict[tuple[str, str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_records(cls, records: Iterable[_Record]) -> RecordedDecisions:
        found = cls()
        for r in records:
            if r.suffix != "decisions" or r.value is None:
                continue
            try:
                d = orjson.loads(r.value)
            except orjson.JSONDecodeError:
                continue
            if isinstance(d, dict) and isinstance(d.get("experience_id"), str):
                found.by_trigger[
                    (str(d.get("device_id")), d["experience_id"], str(d.get("trigger_event_id")))
                ] = d
        return found


@dataclass
class RecordedDecider:
    """Reuses recorded decisions for the same triggers; the rules decide (and it is reported) otherwise."""

    recorded: RecordedDecisions
    #: (device_id, experience_id, trigger_event_id) of triggers the input has no decision for
    missing: list[tuple[str, str, str]] = field(default_factory=list)
    #: (device_id, experience_id, trigger_event_id, why) of recorded decisions the contract does
    #: not allow: the rules decided
    invalid: list[tuple[str, str, str, str]] = field(default_factory=list)

    def __call__(self, exp: ExperienceState, trigger: Trigger) -> Verdict:
        key = (exp.device_id, exp.experience_id, trigger.event_id)
        d = self.recorded.by_trigger.get(key)
        if d is None:
            self.missing.append(key)
            return rules.decide(exp, trigger)
        verdict = recorded_verdict(d, exp, trigger)
        if isinstance(verdict, str):
            self.invalid.append((*key, verdict))
            return rules.decide(exp, trigger)
        return verdict


def _entry(key: tuple[str, str, str], kind: str, **more: Any) -> dict[str, Any]:
    device_id, experience_id, trigger_event_id = key
    return {
        "device_id": device_id,
        "experience_id": experience_id,
        "trigger_event_id": trigger_event_id,
        "kind": kind,
        **more,
    }


def _divergences(recorded: RecordedDecisions, produced: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    seen: set[tuple[str, str, str]] = set()
    for d in produced:
        key = (d["device_id"], d["experience_id"], d["trigger_event_id"])
        seen.add(key)
        rec = recorded.by_trigger.get(key)
        if rec is None:
            continue
        for fld in COMPARED:
            if rec.get(fld) != d.get(fld):
                found.append(_entry(key, "different", field=fld, recorded=rec.get(fld), replayed=d.get(fld)))
    for key, rec in recorded.by_trigger.items():
        if key not in seen:
            found.append(_entry(key, "not_reproduced", recorded=rec.get("decision_id")))
    return found


def all_divergences(
    recorded: RecordedDecisions,
    recorded_decider: RecordedDecider | None,
    produced: Iterable[dict[str, Any]],
) -> list[dict[str, Any]]:
    """Every divergence of a replay (none unless recorded decisions were reused), by device."""
    if recorded_decider is None:
        return []
    divergences = _divergences(recorded, produced)
    for key in recorded_decider.missing:
        divergences.append(_entry(key, "no_recorded_decision"))
    for device_id, experience_id, event_id, why in recorded_decider.invalid:
        divergences.append(_entry((device_id, experience_id, event_id), "invalid_recorded_decision", why=why))
    divergences.sort(key=lambda d: str(d["device_id"]))  # stable: a device's in the order met
    return divergences


def decision_device(key: bytes | None, value: bytes | None) -> bytes | None:
    """The device a recorded decision belongs to (for --jobs): its ``device_id``, else its key."""
    if value is not None:
        with contextlib.suppress(orjson.JSONDecodeError):
            d = orjson.loads(value)
            if isinstance(d, dict) and isinstance(d.get("device_id"), str):
                return str(d["device_id"]).encode("utf-8")
    return key


def is_recorded_decision(value: bytes | None) -> bool:
    """Would :meth:`RecordedDecisions.from_records` keep this value (the default mode depends on it)."""
    if value is None:
        return False
    try:
        d = orjson.loads(value)
    except orjson.JSONDecodeError:
        return False
    return isinstance(d, dict) and isinstance(d.get("experience_id"), str)

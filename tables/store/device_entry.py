"""One device's whole state as one ``devices`` table value (:class:`DeviceEntry`), and the keys of
that table: a device's entry under its ``device_id``, an experience's plan under :func:`plan_key`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from tables.plan_parts import compact
from tables.state import DeviceState, ExperienceState

#: prefix of the ``devices`` keys holding plans (device IDs never start with a control character)
PLAN_PREFIX = b"\x1eplan\x1f"


def plan_key(experience_id: str) -> bytes:
    """The ``devices`` key of an experience's plan (written once, next to its device's entry)."""
    return PLAN_PREFIX + experience_id.encode()


def is_entry_key(key: bytes) -> bool:
    """A device's entry (not a plan, not faust's own bookkeeping)."""
    return not key.startswith(PLAN_PREFIX) and not key.startswith(b"__faust")


def devices_changelog_rank(key: bytes, value: object) -> int:
    """Where a write of the ``devices`` table goes in its changelog partition's records: a plan
    first, then the device entries (which name their plan), then the plans deleted (no entry names
    them any more). A worker killed while a flush's changelog records are on their way leaves a
    prefix of them: with this order every entry in it finds its plan (a device whose earlier record
    in the batch put its entry first once left an entry without its plan, and the worker recovering
    the table could not read that device's state)."""
    if not key.startswith(PLAN_PREFIX):
        return 1
    return 2 if value is None else 0


@dataclass
class DeviceEntry:
    """One device's whole state: written as ONE table value, so it lands atomically.

    The experience's plan (immutable, the largest part) is not in the value: it is written once
    under :func:`plan_key` in the same partition and the same flush, and read back on load."""

    device: DeviceState | None = None
    experience: ExperienceState | None = None
    #: "suffix:partition" -> the last offset applied to this state
    applied: dict[str, int] = field(default_factory=dict)
    #: outputs of the last records that had any and may still be read again (not committed yet):
    #: (coords, JSON of [[kind, key, value], ...]) — kept encoded: small in memory, written as is
    log: list[tuple[str, bytes]] = field(default_factory=list)
    #: the experience whose plan is stored under its own key (None: not written yet)
    plan_stored: str | None = None

    def to_json(self) -> bytes:
        exp = None
        if self.experience is not None:
            exp = self.experience.to_obj()
            exp["plan"] = None
        return orjson.dumps(
            {
                "d": self.device.to_obj() if self.device else None,
                "e": exp,
                "applied": self.applied,
                "log": [[coords, orjson.Fragment(outs)] for coords, outs in self.log],
            }
        )

    @classmethod
    def from_json(cls, raw: bytes, plan_of: Callable[[str], bytes | None] | None = None) -> DeviceEntry:
        """Decode a stored entry; ``plan_of`` reads a plan stored under its own key (without it,
        an experience whose plan is stored apart is left out)."""
        d = orjson.loads(raw)
        e = d.get("e")
        stored: str | None = None
        if e and e.get("plan") is None:
            stored = e["experience_id"]
            raw_plan = plan_of(stored) if plan_of is not None else None
            if raw_plan is None:
                if plan_of is not None:
                    raise KeyError(f"the plan of experience {stored} is missing from the devices table")
                e = None
            else:
                e["plan"] = orjson.loads(raw_plan)
        return cls(
            device=DeviceState.from_obj(d["d"]) if d.get("d") else None,
            experience=ExperienceState.from_obj(e) if e else None,
            applied=dict(d.get("applied") or {}),
            log=[(str(coords), compact(orjson.dumps(outs))) for coords, outs in d.get("log") or ()],
            plan_stored=stored,
        )


def plan_in(db: Any) -> Callable[[str], bytes | None]:
    """Reads a plan stored under its own key in the partition database ``db``."""

    def plan_of(experience_id: str) -> bytes | None:
        raw = db.get(plan_key(experience_id))
        return None if raw is None else bytes(raw)

    return plan_of

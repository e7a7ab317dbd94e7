"""Recorded decisions of ``guardian replay --decisions recorded`` (docs/CONTRACTS.md §12): read
bounded, kept on disk, matched by trigger, and every difference written as a divergence.

- Each ``decisions`` record of the input is read with the gate's depth-bounded parser
  (:func:`topics.bounded.parse_bounded`): a record that is not a JSON object, nests deeper than
  16 levels, repeats a key, or whose ``device_id``, ``experience_id`` or ``trigger_event_id`` is
  not an ID is *unreadable*: it is never matched, and in ``recorded`` mode it is a divergence of
  kind ``unreadable_recorded_decision`` that names where it is (topic, partition, offset) and why,
  never what it holds.
- The readable ones are kept in an SQLite file in the replay's temporary folder (or in memory
  for :func:`guardian.replay.replay_records`), keyed by (device_id, experience_id,
  trigger_event_id) — never by decision ID, whose formula may differ in an older export; a later
  record for the same trigger replaces an earlier one. Triggers the rules had to decide are
  noted there too, so a replay holds none of this in memory, however many decisions it reads.
- Every divergence names its device and experience (``device_id``, ``experience_id``; both null
  for an unreadable record, whose content is not trusted), and a replay's divergences come
  grouped by device, in device-ID order, unreadable records last (by where they are): within a
  device as the replay met them (``different``, then ``not_reproduced``, ``no_recorded_decision``
  and ``invalid_recorded_decision``). The grouping is sorted on disk too (:meth:`divergences`);
  ``--jobs N``, which replays each device in one job, merges its jobs' files by
  :func:`divergence_order` into the same ``divergences.jsonl`` as ``--jobs 1``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import orjson

from supervisor import rules
from supervisor.checks import recorded_verdict
from supervisor.verdict import Verdict
from tables.state import ExperienceState, Trigger
from topics.bounded import parse_bounded
from topics.records import ID_PATTERN

_ID: Final = re.compile(ID_PATTERN)
#: the fields of a recorded decision that name its trigger
KEY_FIELDS: Final = ("device_id", "experience_id", "trigger_event_id")
#: the fields a divergence of kind ``different`` compares
COMPARED: Final = ("decision", "reason_code", "backend", "state_etag", "budget_after")
UNREADABLE: Final = "unreadable_recorded_decision"
#: the order of a device's divergences (unreadable records, of no known device, come last)
_PHASES: Final = (
    "different",
    "not_reproduced",
    "no_recorded_decision",
    "invalid_recorded_decision",
    UNREADABLE,
)

Key = tuple[str, str, str]


def read_recorded(value: bytes | None) -> dict[str, Any] | str:
    """The recorded decision ``value`` holds, or why it is unreadable (never its content)."""
    parsed = parse_bounded(value)
    if isinstance(parsed, str):
        return parsed
    for name in KEY_FIELDS:
        field = parsed.get(name)
        if type(field) is not str or _ID.fullmatch(field) is None:
            return f"{name} is not an ID"
    return parsed


def decision_device(key: bytes | None, value: bytes | None) -> tuple[bytes | None, dict[str, Any] | str]:
    """The device a recorded decision belongs to (for ``--jobs``: its ``device_id``, else the
    record's key) and the decision read (or why it is unreadable)."""
    read = read_recorded(value)
    if isinstance(read, dict):
        return str(read["device_id"]).encode("utf-8"), read
    return key, read


class RecordedDecisions:
    """The recorded decisions of one replay (or one ``--jobs`` share), in an SQLite file."""

    def __init__(self, path: Path | str = ":memory:") -> None:
        self.path = path
        self._db = sqlite3.connect(str(path))
        self._db.executescript(
            "CREATE TABLE IF NOT EXISTS recorded (device TEXT, experience TEXT, trigger TEXT, "
            "value BLOB, used INTEGER DEFAULT 0, PRIMARY KEY (device, experience, trigger));"
            # the divergences, kept until the end to come out grouped by device (``_PHASES``)
            "CREATE TABLE IF NOT EXISTS found (seq INTEGER PRIMARY KEY, device TEXT, phase INTEGER, "
            "topic TEXT, part INTEGER, off INTEGER, body BLOB);"
        )

    def close(self) -> None:
        self._db.commit()
        self._db.close()

    def __enter__(self) -> RecordedDecisions:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- filling ------------------------------------------------------------------------------

    def add(self, read: dict[str, Any] | str, topic: str, partition: int, offset: int) -> None:
        """Keep one ``decisions`` record as :func:`read_recorded` read it."""
        if isinstance(read, str):
            body = {
                "device_id": None,
                "experience_id": None,
                "trigger_event_id": None,
                "kind": UNREADABLE,
                "why": read,
                "source_topic": topic,
                "partition": partition,
                "offset": offset,
            }
            self._db.execute(
                "INSERT INTO found (device, phase, topic, part, off, body) VALUES (NULL, ?, ?, ?, ?, ?)",
                (_PHASES.index(UNREADABLE), topic, partition, offset, orjson.dumps(body)),
            )
            return
        self._db.execute(
            "INSERT INTO recorded (device, experience, trigger, value) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (device, experience, trigger) DO UPDATE SET value = excluded.value",
            (*(read[name] for name in KEY_FIELDS), orjson.dumps(read)),
        )

    def add_value(self, value: bytes | None, topic: str, partition: int, offset: int) -> bool:
        """Read and keep one ``decisions`` record; whether it was readable."""
        read = read_recorded(value)
        self.add(read, topic, partition, offset)
        return isinstance(read, dict)

    def note(self, key: Key, kind: str, **more: Any) -> None:
        """Keep a divergence of the trigger ``key`` (``_PHASES``), for the end."""
        self._db.execute(
            "INSERT INTO found (device, phase, body) VALUES (?, ?, ?)",
            (key[0], _PHASES.index(kind), orjson.dumps(_entry(key, kind, **more))),
        )

    # -- matching -----------------------------------------------------------------------------

    def readable(self) -> int:
        """How many triggers have a readable recorded decision."""
        row = self._db.execute("SELECT count(*) FROM recorded").fetchone()
        return int(row[0])

    def get(self, key: Key) -> dict[str, Any] | None:
        row = self._db.execute(
            "SELECT value FROM recorded WHERE device = ? AND experience = ? AND trigger = ?", key
        ).fetchone()
        if row is None:
            return None
        value: dict[str, Any] = orjson.loads(row[0])
        return value

    def divergences(self, produced: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Every divergence, streamed from disk, grouped by device (see the module docstring): a
        replayed decision that differs from the recorded one (``different``, per field), recorded
        decisions the replay did not take (``not_reproduced``), then what was noted while deciding
        and reading."""
        for d in produced:
            key = (d["device_id"], d["experience_id"], d["trigger_event_id"])
            rec = self.get(key)
            if rec is None:
                continue
            self._db.execute(
                "UPDATE recorded SET used = 1 WHERE device = ? AND experience = ? AND trigger = ?", key
            )
            for fld in COMPARED:
                if rec.get(fld) != d.get(fld):
                    self.note(key, "different", field=fld, recorded=rec.get(fld), replayed=d.get(fld))
        unused = self._db.execute(
            "SELECT device, experience, trigger, value FROM recorded WHERE used = 0 ORDER BY rowid"
        ).fetchall()  # (not while inserting into the same database)
        for device, experience, trigger, value in unused:
            decision_id = orjson.loads(value).get("decision_id")
            shown = decision_id if type(decision_id) is str and _ID.fullmatch(decision_id) else None
            self.note((device, experience, trigger), "not_reproduced", recorded=shown)
        found = self._db.execute(
            "SELECT body FROM found ORDER BY device IS NULL, device, phase, topic, part, off, "
            "CASE WHEN device IS NULL THEN body END, seq"
        )
        for (body,) in found:
            yield orjson.loads(body)


def divergence_order(line: bytes) -> tuple[int, str, str, int, int, bytes]:
    """Where a written divergence (a ``divergences.jsonl`` line) stands in the grouping of
    :meth:`RecordedDecisions.divergences`: a device's divergences all tie (one job writes them all,
    in order), unreadable records' sort by where they are."""
    d = orjson.loads(line)
    device = d.get("device_id")
    if isinstance(device, str):
        return (0, device, "", 0, 0, b"")
    return (1, "", str(d.get("source_topic")), int(d.get("partition") or 0), int(d.get("offset") or 0), line)


def _entry(key: Key, kind: str, **more: Any) -> dict[str, Any]:
    device_id, experience_id, trigger_event_id = key
    return {
        "device_id": device_id,
        "experience_id": experience_id,
        "trigger_event_id": trigger_event_id,
        "kind": kind,
        **more,
    }


class RecordedDecider:
    """Reuses recorded decisions for the same triggers; the rules decide (and it is noted as a
    divergence) when there is none, or when the recorded one is not one the contract allows."""

    def __init__(self, recorded: RecordedDecisions) -> None:
        self.recorded = recorded

    def __call__(self, exp: ExperienceState, trigger: Trigger) -> Verdict:
        key = (exp.device_id, exp.experience_id, trigger.event_id)
        d = self.recorded.get(key)
        if d is None:
            self.recorded.note(key, "no_recorded_decision")
            return rules.decide(exp, trigger)
        verdict = recorded_verdict(d, exp, trigger)
        if isinstance(verdict, str):
            self.recorded.note(key, "invalid_recorded_decision", why=verdict)
            return rules.decide(exp, trigger)
        return verdict


__all__ = [
    "UNREADABLE",
    "RecordedDecider",
    "RecordedDecisions",
    "decision_device",
    "divergence_order",
    "read_recorded",
]

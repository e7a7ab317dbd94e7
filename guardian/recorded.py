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
#: the order of the divergences noted while deciding (after ``different`` and ``not_reproduced``)
_NOTE_KINDS: Final = ("no_recorded_decision", "invalid_recorded_decision", UNREADABLE)

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
            "CREATE TABLE IF NOT EXISTS notes (seq INTEGER PRIMARY KEY, kind INTEGER, body BLOB);"
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
            self.note(
                UNREADABLE,
                {
                    "trigger_event_id": None,
                    "kind": UNREADABLE,
                    "why": read,
                    "source_topic": topic,
                    "partition": partition,
                    "offset": offset,
                },
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

    def note(self, kind: str, body: dict[str, Any]) -> None:
        """Keep a divergence found while deciding or reading (``_NOTE_KINDS``), for the end."""
        self._db.execute(
            "INSERT INTO notes (kind, body) VALUES (?, ?)", (_NOTE_KINDS.index(kind), orjson.dumps(body))
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
        """Every divergence, streamed: a replayed decision that differs from the recorded one
        (``different``, per field), recorded decisions the replay did not take
        (``not_reproduced``), then what was noted while deciding and reading."""
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
                    yield {
                        "trigger_event_id": d["trigger_event_id"],
                        "kind": "different",
                        "field": fld,
                        "recorded": rec.get(fld),
                        "replayed": d.get(fld),
                    }
        unused = self._db.execute("SELECT trigger, value FROM recorded WHERE used = 0 ORDER BY rowid")
        for trigger, value in unused:
            decision_id = orjson.loads(value).get("decision_id")
            yield {
                "trigger_event_id": trigger,
                "kind": "not_reproduced",
                "recorded": decision_id if type(decision_id) is str and _ID.fullmatch(decision_id) else None,
            }
        for (body,) in self._db.execute("SELECT body FROM notes ORDER BY kind, seq"):
            yield orjson.loads(body)


class RecordedDecider:
    """Reuses recorded decisions for the same triggers; the rules decide (and it is noted as a
    divergence) when there is none, or when the recorded one is not one the contract allows."""

    def __init__(self, recorded: RecordedDecisions) -> None:
        self.recorded = recorded

    def __call__(self, exp: ExperienceState, trigger: Trigger) -> Verdict:
        d = self.recorded.get((exp.device_id, exp.experience_id, trigger.event_id))
        if d is None:
            self.recorded.note(
                "no_recorded_decision", {"trigger_event_id": trigger.event_id, "kind": "no_recorded_decision"}
            )
            return rules.decide(exp, trigger)
        verdict = recorded_verdict(d, exp, trigger)
        if isinstance(verdict, str):
            self.recorded.note(
                "invalid_recorded_decision",
                {"trigger_event_id": trigger.event_id, "kind": "invalid_recorded_decision", "why": verdict},
            )
            return rules.decide(exp, trigger)
        return verdict


__all__ = ["UNREADABLE", "RecordedDecider", "RecordedDecisions", "decision_device", "read_recorded"]

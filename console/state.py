"""The console's state: output records in, a bounded view model out (no I/O, no wall clock).

Each record read from an output topic (decisions, dispatch, timeline, deadletter) is checked
against its contract model (docs/CONTRACTS.md §6-§8, §10); one that does not validate is counted
by topic and problem and never held. A valid record goes to its lane: an experience (``e:ID``) or a
device's records outside any experience (``d:ID``). A dead letter goes to its device (its key, when
that is an ID), whose held experiences it may belong to (the report places it by time).

Memory is bounded: at most ``max_lanes`` lanes (least recently updated evicted first) and, per
lane, the last ``records_per_lane`` records (older ones counted as evicted); per device the last
``DEAD_PER_DEVICE`` dead letters; recent drops and dead letters in per-minute buckets for the
last ``WINDOW_MINUTES`` minutes of record time.

Changes are merged: :meth:`ConsoleState.flush` turns every lane touched since the last flush into
one new version (a sequence number), however many records touched it. A page that resumes from
sequence ``n`` gets every lane whose version is past ``n`` and every lane removed since.
"""

from __future__ import annotations

import re
from collections import Counter, OrderedDict, deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from pydantic import BaseModel, ValidationError

from report.safe import shown_id
from topics.records import ID_PATTERN, DeadLetter, Decision, Dispatch, TimelineEntry

#: the output topics by suffix, with the model each record must validate against
KINDS: Final[dict[str, type[BaseModel]]] = {
    "timeline": TimelineEntry,
    "decisions": Decision,
    "dispatch": Dispatch,
    "deadletter": DeadLetter,
}
MAX_LANES_DEFAULT: Final = 1000
RECORDS_PER_LANE_DEFAULT: Final = 300
DEAD_PER_DEVICE: Final = 50
WINDOW_MINUTES: Final = 5
#: removals remembered for resuming pages (older resumes get a full snapshot)
REMOVALS_KEPT: Final = 10_000
_MINUTE_MS: Final = 60_000
_ID: Final = re.compile(ID_PATTERN)


@dataclass(frozen=True)
class Held:
    """One record as read from its topic: what a kcat ``-J`` line needs."""

    kind: str
    partition: int
    offset: int
    ts: int
    key: bytes | None
    value: bytes

    @property
    def record(self) -> dict[str, Any]:
        """The parsed value (parsed again on each use: a held record keeps only its bytes)."""
        parsed: dict[str, Any] = orjson.loads(self.value)
        return parsed


@dataclass
class LaneState:
    key: str
    experience_id: str
    device_id: str
    records: deque[Held]
    partition: int = -1
    status: str = "active"
    last_ms: int = 0
    #: the experience's span in record time (first timeline entry, end entry): its dead letters
    first_at: int | None = None
    end_at: int | None = None
    evicted: int = 0
    version: int = 0
    decisions: set[str] = field(default_factory=set)
    backends: set[str] = field(default_factory=set)
    drops: set[str] = field(default_factory=set)
    dead: set[str] = field(default_factory=set)

    def holds(self, at: int) -> bool:
        """Whether ``at`` is within the experience's span (an experience not ended yet holds the rest)."""
        if not self.experience_id or self.first_at is None or at < self.first_at:
            return False
        return self.end_at is None or at <= self.end_at

    def summary(self) -> dict[str, Any]:
        """The lane's row in the experience list (plain values; the page sets them as text)."""
        return {
            "key": self.key,
            "experience": self.experience_id,
            "device": self.device_id,
            "status": self.status if self.experience_id else "unscoped",
            "partition": self.partition,
            "last_ms": self.last_ms,
            "records": len(self.records),
            "evicted": self.evicted,
            "version": self.version,
            "decisions": sorted(self.decisions),
            "backends": sorted(self.backends),
            "drops": sorted(self.drops),
            "dead": sorted(self.dead),
        }


def _id_or_empty(value: object) -> str:
    text = value if isinstance(value, str) else ""
    return text if shown_id(text) == text else ""


def problem_of(kind: str, value: bytes | None) -> tuple[dict[str, Any] | None, str]:
    """The record parsed, or None and why it is refused (``not_json``, ``not_object``,
    ``invalid``, ``unknown_topic``)."""
    model = KINDS.get(kind)
    if model is None:
        return None, "unknown_topic"
    if value is None:
        return None, "not_json"
    try:
        parsed = orjson.loads(value)
    except orjson.JSONDecodeError:
        return None, "not_json"
    if not isinstance(parsed, dict):
        return None, "not_object"
    try:
        model.model_validate(parsed)
    except (ValidationError, ValueError):
        return None, "invalid"
    return parsed, ""


@dataclass
class ConsoleState:
    """Records in, lanes and counts out (see the module docstring)."""

    max_lanes: int = MAX_LANES_DEFAULT
    records_per_lane: int = RECORDS_PER_LANE_DEFAULT
    lanes: OrderedDict[str, LaneState] = field(default_factory=OrderedDict)
    dead_by_device: OrderedDict[str, deque[Held]] = field(default_factory=OrderedDict)
    #: experiences of a device that are held (for placing its dead letters)
    device_lanes: dict[str, set[str]] = field(default_factory=dict)
    seq: int = 0
    dirty: set[str] = field(default_factory=set)
    removed: deque[tuple[int, str]] = field(default_factory=lambda: deque(maxlen=REMOVALS_KEPT))
    bad: Counter[str] = field(default_factory=Counter)
    decisions: Counter[str] = field(default_factory=Counter)
    backends: Counter[str] = field(default_factory=Counter)
    #: minute (record time) -> counts of drop reasons / dead-letter reasons
    drops_by_minute: dict[int, Counter[str]] = field(default_factory=dict)
    dead_by_minute: dict[int, Counter[str]] = field(default_factory=dict)
    newest_ms: int = 0
    records_seen: int = 0
    evicted_lanes: int = 0

    # ------------------------------------------------------------------ records in

    def add(
        self, kind: str, partition: int, offset: int, ts: int, key: bytes | None, value: bytes | None
    ) -> bool:
        """Take one record of the ``kind`` output topic; False when it is refused (and counted)."""
        self.records_seen += 1
        record, problem = problem_of(kind, value)
        if record is None or value is None:
            self.bad[f"{kind}: {problem}"] += 1
            return False
        held = Held(kind, partition, offset, ts, key, value)
        self.newest_ms = max(self.newest_ms, ts)
        minute = ts // _MINUTE_MS
        if kind == "deadletter":
            self._dead_letter(held, record, minute)
            return True
        device = _id_or_empty(record.get("device_id"))
        experience = _id_or_empty(record.get("experience_id"))
        lane = self._lane(f"e:{experience}" if experience else f"d:{device}", experience, device)
        lane.partition = partition
        lane.last_ms = max(lane.last_ms, ts)
        if len(lane.records) == lane.records.maxlen:
            lane.evicted += 1
        lane.records.append(held)
        if kind == "timeline":
            at = record.get("at_ms")
            span = (lane.first_at, lane.end_at)
            if isinstance(at, int):
                lane.first_at = at if lane.first_at is None else min(lane.first_at, at)
            if record.get("stage") == "end" and isinstance(record.get("status"), str):
                lane.status = record["status"]
                lane.end_at = at if isinstance(at, int) else lane.end_at
            if (lane.first_at, lane.end_at) != span and device in self.dead_by_device:
                self._place_dead_again(device)
            if record.get("stage") == "drop" and isinstance(record.get("drop_reason"), str):
                lane.drops.add(record["drop_reason"])
                self._window(self.drops_by_minute, minute)[record["drop_reason"]] += 1
        elif kind == "decisions":
            lane.decisions.add(str(record.get("decision")))
            lane.backends.add(str(record.get("backend")))
            self.decisions[str(record.get("decision"))] += 1
            self.backends[str(record.get("backend"))] += 1
        return True

    def _window(self, buckets: dict[int, Counter[str]], minute: int) -> Counter[str]:
        oldest = self.newest_ms // _MINUTE_MS - WINDOW_MINUTES + 1
        for old in [m for m in buckets if m < oldest]:
            del buckets[old]
        return buckets.setdefault(minute, Counter()) if minute >= oldest else Counter()

    def _lane(self, key: str, experience: str, device: str) -> LaneState:
        lane = self.lanes.get(key)
        if lane is None:
            lane = LaneState(key, experience, device, deque(maxlen=self.records_per_lane))
            self.lanes[key] = lane
            if device:
                self.device_lanes.setdefault(device, set()).add(key)
            while len(self.lanes) > self.max_lanes:
                self._evict(next(iter(self.lanes)))
        else:
            self.lanes.move_to_end(key)
        self.dirty.add(key)
        return lane

    def _evict(self, key: str) -> None:
        lane = self.lanes.pop(key)
        self.dirty.discard(key)
        self.evicted_lanes += 1
        self.seq += 1
        self.removed.append((self.seq, key))
        keys = self.device_lanes.get(lane.device_id)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.device_lanes[lane.device_id]
                self.dead_by_device.pop(lane.device_id, None)

    def _dead_letter(self, held: Held, record: dict[str, Any], minute: int) -> None:
        reason = str(record.get("reason_code"))
        self._window(self.dead_by_minute, minute)[reason] += 1
        device = _id_or_empty(record.get("key"))
        at = record.get("received_at_ms")
        # as the report places it: in the held experiences of its device whose span holds it
        lane_keys = {
            key
            for key in (self.device_lanes.get(device, set()) if device else set())
            if isinstance(at, int) and self.lanes[key].holds(at)
        }
        if not lane_keys:
            # else the device's own lane (or the unnamed keys' lane)
            lane = self._lane(f"d:{device}", "", device)
            lane_keys = {lane.key}
        box = self.dead_by_device.setdefault(device, deque(maxlen=DEAD_PER_DEVICE))
        self.dead_by_device.move_to_end(device)
        box.append(held)
        for key in lane_keys:
            lane = self.lanes[key]
            lane.dead.add(reason)
            lane.last_ms = max(lane.last_ms, held.ts)
            if lane.partition < 0:
                lane.partition = held.partition
            self.dirty.add(key)

    def _place_dead_again(self, device: str) -> None:
        """An experience's span changed: the device's held dead letters are placed again, so that
        where one stands does not depend on which topic the console read first (a dead letter read
        before its experience's timeline, or before its end, lands where the report places it)."""
        letters = [(h, h.record) for h in self.dead_by_device.get(device, ())]
        times = [(h, r.get("received_at_ms"), str(r.get("reason_code"))) for h, r in letters]
        experiences = [
            self.lanes[k] for k in self.device_lanes.get(device, set()) if self.lanes[k].experience_id
        ]
        outside: set[str] = set()
        for _, at, reason in times:
            if not any(isinstance(at, int) and lane.holds(at) for lane in experiences):
                outside.add(reason)
        for lane in experiences:
            dead = {reason for _, at, reason in times if isinstance(at, int) and lane.holds(at)}
            if dead != lane.dead:
                lane.dead = dead
                self.dirty.add(lane.key)
        own = self.lanes.get(f"d:{device}")
        if outside and own is None:
            own = self._lane(f"d:{device}", "", device)
            own.partition = times[-1][0].partition
            own.last_ms = max(h.ts for h, _, _ in times)
        if own is None:
            return
        if not outside and not own.records:  # every one is in an experience: no lane of its own
            self._remove(own.key)
        elif own.dead != outside:
            own.dead = outside
            self.dirty.add(own.key)

    def _remove(self, key: str) -> None:
        """Take a lane away (not an eviction: nothing of it is lost); a resuming page is told."""
        lane = self.lanes.pop(key)
        self.dirty.discard(key)
        self.seq += 1
        self.removed.append((self.seq, key))
        keys = self.device_lanes.get(lane.device_id)
        if keys is not None:
            keys.discard(key)

    # ------------------------------------------------------------------ view out

    def flush(self) -> int:
        """Give every lane touched since the last flush one new version; the new sequence number."""
        if self.dirty:
            self.seq += 1
            for key in self.dirty:
                self.lanes[key].version = self.seq
            self.dirty.clear()
        return self.seq

    def since(self, seq: int) -> tuple[list[dict[str, Any]], list[str], bool]:
        """What a page at ``seq`` lacks: the summaries of lanes changed after it, the keys removed
        after it, and whether it needs a full snapshot instead (``seq`` unknown or too old)."""
        full = seq > self.seq or (
            seq > 0 and len(self.removed) == self.removed.maxlen and self.removed[0][0] > seq
        )
        if full:
            seq = 0
        # from 0 (a new page): every held lane, merged or not yet (an upsert on the page is idempotent)
        changed = [lane.summary() for lane in self.lanes.values() if seq == 0 or lane.version > seq]
        gone = [key for at, key in self.removed if at > seq and key not in self.lanes]
        return changed, gone, full

    def records_of(self, key: str) -> Iterator[Held]:
        """The lane's held records, and the held dead letters of its device, in topic order."""
        lane = self.lanes.get(key)
        if lane is None:
            return iter(())
        dead = list(self.dead_by_device.get(lane.device_id, ()))
        return iter(sorted([*lane.records, *dead], key=lambda h: (h.kind, h.partition, h.offset)))

    def statuses(self) -> Counter[str]:
        return Counter(lane.status for lane in self.lanes.values() if lane.experience_id)

    def recent(self, buckets: dict[int, Counter[str]]) -> Counter[str]:
        """Counts of the last ``WINDOW_MINUTES`` minutes of record time."""
        oldest = self.newest_ms // _MINUTE_MS - WINDOW_MINUTES + 1
        total: Counter[str] = Counter()
        for minute, counts in buckets.items():
            if minute >= oldest:
                total.update(counts)
        return total


def valid_key(key: str) -> bool:
    """A lane key as the console names lanes: ``e:`` or ``d:`` and an ID (or nothing, for ``d:``)."""
    kind, _, rest = key.partition(":")
    if kind == "d" and rest == "":
        return True
    return kind in ("e", "d") and _ID.fullmatch(rest) is not None

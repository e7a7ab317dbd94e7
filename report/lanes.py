"""The report's lane model: one pass over each kind of output record, aggregates and handles per lane.

A lane is an experience (or a device's records outside any experience). The writer does not hold
the records: it scans each output kind once, keeping per lane its aggregates and an 8-byte handle
per record (an offset in the JSONL file), then loads, draws and lets go of one lane's records at a
time (:class:`Records`, :func:`drawn`).

What it keeps is bounded where the input could make it grow without the pipeline admitting
anything (docs/CONTRACTS.md §12):

- dead letters: a key that has no lane of its own gets one for the first ``DEAD_KEY_LANES_MAX``
  such keys; the dead letters of every further key share one "other keys" lane; a lane keeps the
  handles of its first ``DEAD_HANDLES_MAX`` dead letters (the ones it draws) and counts the rest.
  A dead letter's key is shown as itself only when it is an ID, else hashed (:func:`shown_id`);
- divergences: the first ``DIVERGENCES_PLACED_MAX`` are placed in lanes (at most
  ``DIVERGENCE_HANDLES_MAX`` handles per lane, the rest counted); the banner keeps the first
  ``DETAIL_ROWS_MAX`` of those no lane holds and counts the rest;
- network and voice bands: per device, bounded by :class:`report.bands.BandBuilder`.
"""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Final

from report.bands import BandBuilder, DeviceStateChange, StateInterval
from report.safe import shown_id
from report.sources import Record, Records, Sources, loads

#: Lane severity, most severe first: these statuses, then diverged lanes, then lanes with dead letters.
SEVERE_STATUSES: Final[tuple[str, ...]] = ("aborted", "failed", "blocked")
NO_EXPERIENCE: Final = "none"
DETAIL_ROWS_MAX: Final = 50
#: dead letters a lane draws (the chart's marks; its table shows the first DETAIL_ROWS_MAX)
DEAD_HANDLES_MAX: Final = 600
#: keys without a lane of their own that get one for their dead letters
DEAD_KEY_LANES_MAX: Final = 100
#: the lane shared by the dead letters of every further key (not an ID: it names no device)
OTHER_KEYS: Final = "(other keys)"
DIVERGENCES_PLACED_MAX: Final = 10_000
DIVERGENCE_HANDLES_MAX: Final = 200


def rec_str(rec: Record, key: str) -> str:
    value = rec.get(key)
    return "" if value is None else str(value)


def rec_int(rec: Record, key: str) -> int | None:
    value = rec.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _handles() -> array[int]:
    return array("q")


#: the stages a lane's strip on the shared axis marks
_STRIP_STAGES: Final = ("decide", "act", "drop", "end", "goal")


@dataclass
class Lane:
    """A lane: its aggregates (all the page needs to list, filter and order it) and the handles of
    its records; the records themselves are loaded only while the lane is drawn (:func:`drawn`)."""

    key: str
    experience_id: str  # "" for a device's "no experience" lane
    device_id: str
    created: int = 0
    entries: list[Record] = field(default_factory=list)
    decisions: list[Record] = field(default_factory=list)
    dispatches: list[Record] = field(default_factory=list)
    status: str = ""
    dead_letters: list[Record] = field(default_factory=list)
    #: cross_device dead letters of other devices whose correlation names this lane's experience
    foreign_dead: list[Record] = field(default_factory=list)
    divergences: list[Record] = field(default_factory=list)
    #: the device's network and voice stretches overlapping the lane (bounded per kind)
    states: list[StateInterval] = field(default_factory=list)
    h_entries: array[int] = field(default_factory=_handles)
    h_decisions: array[int] = field(default_factory=_handles)
    h_dispatches: array[int] = field(default_factory=_handles)
    h_dead: array[int] = field(default_factory=_handles)
    h_foreign: array[int] = field(default_factory=_handles)
    h_div: array[int] = field(default_factory=_handles)
    #: how many dead letters (own, foreign) and divergences the lane holds (it keeps fewer handles)
    n_dead: int = 0
    n_foreign: int = 0
    n_div: int = 0
    strip_marks: int = 0
    t_lo: int | None = None
    t_hi: int | None = None
    first: int | None = None
    decision_values: set[str] = field(default_factory=set)
    backend_values: set[str] = field(default_factory=set)
    drop_values: set[str] = field(default_factory=set)
    dead_values: set[str] = field(default_factory=set)
    #: (sort key, at_ms) of the first goal and the first end entry, and of the last end with a status
    goal: tuple[tuple[int, int, int], int | None] | None = None
    end: tuple[tuple[int, int, int], int | None] | None = None
    last_status: tuple[tuple[int, int, int], str] | None = None

    @property
    def is_experience(self) -> bool:
        return self.experience_id != ""

    def seen_at(self, t: int | None, *, first: bool = False) -> None:
        if t is None:
            return
        self.t_lo = t if self.t_lo is None else min(self.t_lo, t)
        self.t_hi = t if self.t_hi is None else max(self.t_hi, t)
        if first:
            self.first = t if self.first is None else min(self.first, t)

    def window(self) -> tuple[int, int] | None:
        """First and last time of the lane's entries, decisions, dispatches and dead letters."""
        if self.t_lo is None or self.t_hi is None:
            return None
        return (self.t_lo, self.t_hi)

    def severity(self) -> int:
        """0 = most severe (SEVERITY_LABELS)."""
        if self.status in SEVERE_STATUSES:
            return SEVERE_STATUSES.index(self.status)
        if self.n_div:
            return len(SEVERE_STATUSES)
        if self.n_dead or self.n_foreign:
            return len(SEVERE_STATUSES) + 1
        return len(SEVERE_STATUSES) + 2


@dataclass
class Totals:
    """The fleet overview's counts, and the divergences no lane holds (the first few of them)."""

    timeline: int = 0
    decisions: int = 0
    dispatches: int = 0
    local_dispatches: int = 0
    dead_letters: int = 0
    divergences: int = 0
    drops: Counter[str] = field(default_factory=Counter)
    dead: Counter[str] = field(default_factory=Counter)
    by_decision: Counter[str] = field(default_factory=Counter)
    by_backend: Counter[str] = field(default_factory=Counter)
    unplaced: list[Record] = field(default_factory=list)
    n_unplaced: int = 0


def sort_key(indexed: tuple[int, Record]) -> tuple[int, int, int]:
    i, rec = indexed
    at = rec_int(rec, "at_ms")
    seq = rec_int(rec, "seq")
    return (at if at is not None else -1, seq if seq is not None else i, i)


def _add_once(index: dict[str, list[Lane]], key: str, lane: Lane) -> None:
    lanes = index.setdefault(key, [])
    if not any(other is lane for other in lanes):
        lanes.append(lane)


def build_lanes(
    sources: Sources, statuses: Mapping[str, str], state_changes: Iterable[DeviceStateChange] = ()
) -> tuple[list[Lane], Totals]:
    """The lanes (aggregates and record handles) and the overview's counts, from one pass over each
    kind of record (timeline first: dead letters go by its spans)."""
    lanes: dict[str, Lane] = {}
    totals = Totals()
    #: trigger -> handles of the divergences to place (the first DIVERGENCES_PLACED_MAX)
    wanted: dict[str, list[int]] = {}
    for h, div in sources.divergences.scan():
        totals.divergences += 1
        if totals.divergences <= DIVERGENCES_PLACED_MAX:
            wanted.setdefault(rec_str(div, "trigger_event_id"), []).append(h)
        else:
            totals.n_unplaced += 1
    #: trigger -> lanes whose observe/drop entry names it, and whose decision answers it
    entry_of: dict[str, list[Lane]] = {}
    decision_of: dict[str, list[Lane]] = {}

    def lane_for(exp: str, device: str) -> Lane:
        key = f"e:{exp}" if exp else f"d:{device}"
        lane = lanes.get(key)
        if lane is None:
            lane = lanes[key] = Lane(key=key, experience_id=exp, device_id=device, created=len(lanes))
        elif not lane.device_id and device:
            lane.device_id = device
        return lane

    for h, rec in sources.timeline.scan():
        lane = lane_for(rec_str(rec, "experience_id"), rec_str(rec, "device_id"))
        totals.timeline += 1
        stage, at = rec_str(rec, "stage"), rec_int(rec, "at_ms")
        key = sort_key((len(lane.h_entries), rec))
        lane.h_entries.append(h)
        lane.seen_at(at, first=True)
        if stage in _STRIP_STAGES:
            lane.strip_marks += 1
        if stage == "drop":
            reason = rec_str(rec, "drop_reason")
            totals.drops[reason] += 1
            lane.drop_values.add(reason)
        elif stage == "goal" and (lane.goal is None or key < lane.goal[0]):
            lane.goal = (key, at)
        elif stage == "end":
            if lane.end is None or key < lane.end[0]:
                lane.end = (key, at)
            status = rec_str(rec, "status")
            if status and (lane.last_status is None or key > lane.last_status[0]):
                lane.last_status = (key, status)
        if stage in ("observe", "drop") and rec_str(rec, "ref_id") in wanted:
            _add_once(entry_of, rec_str(rec, "ref_id"), lane)
    for h, rec in sources.decisions.scan():
        lane = lane_for(rec_str(rec, "experience_id"), rec_str(rec, "device_id"))
        totals.decisions += 1
        lane.h_decisions.append(h)
        lane.seen_at(rec_int(rec, "decided_at_ms"), first=True)
        decision, backend = rec_str(rec, "decision"), rec_str(rec, "backend")
        totals.by_decision[decision] += 1
        totals.by_backend[backend] += 1
        lane.decision_values.add(decision)
        lane.backend_values.add(backend)
        if rec_str(rec, "trigger_event_id") in wanted:
            _add_once(decision_of, rec_str(rec, "trigger_event_id"), lane)
    for h, rec in sources.dispatches.scan():
        lane = lane_for(rec_str(rec, "experience_id"), rec_str(rec, "device_id"))
        totals.dispatches += 1
        if rec.get("decision_id") is None:
            totals.local_dispatches += 1
        lane.h_dispatches.append(h)
        lane.seen_at(rec_int(rec, "created_at_ms"))
    for exp in statuses:
        if exp:
            lane_for(str(exp), "")

    for lane in lanes.values():
        if not lane.is_experience:
            lane.status = NO_EXPERIENCE
            continue
        status = statuses.get(lane.experience_id) or ""
        if not status:
            status = lane.last_status[1] if lane.last_status is not None else "active"
        lane.status = str(status)

    _place_dead_letters(lanes, lane_for, sources.dead_letters, totals)
    for lane in lanes.values():
        if not lane.is_experience:
            lane.status = NO_EXPERIENCE
    unplaced: list[int] = []
    for trigger, handles in wanted.items():
        homes = decision_of.get(trigger)
        if homes:
            home: Lane | None = max(homes, key=lambda lane: lane.created)
        else:
            home = min(entry_of.get(trigger, ()), key=lambda lane: lane.created, default=None)
        if home is None:
            unplaced.extend(handles[: max(DETAIL_ROWS_MAX - len(unplaced), 0)])
            totals.n_unplaced += len(handles)
            continue
        home.n_div += len(handles)
        home.h_div.extend(handles[: max(DIVERGENCE_HANDLES_MAX - len(home.h_div), 0)])
    totals.unplaced = sources.divergences.load(sorted(unplaced))
    intervals = BandBuilder().add_all(state_changes).intervals()
    for lane in lanes.values():
        window = lane.window()
        if window is None:
            continue
        lo, hi = window
        lane.states = [
            i
            for i in intervals.get(lane.device_id, ())
            if i.start_ms <= hi and (i.end_ms is None or i.end_ms >= lo)
        ]

    def order(lane: Lane) -> tuple[str, int, int, str]:
        first = lane.first if lane.first is not None else 0
        return (lane.device_id, 0 if lane.is_experience else 1, first, lane.experience_id)

    return sorted(lanes.values(), key=order), totals


def _place_dead_letters(
    lanes: Mapping[str, Lane],
    lane_for: Callable[[str, str], Lane],
    dead_letters: Records,
    totals: Totals,
) -> None:
    """Each dead letter goes to its device's experience lane running at its receive time, else to
    the device's "no experience" lane (a key with no lane of its own gets one while fewer than
    DEAD_KEY_LANES_MAX did, else the "other keys" lane); a ``cross_device`` letter is also shown in
    the lane of the experience its correlation names."""
    spans: dict[str, list[tuple[int, int | None, Lane]]] = {}
    for lane in lanes.values():
        if not lane.is_experience or lane.goal is None or lane.goal[1] is None:
            continue
        spans.setdefault(lane.device_id, []).append(
            (lane.goal[1], lane.end[1] if lane.end is not None else None, lane)
        )
    for items in spans.values():
        items.sort(key=lambda s: s[0])
    by_experience = {lane.experience_id: lane for lane in lanes.values() if lane.is_experience}
    key_lanes = 0
    for h, rec in dead_letters.scan():
        device = shown_id(rec.get("key"))
        at = rec_int(rec, "received_at_ms")
        reason = rec_str(rec, "reason_code")
        totals.dead_letters += 1
        totals.dead[reason] += 1
        home: Lane | None = None
        if at is not None:
            for start, end, lane in spans.get(device, ()):
                if start <= at and (end is None or at <= end):
                    home = lane
        if home is None:
            if f"d:{device}" not in lanes:
                key_lanes += 1
                if key_lanes > DEAD_KEY_LANES_MAX:
                    device = OTHER_KEYS
            home = lane_for("", device)
        home.n_dead += 1
        if len(home.h_dead) < DEAD_HANDLES_MAX:
            home.h_dead.append(h)
        home.seen_at(at)
        home.dead_values.add(reason)
        home.strip_marks += 1
        target = by_experience.get(_correlated_experience(rec))
        if target is not None and target is not home:
            target.n_foreign += 1
            if len(target.h_foreign) < DEAD_HANDLES_MAX:
                target.h_foreign.append(h)
            target.dead_values.add(reason)


def _correlated_experience(rec: Record) -> str:
    """The experience a ``cross_device`` letter's correlation names (its redacted copy keeps it)."""
    if rec_str(rec, "reason_code") != "cross_device" or not isinstance(rec.get("payload"), str):
        return ""
    try:
        payload = loads(str(rec["payload"]))
    except ValueError:
        return ""
    corr = payload.get("correlation") if isinstance(payload, dict) else None
    exp = corr.get("experience_id") if isinstance(corr, dict) else None
    return exp if isinstance(exp, str) else ""


@contextmanager
def drawn(lane: Lane, sources: Sources) -> Iterator[Lane]:
    """The lane with its records loaded (entries in time and sequence order), for drawing it."""
    entries = sources.timeline.load(lane.h_entries)
    lane.entries = [rec for _, rec in sorted(enumerate(entries), key=sort_key)]
    lane.decisions = sources.decisions.load(lane.h_decisions)
    lane.dispatches = sources.dispatches.load(lane.h_dispatches)
    lane.dead_letters = sources.dead_letters.load(lane.h_dead)
    lane.foreign_dead = sources.dead_letters.load(lane.h_foreign)
    lane.divergences = sources.divergences.load(sorted(lane.h_div))
    try:
        yield lane
    finally:
        lane.entries, lane.decisions, lane.dispatches = [], [], []
        lane.dead_letters, lane.foreign_dead, lane.divergences = [], [], []

"""The report's network and voice bands: what the pipeline admitted, merged and bounded.

Network and voice observations write no timeline entry, so the output files cannot show an outage
or a voice session. The bands come from the device snapshot the pipeline keeps (§4.3 step 6: the
latest admitted observation of each contract): :class:`AdmittedStates` looks at it after each
record and reports a :class:`DeviceStateChange` when an observation of a state contract replaced
it. A record the gate refused (``key_mismatch``, ``privacy_violation``, …), a duplicate, a
``cross_device`` record and an observation older than the snapshot's never reach the snapshot,
so they draw nothing, and every event ID a band shows is an admitted record's ID.

Bounds (docs/CONTRACTS.md §12): :class:`BandBuilder` keeps per device and kind at most
``2 * BANDS_PER_DEVICE`` stretches; past that the stretches closest in time are merged into one
"flapping" band that says how many stretches it holds (:func:`merge_closest`). Each lane then
draws at most ``band_cap`` bands per kind (a page-wide budget, water-filled over the lanes), merged
the same way. Memory is per device, never per record.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

#: The unscoped observations that only update the device snapshot: contract -> band kind.
STATE_CONTRACTS: Final[dict[str, str]] = {
    "network.aws_iot_session_changed": "network",
    "voice_llm.pipeline_state_changed": "voice",
}
#: The resting state of each kind: a band is drawn while the state is anything else.
RESTING: Final[dict[str, str]] = {"network": "connected", "voice": "idle"}
_NETWORK_STATES: Final = ("connected", "disconnected", "reconnecting")
#: stretches kept per device and kind (up to twice as many before a merge)
BANDS_PER_DEVICE: Final = 24
#: page-wide budget of bands (per kind and lane: at least BANDS_LANE_MIN, at most BANDS_LANE_MAX)
BAND_BUDGET: Final = 4_000
BANDS_LANE_MIN: Final = 2
BANDS_LANE_MAX: Final = BANDS_PER_DEVICE
#: the state of a band that merges stretches
FLAPPING: Final = "flapping"


@dataclass(frozen=True, slots=True)
class DeviceStateChange:
    """A network or voice state the pipeline admitted (its receive time and the reported state)."""

    device_id: str
    kind: str  # "network" or "voice"
    at_ms: int
    event_id: str
    state: str  # network: connected / disconnected / reconnecting; voice: active / idle


@dataclass(frozen=True, slots=True)
class StateInterval:
    """A stretch of time a device spent out of its resting network or voice state; ``count`` > 1:
    that many stretches close in time, merged into one band (state ``flapping``)."""

    kind: str
    state: str
    start_ms: int
    end_ms: int | None  # None: still so at the end of the input
    start_event: str
    end_event: str | None
    count: int = 1


def state_of(contract: str, facts: Mapping[str, Any]) -> tuple[str, str] | None:
    """(kind, state) an admitted observation of ``contract`` with ``facts`` reports, else None."""
    kind = STATE_CONTRACTS.get(contract)
    if kind == "network":
        session, connected = facts.get("session_state"), facts.get("connected")
        if session in _NETWORK_STATES:
            return kind, str(session)
        if isinstance(connected, bool):
            return kind, "connected" if connected else "disconnected"
    elif kind == "voice":
        active = facts.get("voice_session_active")
        if isinstance(active, bool):
            return kind, "active" if active else "idle"
    return None


class SnapshotEntryLike(Protocol):
    """What :class:`AdmittedStates` reads of a snapshot entry (``tables.state.SnapshotEntry``)."""

    @property
    def event_id(self) -> str: ...
    @property
    def observed_at_ms(self) -> int: ...
    @property
    def received_at_ms(self) -> int: ...
    @property
    def facts(self) -> Mapping[str, Any]: ...


class AdmittedStates:
    """Turns the device snapshot, looked at after each record, into the changes it admitted."""

    def __init__(self) -> None:
        #: (device, contract) -> (event ID, observed, received) of the entry last reported
        self._last: dict[tuple[str, str], tuple[str, int, int]] = {}

    def after(self, device_id: str, snapshot: Mapping[str, SnapshotEntryLike]) -> list[DeviceStateChange]:
        """The state changes ``snapshot`` (``device_id``'s, just after one record) holds that were
        not reported yet: at most one per state contract."""
        found: list[DeviceStateChange] = []
        for contract in STATE_CONTRACTS:
            entry = snapshot.get(contract)
            if entry is None:
                continue
            mark = (entry.event_id, entry.observed_at_ms, entry.received_at_ms)
            if self._last.get((device_id, contract)) == mark:
                continue
            self._last[(device_id, contract)] = mark
            state = state_of(contract, entry.facts)
            if state is not None:
                found.append(
                    DeviceStateChange(device_id, state[0], entry.received_at_ms, entry.event_id, state[1])
                )
        return found


def merge_closest(intervals: list[StateInterval], limit: int) -> list[StateInterval]:
    """At most ``limit`` bands (at least 1) from time-ordered ``intervals``: the stretches closest
    in time (the smallest gaps between one's end and the next's start) are merged first."""
    limit = max(limit, 1)
    if len(intervals) <= limit:
        return intervals
    gaps = [
        ((b.start_ms - a.end_ms) if a.end_ms is not None else 0, i)
        for i, (a, b) in enumerate(itertools.pairwise(intervals))
    ]
    joined = {i for _, i in heapq.nsmallest(len(intervals) - limit, gaps)}
    out: list[StateInterval] = []
    for i, interval in enumerate(intervals):
        if i - 1 in joined:
            out[-1] = _merged(out[-1], interval)
        else:
            out.append(interval)
    return out


def _merged(a: StateInterval, b: StateInterval) -> StateInterval:
    return StateInterval(
        a.kind,
        FLAPPING,
        a.start_ms,
        b.end_ms,
        a.start_event,
        b.end_event,
        a.count + b.count,
    )


@dataclass(slots=True)
class _Track:
    """One device's stretches of one kind: the closed ones and the state it is in now."""

    closed: list[StateInterval]
    current: DeviceStateChange | None = None


class BandBuilder:
    """Per device, the stretches out of the resting state, from changes in processing order;
    bounded per device and kind (see the module docstring)."""

    def __init__(self, per_device: int = BANDS_PER_DEVICE) -> None:
        self.per_device = per_device
        self._tracks: dict[tuple[str, str], _Track] = {}

    def add(self, change: DeviceStateChange) -> None:
        track = self._tracks.get((change.device_id, change.kind))
        if track is None:
            track = self._tracks[(change.device_id, change.kind)] = _Track([])
        current = track.current
        if current is not None and change.state == current.state:
            return
        if current is not None and current.state != RESTING[current.kind]:
            track.closed.append(
                StateInterval(
                    current.kind,
                    current.state,
                    current.at_ms,
                    change.at_ms,
                    current.event_id,
                    change.event_id,
                )
            )
            if len(track.closed) >= 2 * self.per_device:
                track.closed = merge_closest(track.closed, self.per_device)
        track.current = change

    def add_all(self, changes: Iterable[DeviceStateChange]) -> BandBuilder:
        for change in changes:
            self.add(change)
        return self

    def intervals(self) -> dict[str, list[StateInterval]]:
        """Per device, its stretches (at most ``per_device`` per kind), in time order."""
        out: dict[str, list[StateInterval]] = {}
        for (device, _), track in sorted(self._tracks.items()):
            items = list(track.closed)
            c = track.current
            if c is not None and c.state != RESTING[c.kind]:
                items.append(StateInterval(c.kind, c.state, c.at_ms, None, c.event_id, None))
            out.setdefault(device, []).extend(merge_closest(items, self.per_device))
        for items in out.values():
            items.sort(key=lambda i: (i.start_ms, i.kind))
        return out


def lane_bands(intervals: Iterable[StateInterval], lo: int, hi: int, cap: int) -> list[StateInterval]:
    """The bands a lane spanning ``lo``..``hi`` draws: the stretches overlapping it, at most ``cap``
    per kind (merged as in :func:`merge_closest`), in time order."""
    by_kind: dict[str, list[StateInterval]] = {}
    for i in intervals:
        if i.start_ms <= hi and (i.end_ms is None or i.end_ms >= lo):
            by_kind.setdefault(i.kind, []).append(i)
    out = [b for kind in sorted(by_kind) for b in merge_closest(by_kind[kind], cap)]
    out.sort(key=lambda i: (i.start_ms, i.kind))
    return out


def band_what(interval: StateInterval) -> str:
    """What a band shows, without its times: ``network disconnected``, ``voice session active``,
    ``network flapping (37 stretches out of connected)``."""
    if interval.count > 1:
        return (
            f"{interval.kind} flapping ({interval.count:,} stretches out of {RESTING[interval.kind]}, merged)"
        )
    return "voice session active" if interval.kind == "voice" else f"network {interval.state}"


def band_class(interval: StateInterval) -> str:
    """The CSS class of a band (``sb-network-disconnected``, ``sb-voice-flapping``, …)."""
    return f"sb-{interval.kind}-{interval.state}"


__all__ = [
    "BAND_BUDGET",
    "AdmittedStates",
    "BandBuilder",
    "DeviceStateChange",
    "StateInterval",
    "lane_bands",
    "merge_closest",
    "state_of",
]

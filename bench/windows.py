"""When a measured window may give a figure: the benchmark's validity rules (pure, no I/O, no clock).

Every measured part of ``guardian bench`` checks its own window before it reports a figure; a
window that breaks a rule gives no figure, only the reasons, and the run exits 1 naming them.

- A *throughput* window (the pipeline, the two floors, the passthrough) is timed by the acks the
  measured process reports (:func:`bench.timing.ack_marks`): the records acked after its first ack
  line over the time from that line to its last. It needs enough records (at least
  ``MIN_RECORDS``, and at least ``MIN_SHARE`` of what it was given: a process that drained the
  load in one or two batches before its first ack line measured nothing), enough seconds
  (``MIN_SECONDS``), enough ack lines to time it by (``MIN_ACKS``) and a steady rate (the rates
  of the window's two halves within ``MAX_SWING`` of each other).
- The *latency* part runs at a rate derived from a valid throughput only (a quarter of it), or at
  the rate the user asked for (:func:`latency_rate`); each of its windows needs enough answered
  probes (``MIN_PROBES``), every probe answered, and the steady load it was meant to carry (within
  ``MAX_RATE_MISS`` of the target).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from bench.timing import pct

MIN_RECORDS = 1_000
MIN_SHARE = 0.5
MIN_SECONDS = 1.0
MIN_ACKS = 3
MAX_SWING = 2.0
#: the latency part's load: this share of the measured maximum
LOAD_SHARE = 0.25
MIN_PROBES = 100
MAX_RATE_MISS = 0.1


class Refused(ValueError):
    """A figure the rules refuse to derive (the message says why)."""


@dataclass(frozen=True)
class Throughput:
    """A throughput window: the rate only when every rule holds (``reasons`` empty)."""

    records: int
    seconds: float
    acks: int | None
    reasons: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.reasons

    @property
    def rate(self) -> float | None:
        return self.records / self.seconds if self.valid else None

    def as_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "valid": self.valid,
            "measured_records": self.records,
            "measured_s": self.seconds,
            "records_per_s": self.rate,
        }
        if self.acks is not None:
            out["acks"] = self.acks
        if self.reasons:
            out["reasons"] = list(self.reasons)
        return out


def _n(count: int, what: str) -> str:
    return f"{count:,} {what}" + ("" if count == 1 else "s")


def check_throughput(
    records: int,
    seconds: float,
    expected: int,
    *,
    acks: int | None = None,
    halves: tuple[float, float] | None = None,
) -> Throughput:
    """The rules over a window of ``records`` acked in ``seconds`` out of ``expected`` given, by
    ``acks`` ack lines (None: timed otherwise), the rates of its two ``halves`` (None: not known)."""
    reasons: list[str] = []
    if records < MIN_RECORDS:
        reasons.append(f"{_n(records, 'record')} measured (at least {MIN_RECORDS:,} needed)")
    if expected > 0 and records < MIN_SHARE * expected:
        reasons.append(
            f"the window holds {records:,} of the {expected:,} records given (at least "
            f"{MIN_SHARE:.0%}): the rest were handled before its first ack line, unseen"
        )
    if seconds < MIN_SECONDS:
        reasons.append(f"{seconds:.2f} s measured (at least {MIN_SECONDS:g} s needed)")
    if acks is not None and acks < MIN_ACKS:
        reasons.append(f"{_n(acks, 'ack line')} to time it by (at least {MIN_ACKS} needed)")
    if halves is not None:
        low, high = sorted(halves)
        if low <= 0 or high / low > MAX_SWING:
            reasons.append(
                f"the rate was not steady: {halves[0]:,.0f} records/s in the first half of the window, "
                f"{halves[1]:,.0f} in the second (at most {MAX_SWING:g} times apart)"
            )
    return Throughput(records, seconds, acks, tuple(reasons))


def throughput_from_acks(marks: Sequence[tuple[float, int]], expected: int) -> Throughput:
    """The window of ack lines ``marks`` ((when, records acked), any order): the records of the
    lines after the first, over the time from the first line to the last; the records of a line
    taken as handled evenly since the line before it (for the two halves' rates)."""
    ordered = sorted(marks)
    if len(ordered) < 2:
        return check_throughput(0, 0.0, expected, acks=len(ordered))
    t0, t1 = ordered[0][0], ordered[-1][0]
    counted = sum(n for _, n in ordered[1:])
    seconds = t1 - t0
    halves = None
    if seconds > 0:
        mid = (t0 + t1) / 2
        first = _acked_by(ordered, mid)
        halves = (first / (mid - t0), (counted - first) / (t1 - mid))
    return check_throughput(counted, seconds, expected, acks=len(ordered), halves=halves)


def _acked_by(ordered: Sequence[tuple[float, int]], at: float) -> float:
    """Records acked after the first line up to ``at`` (each line's records spread over the time
    since the line before it)."""
    done = 0.0
    for (before, _), (when, n) in itertools.pairwise(ordered):
        if when <= at:
            done += n
        elif before < at:
            done += n * (at - before) / (when - before)
    return done


def cpu_between(samples: Sequence[tuple[float, float]], start: float, end: float) -> float | None:
    """CPU seconds a process spent from ``start`` to ``end``, from (when, its CPU seconds so far)
    samples, interpolated between the samples around each end; None when they do not cover both."""
    ordered = sorted(samples)
    at_start, at_end = _at(ordered, start), _at(ordered, end)
    if at_start is None or at_end is None:
        return None
    return max(0.0, at_end - at_start)


def _at(ordered: Sequence[tuple[float, float]], when: float) -> float | None:
    for (t0, c0), (t1, c1) in itertools.pairwise(ordered):
        if t0 <= when <= t1:
            return c0 if t1 == t0 else c0 + (c1 - c0) * (when - t0) / (t1 - t0)
    return None


def latency_rate(throughput: dict[str, Any] | None, asked: float | None) -> float:
    """The latency part's steady load: the rate the user asked for, else ``LOAD_SHARE`` of a valid
    throughput window's rate; :class:`Refused` when there is none to derive it from."""
    if asked is not None:
        if asked <= 0:
            raise Refused(f"a load of {asked:g} observations/s cannot be measured")
        return asked
    if throughput is None:
        raise Refused("no throughput was measured to derive its load from")
    if throughput.get("valid") is not True:
        why = "; ".join(str(r) for r in throughput.get("reasons") or []) or "its window is not valid"
        raise Refused(f"the throughput it derives its load from is not valid: {why}")
    rate = throughput.get("records_per_s")
    if not isinstance(rate, int | float) or rate <= 0:
        raise Refused("the throughput it derives its load from has no rate")
    return float(rate) * LOAD_SHARE


@dataclass(frozen=True)
class LatencyWindow:
    """One of the latency part's measured windows: its probes' trigger -> dispatch times (ms)."""

    index: int
    latencies_ms: tuple[float, ...]
    missing: int
    target_rate: float
    achieved_rate: float
    seconds: float
    reasons: tuple[str, ...] = field(default=())

    @property
    def valid(self) -> bool:
        return not self.reasons


def check_latency_window(
    index: int,
    latencies_ms: Sequence[float],
    missing: int,
    target_rate: float,
    achieved_rate: float,
    seconds: float,
) -> LatencyWindow:
    """The rules over one latency window."""
    reasons: list[str] = []
    if len(latencies_ms) < MIN_PROBES:
        reasons.append(f"{_n(len(latencies_ms), 'probe')} answered (at least {MIN_PROBES} needed)")
    if missing:
        reasons.append(f"{_n(missing, 'probe')} never answered (a dispatch missing is no latency)")
    if target_rate > 0 and abs(achieved_rate - target_rate) > MAX_RATE_MISS * target_rate:
        reasons.append(
            f"the load ran at {achieved_rate:,.0f} observations/s, not the {target_rate:,.0f} asked "
            f"(within {MAX_RATE_MISS:.0%})"
        )
    return LatencyWindow(
        index, tuple(latencies_ms), missing, target_rate, achieved_rate, seconds, tuple(reasons)
    )


def describe_window(window: LatencyWindow) -> dict[str, object]:
    """A latency window's figures: percentiles only when it is valid."""
    out: dict[str, object] = {
        "window": window.index,
        "valid": window.valid,
        "seconds": window.seconds,
        "matched": len(window.latencies_ms),
        "missing": window.missing,
        "rate_target": window.target_rate,
        "rate_achieved": window.achieved_rate,
    }
    if window.valid:
        lat = window.latencies_ms
        out.update(
            p50_ms=round(pct(lat, 0.5), 1),
            p99_ms=round(pct(lat, 0.99), 1),
            p999_ms=round(pct(lat, 0.999), 1),
            max_ms=round(max(lat), 1),
        )
    else:
        out["reasons"] = list(window.reasons)
    return out


def acked_window(
    marks: Sequence[tuple[float, int]], expected: int, cpu: Sequence[tuple[float, float]] = ()
) -> dict[str, object]:
    """A throughput part's result from its ack lines: the window's figures (a rate only when it is
    valid) and, when ``cpu`` samples (wall-clock s, CPU s so far) cover it, the process's CPU time
    over the same window and per record."""
    window = throughput_from_acks(marks, expected)
    out = window.as_dict()
    ordered = sorted(marks)
    if window.valid and ordered:
        cpu_s = cpu_between(cpu, ordered[0][0], ordered[-1][0])
        if cpu_s is not None:
            out["cpu_s"] = cpu_s
            out["cpu_us_per_record"] = cpu_s / window.records * 1e6
    return out

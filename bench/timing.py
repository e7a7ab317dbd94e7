"""Small statistics shared by the benchmark's parts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import orjson


def pct(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ack_marks(path: Path, since: float, until: float) -> list[tuple[float, int]]:
    """The ``acked`` lines a measured process wrote (JSON lines ``{"kind": "acked", "at": wall-clock
    s, "records": n}``, one per batch acked: the worker's latency trace, the floors' progress file)
    between ``since`` and ``until``, as (when, records), in time order; the window they make is
    judged by :func:`bench.windows.throughput_from_acks`."""
    if not path.exists():
        return []
    marks: list[tuple[float, int]] = []
    for line in path.read_bytes().splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line cut by the process's stop
        if not isinstance(entry, dict) or entry.get("kind") != "acked":
            continue
        at, records = entry.get("at"), entry.get("records")
        if isinstance(at, int | float) and isinstance(records, int) and since <= at <= until:
            marks.append((float(at), records))
    return sorted(marks)


@dataclass
class ProbeLatencies:
    """Trigger -> dispatch latencies (ms) of the latency run's probes, split by when each was sent:
    while the steady load warmed the worker and the broker up, or after (the measured ones)."""

    warmup: list[float] = field(default_factory=list)
    measured: list[float] = field(default_factory=list)
    #: the measured probes: event ID -> when sent
    measured_sent: dict[str, float] = field(default_factory=dict)
    #: probes whose dispatch never arrived
    warmup_missing: int = 0
    measured_missing: int = 0


def probe_latencies(
    sent_at: dict[str, float], arrived: dict[str, float], measured_from: float
) -> ProbeLatencies:
    """Split the probes (event ID -> wall-clock s sent / dispatch read) at ``measured_from``."""
    out = ProbeLatencies()
    for event, sent in sent_at.items():
        warm = sent < measured_from
        if not warm:
            out.measured_sent[event] = sent
        got = arrived.get(event)
        if got is None:
            if warm:
                out.warmup_missing += 1
            else:
                out.measured_missing += 1
        else:
            (out.warmup if warm else out.measured).append((got - sent) * 1000)
    return out


def split_windows(
    sent_at: dict[str, float], arrived: dict[str, float], first_from: float, seconds: float, count: int
) -> list[tuple[list[float], int]]:
    """The measured probes (event ID -> wall-clock s sent / dispatch read) split into ``count``
    windows of ``seconds`` from ``first_from``: per window, its latencies (ms) and how many of its
    probes were never answered. Probes sent outside the windows are left out."""
    out: list[tuple[list[float], int]] = [([], 0) for _ in range(count)]
    for event, sent in sent_at.items():
        k = int((sent - first_from) // seconds) if seconds > 0 else -1
        if not 0 <= k < count:
            continue
        latencies, missing = out[k]
        got = arrived.get(event)
        if got is None:
            out[k] = (latencies, missing + 1)
        else:
            latencies.append((got - sent) * 1000)
    return out

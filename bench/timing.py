"""Small statistics shared by the benchmark's parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import orjson


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def acked_rate(path: Path, since: float, until: float) -> dict[str, float] | None:
    """The rate at which a measured process acked input records, from its own ``acked`` lines
    (JSON lines ``{"kind": "acked", "at": wall-clock s, "records": n}`` written as each batch is
    acked: the worker's latency trace, the floors' progress file), between ``since`` and ``until``.

    Records acked at the first line were processed before it (from an unknown start), so they are
    left out: the rate is the records of the later lines over the time from the first line to the
    last. None with fewer than two lines in the window."""
    if not path.exists():
        return None
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
    if len(marks) < 2:
        return None
    marks.sort()
    seconds = marks[-1][0] - marks[0][0]
    counted = sum(n for _, n in marks[1:])
    if seconds <= 0:
        return None
    return {
        "records_per_s": counted / seconds,
        "measured_records": float(counted),
        "measured_s": seconds,
        "acked_records": float(counted + marks[0][1]),
    }


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

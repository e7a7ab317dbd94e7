"""Where the slowest probes of the latency part spent their time (the worker's latency trace).

The worker writes one line per dispatch (``streams.latency_trace.LatencyTrace``), plus its garbage
collector pauses and event-loop stalls; the bench knows when each probe was sent and when its
dispatch arrived. Joined, each probe's trigger -> dispatch time splits into stages:

- ``produce``: sent -> the bench saw Kafka acknowledge the probe (the load generator's producer
  and event loop, the broker's append; an upper bound of when the worker could fetch it);
- ``fetch``: -> handed to the pipeline's inbox by faust's conductor (the worker's fetch, its
  consumer thread's hand-off, flow control);
- ``inbox``: in the inbox until the pipeline took it (the pipeline busy with an earlier batch);
- ``merge``: taken -> handled by the core (the timestamp merge's hold, earlier records first);
- ``batch``: handled -> its batch's flush started (the rest of the batch processed);
- ``flush``: encoding, RocksDB writes and handing the batch to the producer;
- ``deliver``: handed to the producer -> Kafka acknowledged the whole batch;
- ``read``: acknowledged -> the bench's consumer read the dispatch.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

STAGES = ("produce", "fetch", "inbox", "merge", "batch", "flush", "deliver", "read")
#: event-loop stalls at least this long are counted by cause (``stall_causes``)
LONG_STALL_S = 0.05
#: the project's own packages (a sampled stack is named by its innermost frame in them)
OWN = ("streams/", "tables/", "pipeline/", "topics/", "supervisor/", "bench/")


def load(path: Path) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """(trigger event id -> dispatch entry, pauses [gc and loop lag])."""
    dispatches: dict[str, dict[str, Any]] = {}
    pauses: list[dict[str, Any]] = []
    if not path.exists():
        return dispatches, pauses
    for line in path.read_bytes().splitlines():
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue  # a line cut by the worker's stop
        if entry.get("kind") == "dispatch" and isinstance(entry.get("trigger"), str):
            dispatches.setdefault(entry["trigger"], entry)
        elif entry.get("kind") in ("gc", "lag"):
            pauses.append(entry)
    return dispatches, pauses


def stages(
    sent: float, arrived: float, entry: dict[str, Any], produced: float | None = None
) -> dict[str, float]:
    """Milliseconds per stage of one probe (``produced``: when the bench saw Kafka acknowledge
    it; unknown: the ``produce`` stage is 0 and ``fetch`` starts at ``sent``)."""
    marks = [
        sent,
        sent if produced is None else produced,
        entry["recv"],
        entry["pushed"],
        entry["handled"],
        entry["flush"],
        entry["sent"],
        entry["acked"],
        arrived,
    ]
    return {name: round((b - a) * 1000, 1) for name, a, b in zip(STAGES, marks[:-1], marks[1:], strict=True)}


def slowest(
    sent_at: dict[str, float],
    arrived: dict[str, float],
    trace: Path,
    n: int = 10,
    produced_at: dict[str, float] | None = None,
) -> dict[str, Any]:
    """The ``n`` slowest probes with their stages and the pauses during them, and the stages'
    totals over every traced probe (``share_*``: each stage's part of the summed latency);
    ``produced_at``: when the bench saw Kafka acknowledge each probe."""
    dispatches, pauses = load(trace)
    rows: list[dict[str, Any]] = []
    for event_id, t in sent_at.items():
        if event_id not in arrived or event_id not in dispatches:
            continue
        entry = dispatches[event_id]
        row: dict[str, Any] = {
            "probe": event_id,
            "ms": round((arrived[event_id] - t) * 1000, 1),
            "batch_records": entry.get("batch"),
            **stages(t, arrived[event_id], entry, (produced_at or {}).get(event_id)),
        }
        row["pauses"] = _during(pauses, t, arrived[event_id])
        rows.append(row)
    rows.sort(key=lambda r: r["ms"], reverse=True)
    totals = {s: sum(r[s] for r in rows) for s in STAGES}
    whole = sum(totals.values()) or 1.0
    top = rows[: max(1, len(rows) // 100)] if rows else []
    top_totals = {s: sum(r[s] for r in top) for s in STAGES}
    top_whole = sum(top_totals.values()) or 1.0
    gc_pauses = [p["s"] * 1000 for p in pauses if p["kind"] == "gc"]
    lags = [p["s"] * 1000 for p in pauses if p["kind"] == "lag"]
    return {
        "traced": len(rows),
        "slowest": rows[:n],
        "share_all": {s: round(v / whole, 3) for s, v in totals.items()},
        "share_slowest_1pct": {s: round(v / top_whole, 3) for s, v in top_totals.items()},
        "gc_pauses": len(gc_pauses),
        "gc_pause_max_ms": round(max(gc_pauses), 1) if gc_pauses else 0.0,
        "loop_stalls": len(lags),
        "loop_stall_max_ms": round(max(lags), 1) if lags else 0.0,
        # the long stalls while probes were on their way (not the setup's or the throughput run's)
        "long_stalls": stall_causes(_within(pauses, sent_at, arrived)),
    }


def stall_cause(stacks: list[list[str]]) -> str:
    """What a stall was doing, from the stacks sampled during it: the callback the event loop ran
    (the first frame under asyncio's ``Handle._run``, else the outermost frame of the project's own
    code) and the innermost frame of the project's own code, of the stack sampled most often (by
    those two frames). A thread sampled waiting in ``select`` was ready to run but not scheduled
    (the machine's CPU was taken)."""
    if not stacks:
        return "not sampled"
    names: dict[str, int] = {}
    for stack in stacks:
        frames = [f.split(" ", 1) for f in stack if " " in f]
        if not frames:
            continue
        if frames[-1][1] == "select":
            name = "waiting in select (not scheduled)"
        else:
            start = None
            for i, (where, func) in enumerate(frames):
                if func == "_run" and where.startswith("asyncio/events.py"):
                    start = i + 1
            own = [f for f in frames if f[0].startswith(OWN) and not f[0].startswith("streams/worker.py")]
            inner = frames[start:] if start is not None and start < len(frames) else own or frames[-1:]
            outer = _short(inner[0])
            innermost = _short(own[-1]) if own else _short(frames[-1])
            name = outer if innermost == outer else f"{outer} > {innermost}"
        names[name] = names.get(name, 0) + 1
    if not names:
        return "not sampled"
    return max(names.items(), key=lambda kv: kv[1])[0]


def _short(frame: list[str]) -> str:
    where, func = frame
    return f"{func} ({where.rsplit(':', 1)[0]})"


def stall_causes(pauses: Iterable[dict[str, Any]], at_least_s: float = LONG_STALL_S) -> list[dict[str, Any]]:
    """Event-loop stalls of ``at_least_s`` or more, counted by cause (:func:`stall_cause`), most
    time first: ``{"cause", "stalls", "sum_ms", "max_ms", "cpu_ms"}``. ``cpu_ms`` is the loop
    thread's own CPU time during them: near ``sum_ms`` when the loop worked all along, well below
    it when its thread waited for a core (a busy machine) or for the GIL."""
    by: dict[str, list[tuple[float, float | None]]] = {}
    for p in pauses:
        if p["kind"] == "lag" and p["s"] >= at_least_s:
            cpu = p.get("cpu")
            by.setdefault(stall_cause(p.get("stacks") or []), []).append(
                (p["s"] * 1000, None if cpu is None else cpu * 1000)
            )
    order = sorted(by.items(), key=lambda kv: sum(ms for ms, _ in kv[1]), reverse=True)
    rows: list[dict[str, Any]] = []
    for cause, v in order:
        row: dict[str, Any] = {
            "cause": cause,
            "stalls": len(v),
            "sum_ms": round(sum(ms for ms, _ in v), 1),
            "max_ms": round(max(ms for ms, _ in v), 1),
        }
        cpus = [c for _, c in v if c is not None]
        if cpus:
            row["cpu_ms"] = round(sum(cpus), 1)
        rows.append(row)
    return rows


def _within(
    pauses: list[dict[str, Any]], sent_at: dict[str, float], arrived: dict[str, float]
) -> list[dict[str, Any]]:
    """The pauses from the first probe sent to the last dispatch read."""
    if not sent_at or not arrived:
        return []
    start, end = min(sent_at.values()), max(arrived.values())
    return [p for p in pauses if p["at"] + p["s"] >= start and p["at"] <= end]


def _during(pauses: Iterable[dict[str, Any]], start: float, end: float) -> list[str]:
    """The GC pauses and event-loop stalls within ``start``..``end``, summed by kind."""
    found: dict[str, list[float]] = {}
    for p in pauses:
        if p["at"] + p["s"] >= start and p["at"] <= end:
            what = f"gen{p.get('generation')} GC" if p["kind"] == "gc" else "loop stall"
            found.setdefault(what, []).append(p["s"] * 1000)
    return [
        f"{len(v)} {what} (sum {sum(v):.0f} ms, longest {max(v):.0f} ms)" for what, v in sorted(found.items())
    ]


def describe(result: dict[str, Any]) -> list[str]:
    """Lines for the bench's output."""
    lines = [
        f"latency trace: {result['traced']} probes traced; GC pauses >= 5 ms: {result['gc_pauses']} "
        f"(max {result['gc_pause_max_ms']} ms), event-loop stalls >= 5 ms: {result['loop_stalls']} "
        f"(max {result['loop_stall_max_ms']} ms)",
        f"  event-loop stalls >= {LONG_STALL_S * 1000:.0f} ms while probes ran, by cause (sampled): "
        + (
            "; ".join(
                f"{r['cause']}: {r['stalls']} (sum {r['sum_ms']:.0f} ms, max {r['max_ms']:.0f} ms"
                + (f", loop CPU {r['cpu_ms']:.0f} ms)" if "cpu_ms" in r else ")")
                for r in result.get("long_stalls", [])[:8]
            )
            or "none"
        ),
        "  share of the slowest 1 %: "
        + ", ".join(f"{s} {v:.0%}" for s, v in result["share_slowest_1pct"].items()),
        "  share of all probes:     " + ", ".join(f"{s} {v:.0%}" for s, v in result["share_all"].items()),
        "  slowest probes (ms: " + " / ".join(STAGES) + "):",
    ]
    for row in result["slowest"]:
        parts = " / ".join(f"{row[s]:.0f}" for s in STAGES)
        extra = f"; during it: {', '.join(row['pauses'])}" if row["pauses"] else ""
        lines.append(f"    {row['ms']:7.1f} ms = {parts} (batch of {row['batch_records']}){extra}")
    return lines

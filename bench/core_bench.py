"""Micro-benchmark of the functional core: ``pipeline.runner.Processor`` over ``MemoryStore``.

What one state-only observation costs the core itself (§4.3 steps 5–9 + state update), on one
core, without Kafka: ``devices`` devices get a plan and ``security.started`` (not timed), then
``n`` state-only observations (``bench.workload``'s resting-value records, pre-encoded) go through
``Processor.process`` round robin, once with the gate (``with_gate_median_us``) and once with the
gate's verdicts reached before the clock starts (the core alone: ``median_us``). Records are timed
in batches with ``time.perf_counter_ns``; a batch's time divided by its size is one sample; the
median and p99 are over the samples. Target (the core alone): median <= 20 µs.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from bench.timing import pct
from bench.workload import device_ids, setup_end, setup_records, state_only_records
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from topics.names import TopicNames
from topics.registry import load_registry

TARGET_US = 20.0
T0 = 1785400000000


class _AdmittedBefore:
    """A gate handing back verdicts reached beforehand: the core's cost without the gate's."""

    def __init__(self, verdicts: dict[int, Any]) -> None:
        self.verdicts = verdicts

    def admit(self, kind: str, key: bytes | None, value: bytes | None, **_: Any) -> Any:
        return self.verdicts[id(value)]


def run_core_bench(n: int = 50_000, devices: int = 1000, batch: int = 1000) -> dict[str, float]:
    """Process ``n`` state-only observations; ``median_us``, ``p99_us``, ``mean_us``,
    ``records_per_s`` (from the median) of the core alone (records admitted by the gate before the
    clock starts), ``with_gate_median_us`` of gate + core, ``n``, ``devices``. Raises RuntimeError
    if one has outputs."""
    names = TopicNames("bench.")
    registry = load_registry()
    proc = Processor(registry, Pipeline(registry), rules.decide)
    store = MemoryStore()
    devs = device_ids(devices)
    for off, rec in enumerate(setup_records(names, devs, T0)):
        suffix = names.suffix_of(rec.topic)
        assert suffix is not None
        proc.process(
            store, suffix, rec.key, rec.value, source_topic=rec.topic, partition=0, offset=off,
            received_at_ms=rec.ts,
        )  # fmt: skip
    recs = state_only_records(names, devs, T0, setup_end(devs, T0), n)
    topic = names.observations
    # warm-up on a copy of the store, so the timed records are all first sightings
    warm = _copy(store)
    for off, rec in enumerate(recs[: min(2000, n)]):
        proc.process(warm, "observations", rec.key, rec.value, source_topic=topic, partition=0,
                     offset=10_000_000 + off, received_at_ms=rec.ts)  # fmt: skip
    with_gate = _timed(proc, _copy(store), recs, topic, batch)
    verdicts = {id(rec.value): _admit(proc, topic, off, rec) for off, rec in enumerate(recs)}
    core_only = Processor(registry, proc.pipeline, rules.decide)
    core_only.gate = _AdmittedBefore(verdicts)  # type: ignore[assignment]
    alone = _timed(core_only, store, recs, topic, batch)
    return {**alone, "with_gate_median_us": with_gate["median_us"], "n": float(n), "devices": float(devices)}


def _admit(proc: Processor, topic: str, offset: int, rec: Any) -> Any:
    return proc.gate.admit(
        "observations", rec.key, rec.value, source_topic=topic, partition=0, offset=offset,
        received_at_ms=rec.ts,
    )  # fmt: skip


def _copy(store: MemoryStore) -> MemoryStore:
    return MemoryStore(dict(store.devices), dict(store.experiences), dict(store.seen), dict(store.owners))


def _timed(proc: Processor, store: MemoryStore, recs: list[Any], topic: str, batch: int) -> dict[str, float]:
    process = proc.process
    samples: list[float] = []
    total_ns = 0
    clock = time.perf_counter_ns
    size = max(1, min(batch, len(recs)))
    for first in range(0, len(recs), size):
        chunk = recs[first : first + size]
        t0 = clock()
        for off, rec in enumerate(chunk, first):
            done = process(store, "observations", rec.key, rec.value, source_topic=topic, partition=0,
                           offset=off, received_at_ms=rec.ts)  # fmt: skip
            if done.outs:
                raise RuntimeError(f"a state-only record had outputs: {done.outs[0]}")
        elapsed = clock() - t0
        total_ns += elapsed
        samples.append(elapsed / len(chunk) / 1000.0)
    median = statistics.median(samples)
    p99 = pct(samples, 0.99)
    return {
        "median_us": median,
        "p99_us": p99,
        "mean_us": total_ns / len(recs) / 1000.0,
        "records_per_s": 1e6 / median if median > 0 else float("inf"),
        "target_us": TARGET_US,
    }


if __name__ == "__main__":
    import orjson

    print(orjson.dumps(run_core_bench(), option=orjson.OPT_INDENT_2).decode())

"""Micro-benchmark of the gate: ``Gate.admit`` on the docs/CONTRACTS.md §4 seed observation.

Each record differs by its ``event_id`` (pre-encoded, so encoding is not timed). Records are timed
in batches with ``time.perf_counter_ns``; a batch's time divided by its size is one sample of the
per-record cost, and the median / p99 are taken over the samples.
"""

from __future__ import annotations

import statistics
import time

import orjson

from bench.timing import pct
from topics.gate import Admitted, Gate
from topics.registry import load_registry

SEED_OBSERVATION: dict[str, object] = {
    "event_id": "obs_guardian_0007",
    "device_id": "airbot-0001",
    "type": "security.person_detected",
    "source": "DeviceAgent.WssVisionObserver",
    "observed_at_ms": 1785400000000,
    "freshness_ms": 320,
    "ttl_ms": 2000,
    "confidence": 0.93,
    "privacy_class": "semantic_only",
    "requires_cloud_decision": False,
    "correlation": {
        "experience_id": "exp_guardian_001",
        "workflow_id": "wf_guardian_001",
        "step_id": "patrol_areas",
    },
    "facts": {"area_id": "2", "presence": "detected", "verification_state": "pending"},
}


def run_gate_bench(n: int = 50_000, batch: int = 1000) -> dict[str, float]:
    """Admit ``n`` valid observations; return ``median_us``, ``p99_us`` and ``mean_us`` per record,
    ``records_per_s`` (from the median) and ``n``. Raises RuntimeError if one is rejected."""
    gate = Gate(load_registry())
    key = b"airbot-0001"
    batch = max(1, min(batch, n))
    values = [orjson.dumps({**SEED_OBSERVATION, "event_id": f"obs_bench_{i:08d}"}) for i in range(n)]
    admit = gate.admit
    # Warm up (and check that the seed is admitted at all).
    for i, value in enumerate(values[: min(n, 1000)]):
        if not isinstance(
            admit(
                "observations",
                key,
                value,
                source_topic="bench",
                partition=0,
                offset=i,
                received_at_ms=1785400000100,
            ),
            Admitted,
        ):
            raise RuntimeError("the gate rejected the seed observation")
    samples: list[float] = []
    total_ns = 0
    clock = time.perf_counter_ns
    for start in range(0, n, batch):
        chunk = values[start : start + batch]
        t0 = clock()
        for offset, value in enumerate(chunk, start):
            admit(
                "observations",
                key,
                value,
                source_topic="bench",
                partition=0,
                offset=offset,
                received_at_ms=1785400000100,
            )
        elapsed = clock() - t0
        total_ns += elapsed
        samples.append(elapsed / len(chunk) / 1000.0)
    median = statistics.median(samples)
    p99 = pct(samples, 0.99)
    return {
        "n": float(n),
        "median_us": median,
        "p99_us": p99,
        "mean_us": total_ns / n / 1000.0,
        "records_per_s": 1e6 / median if median > 0 else float("inf"),
    }


if __name__ == "__main__":
    print(orjson.dumps(run_gate_bench(), option=orjson.OPT_INDENT_2).decode())

"""The sizes of a ``guardian bench`` run: ``QUICK`` (``--quick``) and ``FULL``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizes:
    devices: int
    records: int
    latency_devices: int
    #: the steady load's first seconds, before the measured ones (probes sent then are reported
    #: apart: the worker's caches and the broker's JIT compiler settle meanwhile)
    warmup_s: float
    latency_s: float
    probes_per_s: float
    perf_records: int
    micro_n: int


QUICK = Sizes(
    devices=2_000,
    records=20_000,
    latency_devices=130,
    warmup_s=3.0,
    latency_s=10.0,
    probes_per_s=10.0,
    perf_records=200_000,
    micro_n=20_000,
)
FULL = Sizes(
    devices=10_000,
    records=100_000,
    latency_devices=800,
    warmup_s=10.0,
    latency_s=30.0,
    probes_per_s=20.0,
    perf_records=1_000_000,
    micro_n=100_000,
)

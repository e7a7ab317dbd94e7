"""The sizes of a ``guardian bench`` run: ``QUICK`` (``--quick``) and ``FULL``.

The throughput run's records are enough for its window to hold several of the worker's acks (a
worker behind a backlog acks every 2 s or 20,000 records, ``GUARDIAN_DEFER_STATE_S``) and for
the floors' window to last a second at 200,000 records/s (``bench.windows``). Each latency
window gets ``probes_per_s * latency_s`` probes, each on a latency device of its own.
"""

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
    #: each measured window's length; there are ``windows`` of them, each reported on its own
    latency_s: float
    probes_per_s: float
    perf_records: int
    micro_n: int
    windows: int = 3

    @property
    def probes(self) -> int:
        """The probes the latency load sends (warm-up and windows), one per latency device."""
        return round(self.probes_per_s * (self.warmup_s + self.windows * self.latency_s))


QUICK = Sizes(
    devices=2_000,
    records=100_000,
    latency_devices=400,
    warmup_s=3.0,
    latency_s=10.0,
    probes_per_s=12.0,
    perf_records=200_000,
    micro_n=20_000,
)
FULL = Sizes(
    devices=10_000,
    records=200_000,
    latency_devices=1_000,
    warmup_s=10.0,
    latency_s=30.0,
    probes_per_s=10.0,
    perf_records=1_000_000,
    micro_n=100_000,
)

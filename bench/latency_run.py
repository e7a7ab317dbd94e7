"""The latency part's load: a steady background of observations plus battery-low probes, timed.

The load runs ``warmup_s`` (its probes reported apart: a fresh broker is still compiling its hot
paths) and then ``windows`` windows of ``latency_s`` each; every window is judged and reported on its
own (``bench.windows``). Battery-low triggers on fresh experiences are timestamped when produced
and matched to their ``return_to_station`` dispatch by ``trigger_event_id``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from bench import kafka_ops
from bench.sizes import Sizes
from bench.timing import pct, probe_latencies, split_windows
from bench.windows import check_latency_window, describe_window
from bench.workload import battery_low, measured_records
from topics.names import TopicNames


class Fleet(Protocol):
    """What the load needs of a benchmark run (``bench.run.Run``)."""

    bootstrap: str
    names: TopicNames
    sizes: Sizes
    t0: int

    @property
    def partitions(self) -> int: ...

    @property
    def devices(self) -> list[str]: ...

    @property
    def lat_devices(self) -> list[str]: ...

    @property
    def lat_t0(self) -> int: ...

    @property
    def measured_t0(self) -> int: ...


@dataclass
class Load:
    """What the load sent and saw (wall-clock seconds)."""

    measured_from: float = 0.0
    sent_at: dict[str, float] = field(default_factory=dict)
    arrived: dict[str, float] = field(default_factory=dict)
    produced_at: dict[str, float] = field(default_factory=dict)
    #: background records sent in each measured window
    background: list[int] = field(default_factory=list)
    achieved: float = 0.0


async def run_load(run: Fleet, rate: float) -> Load:
    sizes, names = run.sizes, run.names
    # a short fetch wait: a partition whose records were just read is fetched again only once
    # the request in flight for the others returns, which with aiokafka's default (500 ms) and
    # a few dispatches per second added up to half a second to a probe
    consumer = AIOKafkaConsumer(
        bootstrap_servers=run.bootstrap,
        request_timeout_ms=30_000,
        enable_auto_commit=False,
        fetch_max_wait_ms=10,
    )
    bg = AIOKafkaProducer(bootstrap_servers=run.bootstrap, linger_ms=5, acks="all")
    probe = AIOKafkaProducer(bootstrap_servers=run.bootstrap, linger_ms=0, acks="all")
    async with kafka_ops.deadline("the latency run's consumer and producers to start", 60):
        await consumer.start()
        await bg.start()
        await probe.start()
    load = Load(background=[0] * sizes.windows)
    stop = asyncio.Event()

    def produced(event_id: str) -> Callable[[asyncio.Future[Any]], None]:
        def done(_: asyncio.Future[Any]) -> None:
            load.produced_at[event_id] = time.time()

        return done

    async def read_dispatches() -> None:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=50)
            now = time.time()
            for msgs in batch.values():
                for m in msgs:
                    trig = orjson.loads(m.value).get("trigger_event_id")
                    if isinstance(trig, str):
                        load.arrived.setdefault(trig, now)

    try:
        tps = [TopicPartition(names.dispatch, p) for p in range(run.partitions)]
        consumer.assign(tps)
        async with kafka_ops.deadline(f"the end offsets of {names.dispatch}", 30):
            await consumer.seek_to_end(*tps)
            for tp in tps:
                await consumer.position(tp)
        reader = asyncio.create_task(read_dispatches())
        lat = run.lat_devices
        background = measured_records(
            names, run.devices, run.t0, run.measured_t0 + sizes.records, 10**9, start=sizes.records
        )
        ts = run.measured_t0 + sizes.records
        start = time.monotonic()
        load.measured_from = time.time() + sizes.warmup_s
        total_s = sizes.warmup_s + sizes.windows * sizes.latency_s
        n_bg = n_probe = 0
        pending: list[asyncio.Future[Any]] = []
        while (elapsed := time.monotonic() - start) < total_s:
            window = int((elapsed - sizes.warmup_s) // sizes.latency_s) if elapsed >= sizes.warmup_s else -1
            while n_bg < rate * elapsed:
                rec = next(background)
                ts = rec.ts
                pending.append(await bg.send(rec.topic, rec.value, key=rec.key, timestamp_ms=rec.ts))
                n_bg += 1
                if 0 <= window < sizes.windows:
                    load.background[window] += 1
            while n_probe < sizes.probes_per_s * elapsed and n_probe < len(lat):
                trig = battery_low(names, lat[n_probe], run.lat_t0 + n_probe, 1, ts)
                event_id = orjson.loads(trig.value)["event_id"]
                load.sent_at[event_id] = time.time()
                fut = await probe.send(trig.topic, trig.value, key=trig.key, timestamp_ms=trig.ts)
                fut.add_done_callback(produced(event_id))
                pending.append(fut)
                n_probe += 1
            if len(pending) > 5000:
                await asyncio.gather(*pending)
                pending.clear()
            await asyncio.sleep(0.005)
        async with kafka_ops.deadline(f"Kafka to acknowledge {len(pending)} latency-run records", 60):
            await asyncio.gather(*pending)
        load.achieved = n_bg / (time.monotonic() - start)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not all(e in load.arrived for e in load.sent_at):  # noqa: ASYNC110
            await asyncio.sleep(0.1)
        stop.set()
        await reader
    finally:
        await bg.stop()
        await probe.stop()
        await consumer.stop()
    return load


def judge(load: Load, sizes: Sizes, rate: float) -> dict[str, Any]:
    """The latency part's result: each window judged and reported, the warm-up apart."""
    split = probe_latencies(load.sent_at, load.arrived, load.measured_from)
    warm = split.warmup
    parts = split_windows(load.sent_at, load.arrived, load.measured_from, sizes.latency_s, sizes.windows)
    windows = [
        describe_window(
            check_latency_window(
                i + 1, lat, missing, rate, load.background[i] / sizes.latency_s, sizes.latency_s
            )
        )
        for i, (lat, missing) in enumerate(parts)
    ]
    return {
        "background_rate_target": rate,
        "background_rate_achieved": load.achieved,
        "probes": len(split.measured_sent),
        "windows": windows,
        "warmup": {
            "seconds": sizes.warmup_s,
            "probes": len(warm) + split.warmup_missing,
            "matched": len(warm),
            "p50_ms": pct(warm, 0.5) if warm else None,
            "p99_ms": pct(warm, 0.99) if warm else None,
            "max_ms": max(warm) if warm else None,
        },
    }


def describe(result: dict[str, Any]) -> list[str]:
    """Lines for the bench's output: one per window."""
    lines = []
    for w in result["windows"]:
        head = f"latency window {w['window']} ({w['seconds']:g} s at {w['rate_achieved']:,.0f} obs/s): "
        if w["valid"]:
            lines.append(
                head + f"p50 {w['p50_ms']} ms, p99 {w['p99_ms']} ms, p99.9 {w['p999_ms']} ms, "
                f"max {w['max_ms']} ms ({w['matched']} probes)"
            )
        else:
            lines.append(head + "NOT VALID, no figure: " + "; ".join(w["reasons"]))
    warm = result["warmup"]
    if warm["p99_ms"] is not None:
        lines.append(
            f"  (the {warm['seconds']:g} s of warm-up before: p50 {warm['p50_ms']:.1f} ms, "
            f"p99 {warm['p99_ms']:.1f} ms, {warm['matched']}/{warm['probes']} probes)"
        )
    return lines

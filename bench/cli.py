"""``guardian bench``: throughput, latency and memory of the pipeline against baselines, in one run.

What it does (``--quick`` shrinks the sizes; ``--only`` picks parts):

1. a broker: ``GUARDIAN_KAFKA_BOOTSTRAP`` (or ``--bootstrap``) when set, else a fresh
   :class:`guardian.kafka_local.LocalBroker` in a temp dir (stopped at the end); topics under a
   unique prefix, ``GUARDIAN_PARTITIONS`` partitions each (deleted at the end);
2. ``pipeline``: the setup records (plan + ``security.started``) of every device are processed by a
   worker, which then leaves; ``N`` observations in the mix of :mod:`bench.workload` are produced;
   a fresh ``guardian worker`` starts on them and its consumer group's committed offsets are polled
   until it has committed them all: the throughput is the input records the worker acked after its
   first acked batch over the time from that batch to its last (the worker's latency trace has a
   line per batch acked; its start-up is not in it; offsets are committed once a second, too coarse
   to time a run of a few seconds by, and the rate by commits is kept as ``by_commits``). The
   worker's peak RSS (``VmHWM``) after it has handled every device is the memory figure;
3. ``latency``: the same worker under a steady load of a quarter of the measured maximum (or
   ``--rate``); battery-low triggers on fresh experiences are timestamped when produced and matched
   to their ``return_to_station`` dispatch by ``trigger_event_id``; the percentiles are over the
   probes sent after the load's first ``warmup_s`` seconds (those before are reported apart);
4. ``passthrough``: a raw aiokafka consume -> JSON decode -> produce loop over the same topic;
   ``faust``: the floors (:mod:`bench.faust_floor`), on the worker's App class over the same
   records: a faust agent that only acks (faust's per-message stream path), and faust's conductor
   handing them to an inbox drained in batches (the worker's path), before any work; timed like
   the pipeline, by the acks each reports;
5. ``broker``: Kafka's ``ProducerPerformance`` and ``ConsumerPerformance`` on the same broker;
6. ``core`` and ``gate``: the micro-benchmarks (one core, no Kafka);
7. ``replay``: ``guardian replay`` over a generated 1 M-record export (:mod:`bench.replay_bench`);
8. ``scaleout``: 1, 2, 4 workers (``--workers``) in one group on the same topics
   (:mod:`bench.scaleout`): aggregate rate, per-worker RSS, the pause a join causes, and every
   output once.

It prints a summary and writes ``OUT/bench.json`` and ``OUT/bench.svg``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from bench import kafka_ops
from bench.core_bench import run_core_bench
from bench.gate_bench import run_gate_bench
from bench.sizes import FULL, QUICK, Sizes
from bench.svg import write_svg
from bench.timing import acked_rate, pct, probe_latencies
from bench.workload import (
    MIX,
    battery_low,
    device_ids,
    measured_records,
    setup_end,
    setup_records,
)
from config.settings import Settings
from topics.names import TopicNames

PARTS = ("pipeline", "latency", "passthrough", "faust", "broker", "core", "gate", "replay", "scaleout")
#: deadlines of the waiting phases (each says what it waited for when it runs out)
SETUP_TIMEOUT_S = 600.0
PIPELINE_TIMEOUT_S = 900.0

TARGETS = {
    "ratio_pipeline_passthrough": (">=", 0.5),
    "ratio_pipeline_inbox_floor": (">=", 0.6),
    "pipeline_obs_per_s": (">=", 20_000.0),
    "latency_p99_ms": ("<=", 100.0),
    "worker_rss_mb_10k_devices": ("<=", 400.0),
    "core_median_us": ("<=", 20.0),
    "replay_records_per_s": (">=", 40_000.0),
    "replay_rss_mb_1m_records": ("<=", 600.0),
}


def machine() -> dict[str, Any]:
    cpu = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu,
        "ram_gib": round(mem / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
    }


@contextlib.contextmanager
def broker_for(settings: Settings, tmp: Path) -> Iterator[tuple[str, str]]:
    """(bootstrap, kind): the configured broker, else a LocalBroker in ``tmp`` (stopped on exit)."""
    if settings.bootstrap:
        yield settings.bootstrap, "external"
        return
    from guardian.kafka_local import LocalBroker

    env = {k: v for k, v in os.environ.items() if k not in ("GUARDIAN_KAFKA_PORT", "GUARDIAN_DATA_DIR")}
    env["GUARDIAN_DATA_DIR"] = str(tmp / "broker")
    broker = LocalBroker.from_settings(replace(settings, data_dir=tmp / "broker"), env=env)
    address = broker.up(timeout_s=120)
    try:
        yield address, "local"
    finally:
        broker.down()


def _classpath(settings: Settings) -> str:
    from guardian.kafka_local import LocalBroker

    return LocalBroker.from_settings(settings).classpath()


@dataclass
class Run:
    """One benchmark run: where, what, and the results so far."""

    settings: Settings
    bootstrap: str
    names: TopicNames
    sizes: Sizes
    out: Path
    work: Path
    t0: int
    results: dict[str, Any]
    #: every subprocess the run started (stopped at the end, whatever happens)
    workers: list[kafka_ops.Worker] = field(default_factory=list)
    #: sample the measured processes with py-spy (``--profile``)
    profile: bool = False
    #: the latency part's measured probes (after the warm-up): event id -> when sent, when its
    #: dispatch was read, when the bench saw Kafka acknowledge it (wall clock)
    probe_times: tuple[dict[str, float], dict[str, float], dict[str, float]] = field(
        default_factory=lambda: ({}, {}, {})
    )

    def spawn(self, worker: kafka_ops.Worker) -> kafka_ops.Worker:
        self.workers.append(worker)
        return worker.start()

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.alive():
                worker.stop()

    @property
    def partitions(self) -> int:
        return self.settings.partitions

    @property
    def group(self) -> str:
        from streams.app import app_id

        return app_id(replace(self.settings, topic_prefix=self.names.prefix))

    def worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            GUARDIAN_KAFKA_BOOTSTRAP=self.bootstrap,
            GUARDIAN_TOPIC_PREFIX=self.names.prefix,
            GUARDIAN_PARTITIONS=str(self.partitions),
            GUARDIAN_DATA_DIR=str(self.work / "worker-data"),
            GUARDIAN_SUPERVISOR="rules",
            GUARDIAN_LATENCY_TRACE=str(self.trace_path),
        )
        return env

    @property
    def trace_path(self) -> Path:
        """The measured worker's latency trace (``bench.latency_trace``)."""
        return self.out / "latency-trace.jsonl"

    def profiler(self, pid: int, name: str) -> Any:
        """py-spy on ``pid`` with ``--profile`` (None otherwise, or without py-spy)."""
        if not self.profile:
            return None
        from bench.profile import Profiler, py_spy

        if py_spy() is None:
            self.say("--profile: py-spy is not installed (pip install py-spy); no profile")
            return None
        return Profiler(pid, self.out / f"profile-{name}.txt")

    def profiled(self, part: str, profiler: Any, label: str) -> None:
        if profiler is None:
            return
        from bench.profile import describe

        result = profiler.stop()
        if result is None:
            self.say(f"--profile: no samples of {label}")
            return
        self.results.setdefault("profiles", {})[part] = result
        for line in describe(result, label):
            self.say(line)

    def say(self, text: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {text}", flush=True)

    # -- the fleet (made once: the latency run asks for ``lat_t0`` per probe, and rebuilding
    # 10,000 device IDs each time took 40 % of the load generator's CPU while it was measuring) --
    @cached_property
    def devices(self) -> list[str]:
        return device_ids(self.sizes.devices)

    @cached_property
    def lat_devices(self) -> list[str]:
        return device_ids(self.sizes.latency_devices, prefix="lat")

    @cached_property
    def lat_t0(self) -> int:
        return setup_end(self.devices, self.t0)

    @cached_property
    def measured_t0(self) -> int:
        return setup_end(self.lat_devices, self.lat_t0)

    # -- pipeline throughput and memory ---------------------------------------------------------
    def pipeline(self) -> kafka_ops.Worker:
        """Measure the worker's throughput; returns the (still running) worker."""
        sizes, names = self.sizes, self.names
        self.trace_path.unlink(missing_ok=True)  # the workers append to it
        setup = setup_records(names, self.devices, self.t0)
        setup += setup_records(names, self.lat_devices, self.lat_t0)
        self.say(f"setup: {len(setup)} records (plans + security.started) for {sizes.devices} devices")
        asyncio.run(kafka_ops.produce(self.bootstrap, setup))
        first = self.spawn(
            kafka_ops.Worker(self.worker_env(), self.out / "worker-setup.log", worker_id="bench")
        )
        try:
            waited = asyncio.run(
                kafka_ops.wait_caught_up(
                    self.bootstrap,
                    self.group,
                    [names.plans, names.task_events],
                    self.partitions,
                    SETUP_TIMEOUT_S,
                    worker=first,
                )
            )
        except TimeoutError as exc:
            first.stop()
            raise RuntimeError(f"setup: {exc}:\n{first.log_tail()}") from None
        first.stop()
        self.say(f"setup processed in {waited:.1f} s (incl. worker start-up)")
        records = list(measured_records(names, self.devices, self.t0, self.measured_t0, sizes.records))
        t = time.monotonic()
        asyncio.run(kafka_ops.produce(self.bootstrap, records))
        produce_s = time.monotonic() - t
        self.say(f"produced {len(records)} observations in {produce_s:.1f} s")
        worker = self.spawn(kafka_ops.Worker(self.worker_env(), self.out / "worker.log", worker_id="bench"))
        spawned, spawned_at = time.monotonic(), time.time()
        cpu0 = 0.0
        profiling: list[Any] = []

        def profile_from_now() -> None:  # from its first commit: its start-up is not in the profile
            profiling.append(self.profiler(worker.pid, "worker"))

        try:
            samples = asyncio.run(
                self._watch(worker, names.observations, len(records), self.group, on_first=profile_from_now)
            )
        except (TimeoutError, RuntimeError):
            worker.stop()
            raise
        finally:
            self.profiled("pipeline", profiling[0] if profiling else None, "the measured worker")
        done_at = time.time()
        (t_first, c_first), (t_last, c_last) = samples[0], samples[-1]
        cpu = kafka_ops.proc_cpu_s(worker.pid) or cpu0
        by_commits = commit_rate(samples)
        # timed by the worker's own acks (its latency trace has a line per batch acked), as the
        # floors are: offsets are committed once a second, coarse for a run of a few seconds
        timed = acked_rate(self.trace_path, spawned_at, done_at)
        if timed is None:
            timed = {
                "records_per_s": by_commits,
                "measured_records": c_last - c_first,
                "measured_s": t_last - t_first,
            }
        rate = timed["records_per_s"]
        hwm = kafka_ops.proc_status(worker.pid, "VmHWM") or 0
        rss = kafka_ops.proc_status(worker.pid, "VmRSS") or 0
        self.results["pipeline"] = {
            "records": len(records),
            "devices": sizes.devices,
            "partitions": self.partitions,
            "mix": MIX,
            "records_per_s": rate,
            "measured_records": timed["measured_records"],
            "measured_s": timed["measured_s"],
            "by_commits": by_commits,
            "startup_s": t_first - spawned,
            "commit_samples": len(samples),
            "worker_cpu_s_total": cpu,
            "producer_records_per_s": len(records) / produce_s,
        }
        self.results["rss"] = {
            "devices": sizes.devices + sizes.latency_devices,
            "vm_hwm_mb": hwm / 2**20,
            "vm_rss_mb": rss / 2**20,
        }
        self.say(
            f"pipeline: {rate:,.0f} obs/s over {timed['measured_records']:,.0f} records acked in "
            f"{timed['measured_s']:.2f} s ({by_commits:,.0f} by its commits; "
            f"start-up {t_first - spawned:.1f} s); worker peak RSS {hwm / 2**20:.0f} MB"
        )
        return worker

    async def _watch(
        self,
        worker: kafka_ops.Worker,
        topic: str,
        expected: int,
        group: str,
        on_first: Callable[[], None] | None = None,
    ) -> list[tuple[float, int]]:
        """(time, committed) at every change of the committed total, from the first advance to the end
        (when everything was committed at once: from the last poll that saw nothing committed)."""
        ends = await kafka_ops.end_offsets(self.bootstrap, [topic], self.partitions)
        target = sum(ends.values())
        if target < expected:
            raise RuntimeError(f"only {target} of {expected} records are on {topic}")
        samples: list[tuple[float, int]] = []
        last = -1
        deadline = time.monotonic() + PIPELINE_TIMEOUT_S
        async with kafka_ops.GroupWatch(self.bootstrap, group) as watch:
            base: int | None = None
            before_first = time.monotonic()
            while True:
                committed = sum((await watch.committed([topic])).values())
                now = time.monotonic()
                if base is None:
                    base = committed
                if committed == base:
                    before_first = now
                if committed != last and committed > base:
                    if not samples and on_first is not None:
                        on_first()
                    samples.append((now, committed))
                    last = committed
                if committed >= target:
                    return samples if len(samples) >= 2 else [(before_first, base), (now, committed)]
                if not worker.alive():
                    raise RuntimeError(f"the worker exited:\n{worker.log_tail()}")
                if now > deadline:
                    raise TimeoutError(
                        f"waited {PIPELINE_TIMEOUT_S:.0f} s for group {group} to commit the {target} records "
                        f"of {topic}: {committed} committed"
                    )
                await asyncio.sleep(0.1)

    # -- latency ---------------------------------------------------------------------------------
    async def latency(self, rate: float) -> dict[str, Any]:
        sizes, names = self.sizes, self.names
        # a short fetch wait: a partition whose records were just read is fetched again only once
        # the request in flight for the others returns, which with aiokafka's default (500 ms) and
        # a few dispatches per second added up to half a second to a probe
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            request_timeout_ms=30_000,
            enable_auto_commit=False,
            fetch_max_wait_ms=10,
        )
        bg = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5, acks="all")
        probe = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=0, acks="all")
        async with kafka_ops.deadline("the latency run's consumer and producers to start", 60):
            await consumer.start()
            await bg.start()
            await probe.start()
        arrived: dict[str, float] = {}
        sent_at: dict[str, float] = {}
        produced_at: dict[str, float] = {}

        def produced(event_id: str) -> Callable[[asyncio.Future[Any]], None]:
            def done(_: asyncio.Future[Any]) -> None:
                produced_at[event_id] = time.time()

            return done

        stop = asyncio.Event()

        async def read_dispatches() -> None:
            while not stop.is_set():
                batch = await consumer.getmany(timeout_ms=50)
                now = time.time()
                for msgs in batch.values():
                    for m in msgs:
                        trig = orjson.loads(m.value).get("trigger_event_id")
                        if isinstance(trig, str):
                            arrived.setdefault(trig, now)

        try:
            tps = [TopicPartition(names.dispatch, p) for p in range(self.partitions)]
            consumer.assign(tps)
            async with kafka_ops.deadline(f"the end offsets of {names.dispatch}", 30):
                await consumer.seek_to_end(*tps)
                for tp in tps:
                    await consumer.position(tp)
            reader = asyncio.create_task(read_dispatches())
            lat = self.lat_devices
            background = measured_records(
                names, self.devices, self.t0, self.measured_t0 + sizes.records, 10**9, start=sizes.records
            )
            ts = self.measured_t0 + sizes.records
            start = time.monotonic()
            measured_from = time.time() + sizes.warmup_s
            n_bg = n_probe = 0
            pending: list[asyncio.Future[Any]] = []
            while True:
                elapsed = time.monotonic() - start
                if elapsed >= sizes.warmup_s + sizes.latency_s:
                    break
                while n_bg < rate * elapsed:
                    rec = next(background)
                    ts = rec.ts
                    pending.append(await bg.send(rec.topic, rec.value, key=rec.key, timestamp_ms=rec.ts))
                    n_bg += 1
                while n_probe < sizes.probes_per_s * elapsed and n_probe < len(lat):
                    dev = lat[n_probe]
                    trig = battery_low(names, dev, self.lat_t0 + n_probe, 1, ts)
                    event_id = orjson.loads(trig.value)["event_id"]
                    sent_at[event_id] = time.time()
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
            achieved = n_bg / (time.monotonic() - start)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not all(e in arrived for e in sent_at):  # noqa: ASYNC110
                await asyncio.sleep(0.1)
            stop.set()
            await reader
        finally:
            await bg.stop()
            await probe.stop()
            await consumer.stop()
        split = probe_latencies(sent_at, arrived, measured_from)
        latencies, warm = split.measured, split.warmup
        self.probe_times = (split.measured_sent, arrived, produced_at)
        return {
            "background_rate_target": rate,
            "background_rate_achieved": achieved,
            "probes": len(split.measured_sent),
            "matched": len(latencies),
            "p50_ms": statistics.median(latencies) if latencies else None,
            "p99_ms": pct(latencies, 0.99) if latencies else None,
            "p999_ms": pct(latencies, 0.999) if latencies else None,
            "max_ms": max(latencies) if latencies else None,
            "seconds": sizes.latency_s,
            "warmup": {
                "seconds": sizes.warmup_s,
                "probes": len(warm) + split.warmup_missing,
                "matched": len(warm),
                "p50_ms": statistics.median(warm) if warm else None,
                "p99_ms": pct(warm, 0.99) if warm else None,
                "max_ms": max(warm) if warm else None,
            },
        }

    # -- baselines ------------------------------------------------------------------------------
    def observations_on_topic(self) -> int:
        """The records on the observations topic (the measured workload, produced if not there yet)."""
        names = self.names
        ends = asyncio.run(kafka_ops.end_offsets(self.bootstrap, [names.observations], self.partitions))
        expected = sum(ends.values())
        if expected == 0:
            records = list(
                measured_records(names, self.devices, self.t0, self.measured_t0, self.sizes.records)
            )
            asyncio.run(kafka_ops.produce(self.bootstrap, records))
            expected = len(records)
        return expected

    def passthrough(self) -> None:
        names = self.names
        sink = names.prefix + "passthrough"
        asyncio.run(kafka_ops.create_extra_topics(self.bootstrap, [sink], self.partitions))
        expected = self.observations_on_topic()
        res = asyncio.run(
            kafka_ops.passthrough(
                self.bootstrap, names.observations, sink, names.prefix + "passthrough-group", expected, 600
            )
        )
        self.results["passthrough"] = res
        self.say(f"raw aiokafka passthrough: {res['records_per_s']:,.0f} records/s over {expected}")

    def faust_floor(self) -> None:
        """The floors over the same records (``bench.faust_floor``): a faust agent that only acks,
        and faust's conductor handing them to an inbox drained in batches (the worker's path)."""
        names = self.names
        expected = self.observations_on_topic()
        for mode, key, label in (
            ("agent", "faust_floor", "faust floor (an agent that only acks)"),
            ("inbox", "inbox_floor", "inbox floor (conductor -> batches, only acks)"),
        ):
            group = f"{names.prefix}{mode}-floor"
            progress_path = self.out / f"{mode}-floor-acks.jsonl"
            progress_path.unlink(missing_ok=True)
            started = time.time()
            argv = [
                "bench.faust_floor",
                mode,
                self.bootstrap,
                names.observations,
                group,
                str(self.partitions),
                str(self.work / f"{mode}-floor"),
                str(progress_path),
            ]
            log = self.out / f"{mode}-floor.log"
            floor = self.spawn(kafka_ops.Worker(dict(os.environ), log, module_argv=argv))
            profiling: list[Any] = []

            def profile_floor(pid: int = floor.pid, name: str = mode, into: list[Any] = profiling) -> None:
                if name == "inbox":
                    into.append(self.profiler(pid, f"{name}-floor"))

            try:
                samples = asyncio.run(
                    self._watch(floor, names.observations, expected, group, on_first=profile_floor)
                )
            finally:
                self.profiled(key, profiling[0] if profiling else None, label)
                floor.stop()
            # timed by its own acks (its offsets are committed once a second: a quick run's records
            # are all acked within one or two commits)
            timed = acked_rate(progress_path, started, time.time())
            if timed is None:
                raise RuntimeError(f"the {label} wrote no progress to time it by:\n{floor.log_tail()}")
            self.results[key] = {**timed, "by_commits": commit_rate(samples)}
            self.say(
                f"{label}: {timed['records_per_s']:,.0f} records/s over {expected} "
                f"({timed['measured_records']:,.0f} acked in {timed['measured_s']:.2f} s)"
            )

    def broker(self) -> None:
        names = self.names
        cp = _classpath(self.settings)
        perf_topic = names.prefix + "perf"
        asyncio.run(kafka_ops.create_extra_topics(self.bootstrap, [perf_topic], self.partitions))
        prod = kafka_ops.producer_perf(cp, self.bootstrap, perf_topic, self.sizes.perf_records, 400)
        self.say(f"Kafka ProducerPerformance: {prod['records_per_s']:,.0f} records/s (400 B)")
        ends = asyncio.run(kafka_ops.end_offsets(self.bootstrap, [names.observations], self.partitions))
        on_obs = sum(ends.values())
        topic, count = (names.observations, on_obs) if on_obs > 0 else (perf_topic, self.sizes.perf_records)
        cons = kafka_ops.consumer_perf(cp, self.bootstrap, topic, count, names.prefix + "perf-group")
        self.say(f"Kafka ConsumerPerformance: {cons['records_per_s']:,.0f} records/s over {topic}")
        self.results["broker"] = {
            "producer_perf": prod,
            "consumer_perf": {**cons, "topic": topic},
        }


def commit_rate(samples: list[tuple[float, int]]) -> float:
    """Records committed per second between the first and the last sample of ``_watch``."""
    (t_first, c_first), (t_last, c_last) = samples[0], samples[-1]
    return (c_last - c_first) / (t_last - t_first) if t_last > t_first else 0.0


def evaluate(results: dict[str, Any]) -> dict[str, Any]:
    values: dict[str, float | None] = {
        "ratio_pipeline_passthrough": results.get("ratio_pipeline_passthrough"),
        "ratio_pipeline_inbox_floor": results.get("ratio_pipeline_inbox_floor"),
        "pipeline_obs_per_s": results.get("pipeline", {}).get("records_per_s"),
        "latency_p99_ms": results.get("latency", {}).get("p99_ms"),
        "worker_rss_mb_10k_devices": results.get("rss", {}).get("vm_hwm_mb"),
        "core_median_us": results.get("core", {}).get("median_us"),
        "replay_records_per_s": results.get("replay", {}).get("records_per_s"),
        "replay_rss_mb_1m_records": results.get("replay", {}).get("rss_mb"),
    }
    out: dict[str, Any] = {}
    for name, (op, target) in TARGETS.items():
        value = values[name]
        met = None if value is None else (value >= target if op == ">=" else value <= target)
        out[name] = {"target": f"{op} {target:g}", "value": value, "met": met}
    rss_devices = results.get("rss", {}).get("devices", 0)
    if rss_devices and rss_devices < 10_000:
        out["worker_rss_mb_10k_devices"]["met"] = None
        out["worker_rss_mb_10k_devices"]["note"] = f"measured at {rss_devices} devices only"
    replayed = results.get("replay", {}).get("records", 0)
    if replayed and replayed < 1_000_000:
        out["replay_rss_mb_1m_records"]["met"] = None
        out["replay_rss_mb_1m_records"]["note"] = f"measured at {replayed} records only"
    return out


def cmd_bench(args: argparse.Namespace, settings: Settings) -> int:
    """The benchmark; SIGINT and SIGTERM stop it cleanly (workers, topics, a broker it started)."""
    from config.exitcodes import sigterm_as_interrupt

    with sigterm_as_interrupt():
        return _bench(args, settings)


def _bench(args: argparse.Namespace, settings: Settings) -> int:
    sizes = QUICK if args.quick else FULL
    if getattr(args, "devices", None):
        sizes = replace(sizes, devices=int(args.devices))
    if getattr(args, "records", None):
        sizes = replace(sizes, records=int(args.records))
    only = set(PARTS) if not args.only else {p.strip() for p in args.only.split(",") if p.strip()}
    unknown = only - set(PARTS)
    if unknown:
        known = ", ".join(PARTS)
        print(f"guardian bench: unknown part(s) {sorted(unknown)}; known: {known}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {
        "machine": machine(),
        "mode": "quick" if args.quick else "full",
        "sizes": sizes.__dict__,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    started = time.monotonic()
    if "gate" in only:
        results["gate"] = run_gate_bench(n=sizes.micro_n)
        print(f"gate micro-benchmark: {results['gate']['median_us']:.1f} µs/record (median)", flush=True)
    if "core" in only:
        results["core"] = run_core_bench(n=sizes.micro_n)
        core = results["core"]
        print(
            f"core micro-benchmark: {core['median_us']:.1f} µs/observation alone, "
            f"{core['with_gate_median_us']:.1f} µs with the gate (medians)",
            flush=True,
        )
    if "replay" in only:
        _replay_part(results, sizes, quick=bool(args.quick))
    kafka_parts = only & {"pipeline", "latency", "passthrough", "faust", "broker", "scaleout"}
    if kafka_parts:
        with tempfile.TemporaryDirectory(prefix="guardian-bench-") as tmpdir:
            tmp = Path(tmpdir)
            with broker_for(settings, tmp) as (bootstrap, kind):
                results["broker_kind"] = kind
                prefix = f"{settings.topic_prefix}bench-{uuid.uuid4().hex[:8]}."
                names = TopicNames(prefix)
                from streams.admin import create_topics, delete_topics, worker_topics

                asyncio.run(create_topics(bootstrap, names, settings.partitions))
                run = Run(
                    settings, bootstrap, names, sizes, out, tmp, int(time.time() * 1000) - 3_600_000, results
                )
                run.profile = bool(getattr(args, "profile", False))
                run.say(f"broker {bootstrap} ({kind}), topics {prefix}*, {settings.partitions} partitions")
                try:
                    _kafka_parts(run, kafka_parts, args)
                finally:
                    run.stop_all()
                    with contextlib.suppress(Exception):
                        extra = [prefix + s for s in ("passthrough", "perf")]
                        asyncio.run(delete_topics(bootstrap, [*worker_topics(names), *extra], timeout_s=30))
    pipe = results.get("pipeline", {}).get("records_per_s")
    raw = results.get("passthrough", {}).get("records_per_s")
    if pipe and raw:
        results["ratio_pipeline_passthrough"] = pipe / raw
    for floor in ("faust_floor", "inbox_floor"):
        rate = results.get(floor, {}).get("records_per_s")
        if pipe and rate:
            results[f"ratio_pipeline_{floor}"] = pipe / rate
    results["targets"] = evaluate(results)
    results["wall_s"] = time.monotonic() - started
    (out / "bench.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    write_svg(out / "bench.svg", results)
    print_summary(results)
    print(f"wrote {out / 'bench.json'} and {out / 'bench.svg'} ({results['wall_s']:.0f} s)")
    return 0


def _replay_part(results: dict[str, Any], sizes: Sizes, *, quick: bool) -> None:
    from bench.replay_bench import RECORDS_FULL, RECORDS_QUICK, run_replay_bench

    rep = run_replay_bench(RECORDS_QUICK if quick else RECORDS_FULL, sizes.devices)
    results["replay"] = rep
    report = rep.get("report") or {}
    print(
        f"replay: {rep['records']:,} records in {rep['wall_s']:.1f} s = {rep['records_per_s']:,.0f} rec/s "
        f"(one job; {rep['records_per_cpu_s'] or 0:,.0f} per CPU second), peak RSS {rep['rss_mb']:.0f} MB; "
        f"report {report.get('wall_s', 0):.1f} s, "
        f"{report.get('rss_mb', 0):.0f} MB RSS, {report.get('mb') or 0:.1f} MB file",
        flush=True,
    )


def _kafka_parts(run: Run, parts: set[str], args: argparse.Namespace) -> None:
    worker: kafka_ops.Worker | None = None
    try:
        if "pipeline" in parts or "latency" in parts:
            worker = run.pipeline()
        if "latency" in parts and worker is not None:
            maximum = run.results["pipeline"]["records_per_s"]
            rate = float(args.rate) if getattr(args, "rate", None) else maximum / 4
            run.say(
                f"latency: steady load {rate:,.0f} obs/s, {run.sizes.probes_per_s:g} probes/s "
                f"({run.sizes.warmup_s:g} s of warm-up, then {run.sizes.latency_s:g} s measured)"
            )
            res = asyncio.run(run.latency(rate))
            run.results["latency"] = res
            worker.stop()  # its trace is complete once it has left
            from bench import latency_trace

            sent_at, arrived, produced_at = run.probe_times
            trace = latency_trace.slowest(sent_at, arrived, run.trace_path, produced_at=produced_at)
            res["trace"] = trace
            for line in latency_trace.describe(trace):
                run.say(line)
            warm = res["warmup"]
            run.say(
                f"trigger->dispatch p50 {res['p50_ms']} ms, p99 {res['p99_ms']} ms, "
                f"p99.9 {res['p999_ms']} ms "
                f"({res['matched']}/{res['probes']} matched); during the warm-up: p50 {warm['p50_ms']} ms, "
                f"p99 {warm['p99_ms']} ms ({warm['matched']}/{warm['probes']} matched)"
            )
    finally:
        if worker is not None:
            code = worker.stop()
            run.results.setdefault("pipeline", {})["worker_exit"] = code
    if "passthrough" in parts:
        run.passthrough()
    if "faust" in parts:
        run.faust_floor()
    if "broker" in parts:
        run.broker()
    if "scaleout" in parts:
        from bench.scaleout import run_scaleout

        counts = [int(n) for n in str(getattr(args, "workers", None) or "1,2,4").split(",")]
        run.results["scaleout"] = run_scaleout(run, counts)


def print_summary(results: dict[str, Any]) -> None:
    print("\n== guardian bench ==")
    m = results["machine"]
    print(f"machine: {m['nproc']} cores, {m['cpu']}, {m['ram_gib']} GiB")
    for name, t in results["targets"].items():
        value = t["value"]
        shown = "-" if value is None else f"{value:,.2f}"
        verdict = {True: "met", False: "NOT met", None: "not measured"}[t["met"]]
        print(f"  {name:30s} {shown:>14s}  target {t['target']:>10s}  {verdict}")
    broker = results.get("broker")
    if broker:
        print(
            f"  kafka producer perf {broker['producer_perf']['records_per_s']:,.0f} rec/s, "
            f"consumer perf {broker['consumer_perf']['records_per_s']:,.0f} rec/s"
        )
    if "passthrough" in results:
        print(f"  raw passthrough {results['passthrough']['records_per_s']:,.0f} rec/s")
    for floor, label in (("faust_floor", "faust agent floor"), ("inbox_floor", "inbox floor")):
        if floor in results:
            rate = results[floor]["records_per_s"]
            share = results.get(f"ratio_pipeline_{floor}")
            of_floor = f" (pipeline = {share:.2f} of it)" if share else ""
            print(f"  {label} (only acks) {rate:,.0f} rec/s{of_floor}")
    pipe = results.get("pipeline")
    if pipe and pipe.get("records_per_s"):
        rss = results.get("rss", {})
        print(
            f"  pipeline {pipe['records_per_s']:,.0f} obs/s ({pipe['devices']:,} devices, "
            f"{pipe['partitions']} partitions), worker peak RSS {rss.get('vm_hwm_mb', 0):.0f} MB"
        )
    lat = results.get("latency")
    if lat and lat.get("p99_ms") is not None:
        print(
            f"  trigger->dispatch at {lat['background_rate_achieved']:,.0f} obs/s: "
            f"p50 {lat['p50_ms']:.1f} ms, p99 {lat['p99_ms']:.1f} ms, "
            f"p99.9 {lat['p999_ms']:.1f} ms, max {lat['max_ms']:.1f} ms "
            f"({lat['matched']}/{lat['probes']} probes)"
        )
        warm = lat.get("warmup") or {}
        if warm.get("p99_ms") is not None:
            print(
                f"    (the {warm['seconds']:g} s of warm-up before: p50 {warm['p50_ms']:.1f} ms, "
                f"p99 {warm['p99_ms']:.1f} ms, max {warm['max_ms']:.1f} ms, "
                f"{warm['matched']}/{warm['probes']} probes)"
            )
    for n, res in (results.get("scaleout") or {}).items():
        print(
            f"  scale-out {n} worker(s): {res['records_per_s']:,.0f} rec/s aggregate, "
            f"{res['steady_records_per_s']:,.0f} after the last pause, "
            f"pause {res['rebalance_pause_s']:.1f} s, "
            f"RSS {'/'.join(f'{r:.0f}' for r in res['rss_mb'])} MB, {res['missing']} missing, "
            f"{res['unexpected']} unexpected, {res['duplicates']} extra copies"
        )
    for part in ("core", "gate"):
        if part in results:
            print(f"  {part} micro-benchmark {results[part]['median_us']:.1f} µs median")

"""``bench.run.Run``: one benchmark run (its broker, topics, sizes, output folder and the results
so far) and the parts it measures on Kafka: the pipeline's throughput and memory, the raw aiokafka
passthrough, the faust floors and Kafka's own performance tools."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from bench import kafka_ops, layout, windows
from bench.sizes import Sizes
from bench.timing import ack_marks
from bench.watch import commit_rate, watch
from bench.workload import MIX, device_ids, measured_records, setup_end, setup_records
from config.settings import Settings
from topics.names import TopicNames

#: deadlines of the waiting phases (each says what it waited for when it runs out)
SETUP_TIMEOUT_S = 600.0


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
    #: the measured processes' cores and the others' (``bench.layout``)
    cores: layout.Layout = field(default_factory=layout.current)
    #: every core the run may use (the scale-out part's workers share them)
    allowed: frozenset[int] = field(default_factory=lambda: frozenset(os.sched_getaffinity(0)))

    def spawn(self, worker: kafka_ops.Worker) -> kafka_ops.Worker:
        """Start ``worker`` (on every core the run may use unless it was given its own)."""
        if worker.cores is None:
            worker.cores = self.allowed
        self.workers.append(worker)
        return worker.start()

    def measured(self, worker: kafka_ops.Worker) -> kafka_ops.Worker:
        """Start a measured process on the measured processes' core."""
        worker.cores = self.cores.worker
        return self.spawn(worker)

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
        first = self.measured(
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
        worker = self.measured(
            kafka_ops.Worker(self.worker_env(), self.out / "worker.log", worker_id="bench")
        )
        spawned, spawned_at = time.monotonic(), time.time()
        profiling: list[Any] = []

        def profile_from_now() -> None:  # from its first commit: its start-up is not in the profile
            profiling.append(self.profiler(worker.pid, "worker"))

        try:
            seen = asyncio.run(
                watch(
                    self.bootstrap,
                    self.partitions,
                    worker,
                    names.observations,
                    len(records),
                    self.group,
                    on_first=profile_from_now,
                )
            )
        except (TimeoutError, RuntimeError):
            worker.stop()
            raise
        finally:
            self.profiled("pipeline", profiling[0] if profiling else None, "the measured worker")
        # timed by the worker's own acks (its latency trace has a line per batch acked), as the
        # floors are: offsets are committed once a second, coarse for a run of a few seconds
        timed = windows.acked_window(
            ack_marks(self.trace_path, spawned_at, time.time()), len(records), seen.cpu
        )
        hwm = kafka_ops.proc_status(worker.pid, "VmHWM") or 0
        rss = kafka_ops.proc_status(worker.pid, "VmRSS") or 0
        startup_s = seen.commits[0][0] - spawned
        self.results["pipeline"] = {
            "records": len(records),
            "devices": sizes.devices,
            "partitions": self.partitions,
            "mix": MIX,
            **timed,
            "by_commits": commit_rate(seen.commits),
            "startup_s": startup_s,
            "commit_samples": len(seen.commits),
            "worker_cpu_s_total": kafka_ops.proc_cpu_s(worker.pid),
            "producer_records_per_s": len(records) / produce_s,
        }
        self.results["rss"] = {
            "devices": sizes.devices + sizes.latency_devices,
            "vm_hwm_mb": hwm / 2**20,
            "vm_rss_mb": rss / 2**20,
        }
        self.say(
            f"pipeline: {measured_line(timed, 'obs/s')} (start-up {startup_s:.1f} s); "
            f"worker peak RSS {hwm / 2**20:.0f} MB"
        )
        return worker

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
        with layout.running_on(self.cores.worker):  # measured as the worker is, on its core
            res = asyncio.run(
                kafka_ops.passthrough(
                    self.bootstrap,
                    names.observations,
                    sink,
                    names.prefix + "passthrough-group",
                    expected,
                    600,
                )
            )
        window = windows.check_throughput(int(res["records"]), res["seconds"], expected)
        timed: dict[str, Any] = window.as_dict()
        if window.valid:
            timed.update(cpu_s=res["cpu_s"], cpu_us_per_record=res["cpu_s"] / window.records * 1e6)
        self.results["passthrough"] = timed
        self.say(f"raw aiokafka passthrough: {measured_line(timed, 'records/s')}")

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
            floor = self.measured(kafka_ops.Worker(dict(os.environ), log, module_argv=argv))
            profiling: list[Any] = []

            def profile_floor(pid: int = floor.pid, name: str = mode, into: list[Any] = profiling) -> None:
                if name == "inbox":
                    into.append(self.profiler(pid, f"{name}-floor"))

            try:
                seen = asyncio.run(
                    watch(
                        self.bootstrap,
                        self.partitions,
                        floor,
                        names.observations,
                        expected,
                        group,
                        profile_floor,
                    )
                )
            finally:
                self.profiled(key, profiling[0] if profiling else None, label)
                floor.stop()
            # timed by its own acks (its offsets are committed once a second: a quick run's records
            # are all acked within one or two commits)
            timed = windows.acked_window(ack_marks(progress_path, started, time.time()), expected, seen.cpu)
            self.results[key] = {**timed, "by_commits": commit_rate(seen.commits)}
            self.say(f"{label}: {measured_line(timed, 'records/s')} of {expected:,}")

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


def measured_line(timed: dict[str, Any], unit: str) -> str:
    """A throughput part's figure, or, from a window that is not valid, why there is none."""
    got = f"{timed['measured_records']:,} records in {timed['measured_s']:.2f} s"
    if not timed["valid"]:
        return f"NOT VALID, no figure ({got}): " + "; ".join(timed["reasons"])
    cpu = timed.get("cpu_us_per_record")
    per = f", {cpu:,.1f} µs of CPU per record" if cpu is not None else ""
    return f"{timed['records_per_s']:,.0f} {unit} ({got}{per})"

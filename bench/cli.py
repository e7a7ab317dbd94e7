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
   line per batch acked; its start-up is not in it), and only from a valid window
   (:mod:`bench.windows`; the rate by its commits, once a second, is kept as ``by_commits``); its
   CPU time per observation over the same window. The worker's peak RSS (``VmHWM``) after it has
   handled every device is the memory figure;
3. ``latency`` (:mod:`bench.latency_run`): the same worker under a steady load of a quarter of a
   valid measured maximum (or ``--rate``; refused without either), a warm-up, then three windows,
   each judged and reported on its own;
4. ``passthrough``: a raw aiokafka consume -> JSON decode -> produce loop over the same topic;
   ``faust``: the floors (:mod:`bench.faust_floor`), on the worker's App class over the same
   records: a faust agent that only acks (faust's per-message stream path), and faust's conductor
   handing them to an inbox drained in batches (the worker's path), before any work; timed like
   the pipeline, by the acks each reports, judged like it, with their CPU time per record;
5. ``broker``: Kafka's ``ProducerPerformance`` and ``ConsumerPerformance`` on the same broker;
6. ``core`` and ``gate``: the micro-benchmarks (one core, no Kafka);
7. ``replay``: ``guardian replay`` over a generated 1 M-record export (:mod:`bench.replay_bench`);
8. ``scaleout``: 1, 2, 4 workers (``--workers``) in one group on the same topics
   (:mod:`bench.scaleout`): aggregate rate, per-worker RSS, the pause a join causes, and every
   output once.
9. ``console``: the live console's core following the outputs of a replayed fleet of
   ``devices`` (10,000 in a full run): records/s and peak RSS (:mod:`bench.console_bench`).

The measured processes run on a core of their own, the broker and the load generator on the
others (:mod:`bench.layout`). It prints a summary and writes ``OUT/bench.json``, ``OUT/bench.svg``
and ``OUT/results.json``; a run of every part also writes its figures to ``bench/results/``
(:mod:`bench.results`). It exits 1 when a measured window was not valid, naming it and why.

The run and its Kafka parts (2 to 5) are :class:`bench.run.Run`; the parts' names are
:data:`bench.parts.PARTS`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from bench import kafka_ops, layout, windows
from bench.core_bench import run_core_bench
from bench.gate_bench import run_gate_bench
from bench.parts import PARTS
from bench.run import SETUP_TIMEOUT_S, Run, measured_line
from bench.sizes import FULL, QUICK, Sizes
from bench.svg import write_svg
from bench.targets import evaluate
from config.settings import Settings
from topics.names import TopicNames

__all__ = ["PARTS", "SETUP_TIMEOUT_S", "Run", "broker_for", "cmd_bench", "machine", "measured_line"]


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
        "cores_allowed": sorted(os.sched_getaffinity(0)),
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
    cores = layout.current()
    results: dict[str, Any] = {
        "machine": machine(),
        "mode": "quick" if args.quick else "full",
        "sizes": sizes.__dict__,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "layout": cores.as_dict(),
        "load_average_at_start": list(os.getloadavg()),
    }
    print(cores.describe(), flush=True)
    started = time.monotonic()
    with layout.running_on(cores.worker):  # the micro-benchmarks and the replay: one core, the worker's
        _one_core_parts(results, sizes, only, quick=bool(args.quick))
    kafka_parts = only & {"pipeline", "latency", "passthrough", "faust", "broker", "scaleout"}
    if kafka_parts:
        # the bench (the load generator) and what it starts (the broker, Kafka's tools) on the others
        with layout.running_on(cores.others), tempfile.TemporaryDirectory(prefix="guardian-bench-") as tmpdir:
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
                run.cores, run.allowed = cores, cores.worker | cores.others
                run.say(f"broker {bootstrap} ({kind}), topics {prefix}*, {settings.partitions} partitions")
                try:
                    _kafka_parts(run, kafka_parts, args)
                finally:
                    run.stop_all()
                    with contextlib.suppress(Exception):
                        extra = [prefix + s for s in ("passthrough", "perf")]
                        asyncio.run(delete_topics(bootstrap, [*worker_topics(names), *extra], timeout_s=30))
    results["load_average_at_end"] = list(os.getloadavg())
    results["targets"] = evaluate(results)
    results["wall_s"] = time.monotonic() - started
    (out / "bench.json").write_bytes(orjson.dumps(results, option=orjson.OPT_INDENT_2))
    write_svg(out / "bench.svg", results)
    from bench import report_tables
    from bench import results as kept

    figures = kept.figures(results, **kept.provenance())
    (out / "results.json").write_bytes(kept.dumps(figures))
    print("\n" + report_tables.summary(str(out / "results.json"), figures), flush=True)
    wrote = ", ".join(str(out / f) for f in ("bench.json", "bench.svg", "results.json"))
    print(f"wrote {wrote} ({results['wall_s']:.0f} s)")
    if only == set(PARTS):
        print(kept.keep(figures), flush=True)
    invalid = kept.not_valid(figures)
    for why in invalid:
        print(f"guardian bench: {why}", file=sys.stderr)
    return 1 if invalid else 0


def _one_core_parts(results: dict[str, Any], sizes: Sizes, only: set[str], *, quick: bool) -> None:
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
        _replay_part(results, sizes, quick=quick)
    if "console" in only:
        from bench.console_bench import console_part

        console_part(results, sizes.devices, quick=quick)


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
            _latency_part(run, worker, getattr(args, "rate", None))
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


def _latency_part(run: Run, worker: kafka_ops.Worker, asked: float | None) -> None:
    """The latency part at a load derived from a valid throughput (or ``--rate``), else not run."""
    from bench import latency_run, latency_trace

    try:
        rate = windows.latency_rate(run.results.get("pipeline"), asked)
    except windows.Refused as exc:
        run.results["latency"] = {"refused": str(exc)}
        run.say(f"latency: NOT RUN: {exc}")
        return
    sizes = run.sizes
    run.say(
        f"latency: steady load {rate:,.0f} obs/s, {sizes.probes_per_s:g} probes/s ({sizes.warmup_s:g} s of "
        f"warm-up, then {sizes.windows} windows of {sizes.latency_s:g} s)"
    )
    load = asyncio.run(latency_run.run_load(run, rate))
    res = latency_run.judge(load, sizes, rate)
    run.results["latency"] = res
    worker.stop()  # its trace is complete once it has left
    measured = {e: t for e, t in load.sent_at.items() if t >= load.measured_from}
    trace = latency_trace.slowest(measured, load.arrived, run.trace_path, produced_at=load.produced_at)
    res["trace"] = trace
    for line in latency_trace.describe(trace):
        run.say(line)
    for line in latency_run.describe(res):
        run.say(line)

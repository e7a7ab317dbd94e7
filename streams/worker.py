"""``guardian worker``: the pipeline as a faust worker (several may run in one consumer group).

Before faust starts, the worker checks what would otherwise fail late or silently: the registry,
the broker (one line naming the address within ``BROKER_WAIT_S``), every topic it uses with a
leader for each partition (the tables' changelogs created when missing: faust's assignor skips a
topic the cluster metadata does not show yet, and a table whose changelog missed the first
assignment never recovers), the web port, and faust's private parts (``streams.seam``).
Once running, ``streams.health.Readiness`` stops it (exit 5) when it is not ready in time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import sys
from typing import Any

from aiokafka.errors import KafkaError

from config.exitcodes import Exit
from config.settings import Settings
from pipeline.core import Pipeline
from pipeline.runner import Processor
from streams import health
from streams.admin import (
    PartitionMismatch,
    TopicError,
    TopicsNotReady,
    changelog_topics,
    ensure_worker_topics,
    quiet_client_logs,
    unreachable,
    wait_for_broker,
)
from streams.agents import register_agents
from streams.allocator import keep_large_blocks_mapped
from streams.app import create_app
from streams.claiming import RoundTrips
from streams.claims import ClaimsReader
from streams.metrics import GuardianMetrics
from streams.seam import membership
from streams.seam.check import check
from streams.seam.parts import SeamError, library_versions
from streams.seam.reads import changelog_topic_names, committed_offsets, fetch_states
from streams.seam.recovery import RecoveryWatch
from streams.seam.rocksdb_memory import share_rocksdb_memory
from streams.seam.spinner import new_worker
from streams.seam.stop_deadline import StopDeadline, with_stop_deadline
from streams.seam.table_writes import RocksStores, changelog_batches
from streams.shell import PipelineShell
from streams.stalls import InputWatch, WaitClock
from supervisor import rules
from tables.claims import ClaimLog
from tables.store.faust_tables import (
    ROCKSDB_SHARED_BLOCK_CACHE,
    ROCKSDB_SHARED_WRITE_BUFFERS,
    FaustStore,
    define_tables,
)
from tables.store.writes import PendingWrites
from topics.names import INPUT_SUFFIXES, TopicNames
from topics.registry import RegistryError, load_registry

#: how long a worker waits for a broker to answer before saying so and exiting
BROKER_WAIT_S = 20.0


def build_worker_app(
    settings: Settings,
    *,
    bootstrap: str,
    worker_id: str,
    web_port: int | None = None,
    on_not_ready: Any = None,
    instance_id: str | None = None,
) -> tuple[Any, PipelineShell]:
    """The App with its tables, agent, timers, metrics and readiness, ready to run; with
    ``instance_id``, a static member of its group (leaving it when it stops with
    ``settings.leave_on_stop``)."""
    registry = load_registry(settings.contracts_file, settings.capabilities_file)
    app = create_app(
        settings,
        bootstrap=bootstrap,
        worker_id=worker_id,
        web_port=web_port,
        web_host=settings.web_host,
        instance_id=instance_id,
    )
    if settings.leave_on_stop:
        membership.leave_on_stop(app)
    names = TopicNames(settings.topic_prefix)
    tables = define_tables(app, settings.partitions, RocksStores())
    share_rocksdb_memory(tables.all(), ROCKSDB_SHARED_BLOCK_CACHE, ROCKSDB_SHARED_WRITE_BUFFERS)
    decide = rules.decide if settings.supervisor == "rules" else None
    processor = Processor(registry, Pipeline(registry, language=settings.language), decide)
    out_topics = {kind: getattr(names, kind) for kind in ("decisions", "dispatch", "timeline", "deadletter")}
    control = app.topic(names.control, key_serializer="raw", value_serializer="raw")
    metrics = GuardianMetrics(os.environ)
    claims = ClaimsReader(
        bootstrap,
        names.claims,
        claims=ClaimLog(snapshot_every=settings.claims_snapshot_every),
        round_trips=RoundTrips(on_round_trip=metrics.claims.duration.observe),
    )
    metrics.claims.held.set_function(lambda: len(claims.claims))
    metrics.claims.bytes.set_function(claims.claims.memory_bytes)
    changelog_batch = changelog_batches(app.conf.producer_max_batch_size)
    store = FaustStore(tables, PendingWrites(tables.batched(), tables.access, changelog_batch))
    store.claims = claims.claims
    shell = PipelineShell(
        processor=processor,
        names=names,
        tables=tables,
        store=store,
        out_topics=out_topics,
        control_topic=control,
        sweep_every_s=settings.dedup_sweep_s,
        defer_state_s=settings.defer_state_s,
        metrics=metrics,
        claims=claims,
    )
    app.task(claims.run)
    if settings.supervisor == "gemini":
        from streams.lanes import attach_lanes
        from supervisor.gemini import GeminiBackend

        lanes = attach_lanes(app, shell, settings)
        if isinstance(lanes.backend, GeminiBackend):
            lanes.backend.on_call = metrics.model.call
            lanes.backend.on_fallback = metrics.model.fallback
    recovery = RecoveryWatch.attach(app)
    register_agents(app, shell, recovery)
    readiness = health.Readiness(
        app,
        settings.ready_timeout_s,
        on_not_ready if on_not_ready is not None else (lambda _r: None),
        recovery,
        WaitClock(health.WATCH_EVERY_S),
    )
    app.on_partitions_assigned.connect(lambda *_a, **_k: readiness.on_assigned())
    app.on_partitions_revoked.connect(lambda *_a, **_k: readiness.on_revoked())
    health.register(app, readiness, metrics, lambda: input_lag(app, names))
    readiness.claims = claims
    readiness.inputs = InputWatch(
        lag=lambda: input_lag(app, names),
        fetch=lambda: fetch_states(app.consumer),
        idle=lambda: shell.inbox.waiting_since is not None,
        after_s=settings.stall_after_s,
    )
    shell.reports.readiness = readiness
    return app, shell


def input_lag(app: Any, names: TopicNames) -> dict[tuple[str, int], tuple[int, int | None]]:
    """(topic, partition) -> (high watermark, committed offset) of the assigned input partitions."""
    consumer = app.consumer
    committed = committed_offsets(consumer)
    inputs = {names.prefix + s for s in INPUT_SUFFIXES}
    lag: dict[tuple[str, int], tuple[int, int | None]] = {}
    for tp in list(consumer.assignment()):
        if tp.topic not in inputs:
            continue
        try:
            high = consumer.highwater(tp)
        except (KeyError, AssertionError):  # the partition moved since assignment() was read
            continue
        if high is None:
            continue
        done = committed.get(tp)
        lag[(tp.topic, tp.partition)] = (int(high), None if done is None else int(done))
    return lag


def default_worker_id() -> str:
    return os.environ.get("GUARDIAN_WORKER_ID") or "w0"


def _say(text: str) -> None:
    print(f"guardian worker: {text}", file=sys.stderr, flush=True)


def web_port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


async def _preflight(bootstrap: str, settings: Settings) -> None:
    await wait_for_broker(bootstrap, BROKER_WAIT_S)
    await ensure_worker_topics(
        bootstrap,
        TopicNames(settings.topic_prefix),
        settings.partitions,
        timeout_s=settings.ready_timeout_s,
        say=_say,
    )


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    keep_large_blocks_mapped()  # before the worker's first large buffer (streams.allocator)
    try:
        load_registry(settings.contracts_file, settings.capabilities_file)
    except RegistryError as exc:
        _say(f"broken registry: {exc}")
        return Exit.USAGE
    except SeamError as exc:
        _say(str(exc))
        return Exit.INTERNAL
    bootstrap = settings.resolve_bootstrap()
    quiet_client_logs()
    try:
        asyncio.run(_preflight(bootstrap, settings))
    except PartitionMismatch as exc:
        _say(str(exc))
        return Exit.BAD_INPUT
    except TopicError as exc:
        _say(str(exc))
        return Exit.INTERNAL
    except TopicsNotReady as exc:
        _say(str(exc))
        return Exit.NOT_READY
    except TimeoutError as exc:
        _say(unreachable(bootstrap, exc))
        return Exit.BROKER_UNREACHABLE
    except (KafkaError, OSError) as exc:
        _say(unreachable(bootstrap, exc))
        return Exit.BROKER_UNREACHABLE
    web_port = settings.web_port or None
    if web_port is not None and not web_port_free(settings.web_host, web_port):
        _say(
            f"the web port {settings.web_host}:{web_port} is in use: give each worker on this machine "
            "its own GUARDIAN_WEB_PORT (0 turns the web server off)"
        )
        return Exit.USAGE
    try:
        app, shell = build_worker_app(
            settings,
            bootstrap=bootstrap,
            worker_id=args.worker_id or default_worker_id(),
            web_port=web_port,
            on_not_ready=_say,  # said once per wait; the worker keeps trying (``streams.health``)
            instance_id=membership.instance_id(args.worker_id or os.environ.get("GUARDIAN_WORKER_ID")),
        )
    except RegistryError as exc:
        _say(f"broken registry: {exc}")
        return Exit.USAGE
    except SeamError as exc:
        _say(str(exc))
        return Exit.INTERNAL
    try:
        check(app, shell.tables.all())
        membership.check()
        expected = changelog_topics(shell.names)
        found = changelog_topic_names(shell.tables.all())
        if found != expected:
            raise SeamError(
                f"faust names the changelog topics {found}, not {expected} ({library_versions()})"
            )
    except SeamError as exc:
        _say(str(exc))
        return Exit.INTERNAL
    web = f", metrics on http://{settings.web_host}:{web_port}/metrics" if web_port else ""
    print(
        f"guardian worker on {bootstrap} (prefix {settings.topic_prefix!r}, "
        f"{settings.partitions} partitions, "
        f"supervisor {settings.supervisor}) host {socket.gethostname()}{web}",
        flush=True,
    )
    worker = new_worker(app, args.loglevel)
    with_stop_deadline(worker, StopDeadline(crashed=lambda: bool(app.crash_reason or worker.crash_reason)))
    assert shell.reports.readiness is not None and shell.reports.metrics is not None
    watching = worker.loop.create_task(
        health.watchdog(shell.reports.readiness, shell.reports.metrics, lambda step: health.heal(app, step))
    )
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else Exit.INTERNAL
        return Exit.OK if code == 0 else Exit.INTERNAL
    finally:
        if not watching.done() and not worker.loop.is_closed():
            watching.cancel()  # (faust's shutdown cancels every task of its loop first)
    return Exit.OK

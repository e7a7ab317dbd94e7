"""``guardian worker``: the pipeline as a faust worker (several may run in one consumer group)."""

from __future__ import annotations

import argparse
import os
import socket
import sys
from typing import Any

from guardian.settings import Settings
from pipeline.core import Pipeline
from pipeline.runner import Processor
from streams.agents import PipelineShell, register_agents
from streams.app import create_app
from supervisor import rules
from tables.faust_tables import FaustStore, define_tables
from tables.writes import PendingWrites
from topics.names import TopicNames
from topics.registry import RegistryError, load_registry


def build_worker_app(settings: Settings, *, bootstrap: str, worker_id: str) -> tuple[Any, PipelineShell]:
    """The App with its tables, agent and timers, ready to run."""
    registry = load_registry(settings.contracts_file, settings.capabilities_file)
    app = create_app(settings, bootstrap=bootstrap, worker_id=worker_id)
    names = TopicNames(settings.topic_prefix)
    tables = define_tables(app, settings.partitions)
    decide = rules.decide if settings.supervisor == "rules" else None
    processor = Processor(registry, Pipeline(registry, language=settings.language), decide)
    out_topics = {kind: getattr(names, kind) for kind in ("decisions", "dispatch", "timeline", "deadletter")}
    control = app.topic(names.control, key_serializer="raw", value_serializer="raw")
    shell = PipelineShell(
        processor=processor,
        names=names,
        tables=tables,
        store=FaustStore(tables, PendingWrites(tables.batched())),
        out_topics=out_topics,
        control_topic=control,
        sweep_every_s=settings.dedup_sweep_s,
    )
    if settings.supervisor == "gemini":
        from supervisor.lanes import attach_lanes

        attach_lanes(app, shell, settings)
    register_agents(app, shell)
    return app, shell


def default_worker_id() -> str:
    return os.environ.get("GUARDIAN_WORKER_ID") or "w0"


def cmd_worker(args: argparse.Namespace, settings: Settings) -> int:
    try:
        load_registry(settings.contracts_file, settings.capabilities_file)
    except RegistryError as exc:
        print(f"guardian worker: broken registry: {exc}", file=sys.stderr)
        return 2
    bootstrap = settings.resolve_bootstrap()
    try:
        app, _shell = build_worker_app(
            settings, bootstrap=bootstrap, worker_id=args.worker_id or default_worker_id()
        )
    except RegistryError as exc:
        print(f"guardian worker: broken registry: {exc}", file=sys.stderr)
        return 2
    import faust

    print(
        f"guardian worker on {bootstrap} (prefix {settings.topic_prefix!r}, "
        f"{settings.partitions} partitions, "
        f"supervisor {settings.supervisor}) host {socket.gethostname()}",
        flush=True,
    )
    worker = faust.Worker(app, loglevel=args.loglevel, quiet=True)
    worker.execute_from_commandline()
    return 0

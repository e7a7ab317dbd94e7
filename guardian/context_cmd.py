"""``guardian context summary FILE... --device ID``: what a planner (or the model) saw of a device.

Runs the file's input records (the ``guardian export`` / ``kcat -C -J`` format) through the
pipeline's own logic, as ``guardian replay`` does, up to ``--at-ms`` (default: the device's last
record), and prints the planner summary (``planner_context_summary.v2``) of the device's context
for its experience's plan at that moment, as JSON.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson

from config.exitcodes import Exit
from config.settings import Settings
from guardian.replay import InputRecord, ReplayInputError, read_kcat_lines
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from supervisor.summary import planner_summary
from topics.names import INPUT_SUFFIXES, TopicNames
from topics.registry import Registry, load_registry

_TIE_ORDER = {suffix: i for i, suffix in enumerate(INPUT_SUFFIXES)}


def device_summary(
    records: list[InputRecord], device_id: str, registry: Registry, *, at_ms: int | None = None
) -> dict[str, Any] | None:
    """The summary of ``device_id``'s context after the records received up to ``at_ms``; None
    when the input holds no admitted record of the device. Without an experience, every catalog
    capability counts as in play."""
    processor = Processor(registry, Pipeline(registry), rules.decide)
    store = MemoryStore()
    inputs = sorted(
        (r for r in records if r.suffix in _TIE_ORDER and (at_ms is None or r.ts <= at_ms)),
        key=lambda r: (r.ts, _TIE_ORDER[r.suffix], r.partition, r.offset),
    )
    for r in inputs:
        processor.process(
            store,
            r.suffix,
            r.key,
            r.value,
            source_topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            received_at_ms=r.ts,
        )
    dev = store.get_device(device_id)
    if dev is None:
        return None
    now = at_ms if at_ms is not None else dev.last_received_ms
    exp = store.get_experience(device_id)
    plan: dict[str, Any]
    if exp is not None:
        plan = exp.plan
    else:
        plan = {"allowed_action_contracts": [f"{c}.any" for c in registry.capabilities]}
    summary = planner_summary(plan, dev.context, now, registry)
    return {
        "summary": summary["summary"],
        "device_id": device_id,
        "experience_id": exp.experience_id if exp is not None else None,
        "at_ms": now,
        "domains": summary["domains"],
    }


def cmd_context_summary(args: argparse.Namespace, settings: Settings) -> int:
    names = TopicNames(settings.topic_prefix)
    try:
        records: list[InputRecord] = []
        for f in args.files:
            records.extend(read_kcat_lines(Path(f), names))
    except ReplayInputError as exc:
        print(f"guardian context summary: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    registry = load_registry(settings.contracts_file, settings.capabilities_file)
    summary = device_summary(records, args.device, registry, at_ms=args.at_ms)
    if summary is None:
        print(f"guardian context summary: no record of device {args.device!r} in the input", file=sys.stderr)
        return Exit.BAD_INPUT
    sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0

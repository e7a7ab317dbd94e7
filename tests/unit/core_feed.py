"""The functional core as the unit tests drive it: a rules-backed ``processor`` and ``feed`` of records."""

from __future__ import annotations

from typing import Any

from guardian.replay import InputRecord
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from topics.registry import load_registry

REGISTRY = load_registry()


def processor() -> Processor:
    return Processor(REGISTRY, Pipeline(REGISTRY, language="en"), rules.decide)


def feed(proc: Processor, store: MemoryStore, records: list[InputRecord]) -> list[Any]:
    outs: list[Any] = []
    for r in records:
        done = proc.process(store, r.suffix, r.key, r.value, source_topic=r.topic, partition=r.partition,
                            offset=r.offset, received_at_ms=r.ts)  # fmt: skip
        outs.extend(done.outs)
    return outs

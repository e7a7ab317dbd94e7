"""Transports for the simulated fleet in tests: a :class:`Recorder` that keeps every record, and a
:class:`Loopback` through the pipeline's functional core."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from simulator.fleet import Fleet
from supervisor import rules
from topics.envelope import Out
from topics.registry import load_registry


class Recorder:
    """A transport that keeps every record."""

    def __init__(self) -> None:
        self.records: list[tuple[str, str, bytes, int]] = []

    async def send(self, suffix: str, key: str, value: bytes, timestamp_ms: int) -> None:
        self.records.append((suffix, key, value, timestamp_ms))
        await asyncio.sleep(0)  # like a real producer, let others run

    def values(self, suffix: str) -> list[dict[str, Any]]:
        return [orjson.loads(v) for s, _, v, _ in self.records if s == suffix]


class Loopback:
    """The pipeline's functional core as the 'broker': outputs go straight back to the fleet."""

    def __init__(self) -> None:
        registry = load_registry()
        self.processor = Processor(registry, Pipeline(registry), rules.decide)
        self.store = MemoryStore()
        self.fleet: Fleet | None = None
        self.offset = 0

    async def send(self, suffix: str, key: str, value: bytes, timestamp_ms: int) -> None:
        for out in self.process(suffix, key, value, timestamp_ms):
            self.deliver(out.kind, out.key, out.value)

    def process(self, suffix: str, key: str, value: bytes, timestamp_ms: int) -> list[Out]:
        """One record through the core; its outputs."""
        self.offset += 1
        done = self.processor.process(
            self.store,
            suffix,
            key.encode(),
            value,
            source_topic=f"loop.{suffix}",
            partition=0,
            offset=self.offset,
            received_at_ms=timestamp_ms,
        )
        return done.outs

    def deliver(self, kind: str, key: str | None, value: dict[str, Any]) -> None:
        assert self.fleet is not None
        self.fleet.handle_output(kind, key, orjson.dumps(value))

    def tick(self, fleet: Fleet) -> None:
        """The live worker's timer: confirm what is due for quiet devices (a precondition deadline)."""
        for device_id in list(self.store.devices):
            for out in self.processor.confirm_quiet(self.store, device_id, fleet.clock.now_ms()).outs:
                self.deliver(out.kind, out.key, out.value)

"""Hostile Kafka keys on a real broker (docs/CONTRACTS.md §2 rule 3, §10): a record keyed by 600 KB,
and one keyed by 160 KB of control characters (six bytes each once escaped in JSON). Their dead
letters used to copy the key whole into the value and publish under it: over the broker's default
message limit, the worker exited with ``MessageSizeTooLargeError`` and stopped again after every
restart. Now both are ``key_invalid`` dead letters under a bounded form of the key, and the records
after them in the same partition are processed."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.partitioner import murmur2

from tests.live import Outputs, WorkerProcess, collect
from tests.streams import Script
from topics.kafka_key import bounded_key
from topics.names import TopicNames

pytestmark = pytest.mark.kafka

HUGE_KEY = b"dev-huge-" + b"k" * 600_000
CONTROL_KEY = b"\x01" * 160_000


async def produce_to(bootstrap: str, records: list[tuple[str, int, bytes, bytes, int]]) -> None:
    """(topic, partition, key, value, timestamp) in order, each on the broker before the next."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=30_000, linger_ms=0)
    await producer.start()
    try:
        for topic, partition, key, value, ts in records:
            fut = await producer.send(topic, value, key=key, partition=partition, timestamp_ms=ts)
            await asyncio.wait_for(fut, 60)
    finally:
        await producer.stop()


def test_huge_keys_are_dead_lettered_and_the_partition_goes_on(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    kafka_partitions: int,
    tmp_path: Path,
) -> None:
    names = TopicNames(topic_prefix)
    t0 = int(time.time() * 1000) - 10_000
    good = Script(device_id="dev-after-keys", prefix=topic_prefix, t=t0 + 10).start()
    # the partition the good device's records belong to: the hostile records go there first
    partition = (murmur2(good.device_id.encode()) & 0x7FFFFFFF) % kafka_partitions
    value = orjson.dumps({**good.plan, "device_id": "dev-huge"})
    records = [
        (names.plans, partition, HUGE_KEY, value, t0),
        (names.plans, partition, CONTROL_KEY, value, t0 + 1),
        *((r.topic, partition, r.key or b"", r.value or b"", r.ts) for r in good.records),
    ]

    def done(out: Outputs) -> bool:
        goal = any(e.get("stage") == "goal" for e in out.values["timeline"])
        return goal and len(out.values["deadletter"]) >= 2

    worker = WorkerProcess(guardian_env, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce_to(kafka_bootstrap, records))
        live = asyncio.run(collect(kafka_bootstrap, names, done, timeout_s=120))
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    # published under their own keys: in the dead-letter topic's partitions of those keys
    letters = sorted(live.values["deadletter"], key=lambda d: int(d["offset"]))
    assert [(d["reason_code"], d["key"], d["offset"]) for d in letters] == [
        ("key_invalid", bounded_key(HUGE_KEY), 0),
        ("key_invalid", bounded_key(CONTROL_KEY), 1),
    ]
    assert all(d["partition"] == partition and len(orjson.dumps(d)) < 2_000 for d in letters)
    assert live.statuses() == {good.experience_id: "active"}
    assert "MessageSizeTooLarge" not in worker.log_tail(200)

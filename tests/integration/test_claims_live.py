"""Global experience identity across workers (§2 rule 9) on the real broker: two devices whose
partitions two workers of one group share out send plans reusing one ``experience_id`` close
together; the device of the first claim in the claims log keeps it and the other's plan is a
``cross_device`` dead letter — also after both workers are SIGKILLed mid-way and restarted."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from config.settings import Settings
from streams.app import app_id
from tests.live import Outputs, WorkerProcess, collect, produce, ready
from tests.streams import Script
from topics.names import TopicNames

pytestmark = pytest.mark.kafka

SETTINGS = Settings.from_env({})
PARTITIONS = 2


@pytest.fixture
def kafka_partitions() -> int:
    """Two partitions for two workers: each worker owns one."""
    return PARTITIONS


def device_on(partition: int, stem: str) -> str:
    """A device ID whose records the default partitioner puts on ``partition``."""
    for i in range(10_000):
        device_id = f"{stem}-{i}"
        if (murmur2(device_id.encode()) & 0x7FFFFFFF) % PARTITIONS == partition:
            return device_id
    raise AssertionError("no device ID found")


async def read_claims(bootstrap: str, topic: str) -> list[tuple[str, str]]:
    """The whole claims log: (experience_id, device_id) in log order."""
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, request_timeout_ms=30_000
    )
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        end = (await consumer.end_offsets([tp]))[tp]
        found: list[tuple[str, str]] = []
        async with asyncio.timeout(60):
            while await consumer.position(tp) < end:
                for message in (await consumer.getmany(tp, timeout_ms=500)).get(tp, ()):
                    assert message.key is not None and message.value is not None
                    found.append((message.key.decode(), message.value.decode()))
        return found
    finally:
        await consumer.stop()


async def _members(bootstrap: str, group: str) -> list[Any]:
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    async with asyncio.timeout(30):
        await client.start()
        try:
            described = await client.describe_consumer_groups([group])
        except KafkaError:  # no coordinator yet (the group's first member is still starting)
            return []
        finally:
            await client.close()
    groups = described[0].to_object()["groups"]
    return list(groups[0]["members"]) if groups else []


def start_pair(env: dict[str, str], tmp_path: Path, prefix: str, tag: str = "") -> list[WorkerProcess]:
    """Two workers of one group, each with its own data dir; returns once both are members with
    an assignment and both are ready (each then owns one of the two partitions)."""
    workers = [
        WorkerProcess(
            dict(env, GUARDIAN_DATA_DIR=str(tmp_path / f"data-{n}")), tmp_path / f"{n}{tag}.log", worker_id=n
        ).start()
        for n in ("w1", "w2")
    ]
    group = app_id(replace(SETTINGS, topic_prefix=prefix))
    deadline = time.monotonic() + 120
    while True:
        members = asyncio.run(_members(env["GUARDIAN_KAFKA_BOOTSTRAP"], group))
        if (
            len(members) == 2
            and all(m["member_assignment"] for m in members)
            and all(ready(w) for w in workers)
        ):
            return workers
        for w in workers:
            assert w.alive(), w.log_tail()
        assert time.monotonic() < deadline, "\n".join(w.log_tail() for w in workers)
        time.sleep(0.5)


def claim_metric(worker: WorkerProcess) -> tuple[float, float]:
    """(count, sum in seconds) of the worker's experience claim histogram."""
    with urllib.request.urlopen(worker.base_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in (
            "guardian_experience_claim_duration_seconds_count",
            "guardian_experience_claim_duration_seconds_sum",
        ):
            found[name.rsplit("_", 1)[1]] = float(value)
    return found["count"], found["sum"]


def race(prefix: str, t0: int, experience_id: str) -> tuple[Script, Script]:
    """Two devices, one on each partition, whose plans reuse ``experience_id`` 1 ms apart."""
    a = Script(device_id=device_on(0, "dev-left"), prefix=prefix, t=t0)
    a.start(experience_id=experience_id)
    b = Script(device_id=device_on(1, "dev-right"), prefix=prefix, t=t0 + 1)
    b.start(experience_id=experience_id)
    return a, b


def judged(experiences: list[str], devices: int) -> Any:
    """Every experience has a goal and a dead letter for each of the other devices."""

    def check(out: Outputs) -> bool:
        goals = {e["experience_id"] for e in out.values["timeline"] if e.get("stage") == "goal"}
        letters = {(d["event_id"], d["key"]) for d in out.values["deadletter"]}
        return set(experiences) <= goals and len(letters) >= len(experiences) * (devices - 1)

    return check


def assert_first_claim_wins(out: Outputs, claims: list[tuple[str, str]], experience_id: str) -> str:
    """The device of the experience's first claim started it; every other device's plan for it is
    a ``cross_device`` dead letter and started nothing. Returns the owner."""
    claimants = [dev for exp, dev in claims if exp == experience_id]
    assert claimants, f"no claim for {experience_id}"
    owner = claimants[0]
    goals = [e for e in out.values["timeline"] if e.get("experience_id") == experience_id]
    assert goals and {e["device_id"] for e in goals} == {owner}, goals
    letters = [d for d in out.values["deadletter"] if d["event_id"] == experience_id]
    assert letters, "the other device's plan was not refused"
    assert {(d["reason_code"], d["key"] == owner) for d in letters} == {("cross_device", False)}
    assert not [d for d in out.values["decisions"] if d["experience_id"] == experience_id]
    return owner


def test_two_workers_racing_one_experience_id_accept_exactly_the_first_claim(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    workers = start_pair(guardian_env, tmp_path, topic_prefix)
    t0 = int(time.time() * 1000)
    rounds = [f"exp_race_{n}" for n in range(4)]
    try:
        for n, experience_id in enumerate(rounds):
            a, b = race(topic_prefix, t0 + n * 10, experience_id)
            # odd rounds: the right-hand device's plan is produced first
            pair = a.records + b.records if n % 2 == 0 else b.records + a.records
            asyncio.run(produce(kafka_bootstrap, pair))
        live = asyncio.run(collect(kafka_bootstrap, names, judged(rounds, 2), timeout_s=120))
        assert all(w.alive() for w in workers), "\n".join(w.log_tail() for w in workers)
        # every new experience was claimed at least once, and the claims are counted
        count, total = map(sum, zip(*(claim_metric(w) for w in workers), strict=True))
        assert count >= len(rounds)
        print(f"claims: {count:.0f}, mean round trip {total / count * 1000:.1f} ms")
    finally:
        for w in workers:
            w.stop()
    claims = asyncio.run(read_claims(kafka_bootstrap, names.claims))
    owners = {exp: assert_first_claim_wins(live, claims, exp) for exp in rounds}
    # both devices own their next experience: a refusal is about the ID, not the device
    assert set(owners) == set(rounds)


def test_the_refusal_holds_after_both_workers_are_killed_and_restarted(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    experience_id = "exp_guardian_001"
    workers = start_pair(guardian_env, tmp_path, topic_prefix)
    a, b = race(topic_prefix, int(time.time() * 1000), experience_id)
    try:
        asyncio.run(produce(kafka_bootstrap, a.records + b.records))
        # SIGKILL both as soon as a claim is in the log: the plans' offsets are most likely not
        # committed yet, so both are read again after the restart (their claims already written)
        deadline = time.monotonic() + 60
        while not asyncio.run(read_claims(kafka_bootstrap, names.claims)):
            assert time.monotonic() < deadline, "\n".join(w.log_tail() for w in workers)
            time.sleep(0.05)
        for w in workers:
            w.kill()
        workers = start_pair(guardian_env, tmp_path, topic_prefix, tag="-restarted")
        # after the restart, each device sends its plan for the experience again
        a.t = b.t = int(time.time() * 1000)
        a.start(experience_id=experience_id)
        b.start(experience_id=experience_id)
        asyncio.run(produce(kafka_bootstrap, a.records[1:] + b.records[1:]))

        def both_plans_judged(out: Outputs) -> bool:
            letters = {d["payload_sha256"] for d in out.values["deadletter"]}
            duplicates = [e for e in out.values["timeline"] if e.get("drop_reason") == "duplicate"]
            return judged([experience_id], 2)(out) and len(letters) >= 2 and len(duplicates) >= 1

        live = asyncio.run(collect(kafka_bootstrap, names, both_plans_judged, timeout_s=120))
        assert all(w.alive() for w in workers), "\n".join(w.log_tail() for w in workers)
    finally:
        for w in workers:
            w.stop()
    claims = asyncio.run(read_claims(kafka_bootstrap, names.claims))
    owner = assert_first_claim_wins(live, claims, experience_id)
    loser = b.device_id if owner == a.device_id else a.device_id
    # the loser's two plans (before and after the crash) are both refused; the owner's second plan
    # is a duplicate of its experience, not a new one
    assert len({d["payload_sha256"] for d in live.values["deadletter"] if d["key"] == loser}) == 2
    goals = [e for e in live.values["timeline"] if e.get("stage") == "goal"]
    assert {(e["device_id"], e["experience_id"]) for e in goals} == {(owner, experience_id)}

"""The claims log is bounded, on the real broker (§2 rule 12): while one device floods new
experience IDs, a worker's claims memory stays within its allowance, another device's plan is
admitted and processed meanwhile, and the claims topic is cut behind snapshots; a worker started
afterwards reads the snapshot and the tail, becomes ready and decides as the first one did."""

from __future__ import annotations

import asyncio
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from tables.claims import CLAIM_BURST
from tests.live import Outputs, WorkerProcess, collect, produce, ready
from tests.streams import Script
from topics.names import TopicNames

pytestmark = pytest.mark.kafka

FLOOD = 400
FLEET = 30
SNAPSHOT_EVERY = 10


def metrics(worker: WorkerProcess) -> dict[str, float]:
    with urllib.request.urlopen(worker.base_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    found: dict[str, float] = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name in ("guardian_experience_claims", "guardian_experience_claims_bytes"):
            found[name] = float(value)
    return found


async def log_bounds(bootstrap: str, topic: str) -> tuple[int, int]:
    """(first offset, end offset) of the claims topic."""
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, request_timeout_ms=30_000)
    await consumer.start()
    try:
        begin = (await consumer.beginning_offsets([tp]))[tp]
        end = (await consumer.end_offsets([tp]))[tp]
        return int(begin), int(end)
    finally:
        await consumer.stop()


def start_ready(env: dict[str, str], log: Path, worker_id: str) -> WorkerProcess:
    worker = WorkerProcess(env, log, worker_id=worker_id).start()
    deadline = time.monotonic() + 120
    while not ready(worker):
        assert worker.alive(), worker.log_tail()
        assert time.monotonic() < deadline, worker.log_tail()
        time.sleep(0.5)
    return worker


def goals(out: Outputs, device_id: str) -> list[str]:
    return [
        e["experience_id"]
        for e in out.values["timeline"]
        if e.get("stage") == "goal" and e["device_id"] == device_id
    ]


def letters(out: Outputs, device_id: str, reason: str) -> list[str]:
    return [
        d["event_id"]
        for d in out.values["deadletter"]
        if d["key"] == device_id and d["reason_code"] == reason
    ]


def test_a_device_flooding_new_experience_ids_costs_the_other_devices_nothing(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    env = dict(guardian_env, GUARDIAN_CLAIMS_SNAPSHOT_EVERY=str(SNAPSHOT_EVERY))
    t0 = int(time.time() * 1000) - 60_000
    flooder = Script(device_id="dev-flood", prefix=topic_prefix, t=t0)
    for i in range(FLOOD):
        flooder.t = t0 + i
        flooder.start(experience_id=f"exp_flood_{i:04d}")
    calm = Script(device_id="dev-calm", prefix=topic_prefix, t=t0 + FLOOD // 2)
    calm.start(experience_id="exp_calm_0001")
    fleet = [Script(device_id=f"dev-fleet-{n:02d}", prefix=topic_prefix, t=t0 + n) for n in range(FLEET)]
    for script in fleet:
        script.start(experience_id=f"exp_{script.device_id}")
    bound = CLAIM_BURST + 1 + FLEET  # the flooder's allowance and one claim of every other device
    everyone = [*flooder.records, *calm.records, *(r for s in fleet for r in s.records)]
    records = sorted(everyone, key=lambda r: r.ts)

    def done(out: Outputs) -> bool:
        return bool(goals(out, calm.device_id)) and len(
            letters(out, flooder.device_id, "experience_rate")
        ) >= (FLOOD - CLAIM_BURST)

    worker = start_ready(env, tmp_path / "w1.log", "w1")
    samples: list[dict[str, float]] = []
    try:
        asyncio.run(produce(kafka_bootstrap, records))

        async def watch() -> Outputs:
            collecting = asyncio.ensure_future(collect(kafka_bootstrap, names, done, timeout_s=180))
            while not collecting.done():
                samples.append(await asyncio.to_thread(metrics, worker))
                await asyncio.wait([collecting], timeout=0.2)
            return collecting.result()

        live = asyncio.run(watch())
        samples.append(metrics(worker))
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    # the other devices' plans were admitted and processed during the flood
    assert goals(live, calm.device_id) == ["exp_calm_0001"]
    assert all(goals(live, s.device_id) == [f"exp_{s.device_id}"] for s in fleet)
    # the flooder started its allowance and nothing more; the rest are refused with a reason
    assert goals(live, flooder.device_id) == [f"exp_flood_{i:04d}" for i in range(CLAIM_BURST)]
    refused = letters(live, flooder.device_id, "experience_rate")
    assert sorted(set(refused)) == [f"exp_flood_{i:04d}" for i in range(CLAIM_BURST, FLOOD)]
    # the worker's claims stayed within their bound all along (not one per flooded ID)
    assert samples and max(s["guardian_experience_claims"] for s in samples) <= bound
    assert samples[-1]["guardian_experience_claims"] == bound
    print(f"claims held: {samples[-1]['guardian_experience_claims']:.0f}, "
          f"{samples[-1]['guardian_experience_claims_bytes']:.0f} bytes")  # fmt: skip
    # void claims were mostly not written, and the log was cut behind its snapshots
    begin, end = asyncio.run(log_bounds(kafka_bootstrap, names.claims))
    assert end < FLOOD and begin > 0, (begin, end)

    # a worker started now reads the snapshot and the tail (not the history) and decides the same:
    # the flooder's experience IDs claimed before the cut stay its own, its void ones are free, and
    # its rate is still used up
    after = int(time.time() * 1000)
    thief = Script(device_id="dev-thief", prefix=topic_prefix, t=after)
    thief.start(experience_id="exp_flood_0000")  # claimed by the flooder, before the cut
    thief.t += 1
    thief.start(experience_id=f"exp_flood_{FLOOD - 1:04d}")  # refused for the flooder: still free
    flooder.t = t0 + FLOOD  # received within the flood's minute: beyond the flooder's rate
    flooder.start(experience_id="exp_flood_more")
    worker = start_ready(env, tmp_path / "w2.log", "w2")
    try:
        asyncio.run(produce(kafka_bootstrap, thief.records + flooder.records[-1:], in_order=True))

        def judged(out: Outputs) -> bool:
            return bool(goals(out, thief.device_id)) and "exp_flood_more" in letters(
                out, flooder.device_id, "experience_rate"
            )

        again: Any = asyncio.run(collect(kafka_bootstrap, names, judged, timeout_s=120))
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    assert letters(again, thief.device_id, "cross_device") == ["exp_flood_0000"]
    assert goals(again, thief.device_id) == [f"exp_flood_{FLOOD - 1:04d}"]

"""Hostile records on a real broker: the poison-pill plan (args nested ~250 levels), one device
flooding distinct area IDs (its stored value once grew past the broker's message limit) and a
record with a null key do not stop a live worker; the good records after them are processed as a
replay of the same records says."""

from __future__ import annotations

import asyncio
import copy
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from guardian.replay import InputRecord, replay_records
from tests.live import Outputs, WorkerProcess, collect, compare, produce
from tests.scenario_scripts import build
from tests.streams import Script
from topics.names import TopicNames

pytestmark = pytest.mark.kafka

SETTINGS = Settings.from_env({})
FLOOD = 20_000


def nested(depth: int) -> Any:
    node: Any = "x"
    for _ in range(depth):
        node = {"k": node}
    return node


def test_a_plan_reusing_another_devices_experience_id_is_refused_live_as_in_replay(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    """Device B's plan reuses device A's ``experience_id`` (the contract's own example ID) after
    A's plan was processed: a ``cross_device`` dead letter on the live worker as in replay, and A
    is unaffected (its battery-low trigger is decided, it returns)."""
    names = TopicNames(topic_prefix)
    t0 = int(time.time() * 1000) - 30_000
    a = Script(device_id="dev-owner-a", prefix=topic_prefix, t=t0)
    a.start(experience_id="exp_guardian_001").wait(500).security_started()
    b = Script(device_id="dev-thief-b", prefix=topic_prefix, t=a.t + 100)
    b.start(experience_id="exp_guardian_001")
    a.t = b.t + 1_000
    a.obs("security.condition_changed", {"battery": "low"})
    a.wait(500).security_stopped().wait(500).docked()
    replayed = replay_records(sorted(a.records + b.records, key=lambda r: r.ts), settings=SETTINGS)
    assert replayed.summary["experiences"] == {"exp_guardian_001": "returned"}

    worker = WorkerProcess(guardian_env, tmp_path / "worker.log").start()
    try:
        # in steps, each once the previous one shows (a worker orders two topics of a partition
        # only as far as it has fetched them): A's plan; B's plan and A's security start; A's
        # battery low; the rest
        def timeline_has(n: int) -> Any:
            return lambda out: len(out.values["timeline"]) >= n

        for batch, entries in ((a.records[:1], 1), (b.records + a.records[1:2], 2), (a.records[2:3], 5)):
            asyncio.run(produce(kafka_bootstrap, batch))
            asyncio.run(collect(kafka_bootstrap, names, timeline_has(entries), timeout_s=90, settle_s=0.5))
        asyncio.run(produce(kafka_bootstrap, a.records[3:]))

        def done(out: Outputs) -> bool:
            return out.statuses().get("exp_guardian_001") == "returned" and bool(out.values["deadletter"])

        live = asyncio.run(collect(kafka_bootstrap, names, done, timeout_s=90))
    finally:
        worker.stop()
    compare(live, replayed)
    assert [(d["reason_code"], d["key"]) for d in live.values["deadletter"]] == [
        ("cross_device", "dev-thief-b")
    ]
    assert {d["device_id"] for d in live.values["decisions"]} == {"dev-owner-a"}


def test_poison_pill_and_state_flood_do_not_stop_a_live_worker(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    t0 = int(time.time() * 1000) - 60_000
    # the poison pill: a 3.7 KB plan whose step args nest 250 levels deep
    poison = Script(device_id="dev-poison", prefix=topic_prefix, t=t0)
    poison.start()
    plan = copy.deepcopy(poison.plan)
    plan["steps"][0]["args"] = {"deep": nested(250)}
    poison.records.clear()
    poison.raw("plans", orjson.dumps(plan))
    # a record whose Kafka key is null
    poison.records.append(
        InputRecord("observations", names.prefix + "observations", 0, 1, t0 + 5, None, b'{"event_id": "x"}')
    )
    # one device sending many distinct area IDs (each used to add a debounce state forever)
    flood = Script(device_id="dev-flood", prefix=topic_prefix, t=t0 + 10)
    flood.start().wait(100).security_started()
    for i in range(FLOOD):
        flood.wait(1).obs("security.person_detected", {"area_id": f"x{i}", "presence": "detected"})
    flood.wait(100).obs("security.condition_changed", {"battery": "low"})
    # a good device whose whole story comes after the poison (same partition or not)
    good = build("HG-05", device_id="dev-good", prefix=topic_prefix, t0=t0 + FLOOD + 1_000)
    records = sorted(poison.records + flood.records + good.records, key=lambda r: r.ts)
    replayed = replay_records(records, settings=SETTINGS)
    want = dict(replayed.summary["experiences"])
    assert want[good.experience_id] == "returned"
    assert [d["decision"] for d in replayed.outs["decisions"] if d["device_id"] == "dev-flood"] == [
        "return_to_station"
    ]

    worker = WorkerProcess(guardian_env, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce(kafka_bootstrap, records))

        def done(out: Outputs) -> bool:
            statuses = out.statuses()
            flooded = any(d["device_id"] == "dev-flood" for d in out.values["decisions"])
            return statuses.get(good.experience_id) == "returned" and flooded

        live = asyncio.run(collect(kafka_bootstrap, names, done, timeout_s=240))
        assert worker.alive(), worker.log_tail()
    finally:
        worker.stop()
    reasons = sorted((d["reason_code"], str(d["key"])) for d in live.values["deadletter"])
    assert reasons == [("schema_invalid", "None"), ("schema_invalid", "dev-poison")]
    for letters in (live.values["deadletter"], replayed.outs["deadletter"]):
        for d in letters:
            d["key"] = str(d["key"])  # comparable (sorted) by the shared helper
    compare(live, replayed)

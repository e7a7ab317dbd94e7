"""A device context snapshot dated ten years ahead and a task sequence of 2^63 - 1 on a real broker
(docs/CONTRACTS.md §5, §9.1): the snapshot is a ``clock_skew`` dead letter, the sequence a
``sequence_jump`` drop, and the device's story goes on; the live worker gives what a replay of
the same records gives."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from config.settings import Settings
from guardian.replay import replay_records
from tests.live import Outputs, WorkerProcess, collect, compare, produce
from tests.streams import Script
from topics.names import TopicNames
from topics.plans import guardian_plan

pytestmark = pytest.mark.kafka

SETTINGS = Settings.from_env({})
TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000


def test_a_future_snapshot_and_a_huge_sequence_do_not_freeze_a_live_device(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    s = Script(device_id="dev-skewed", prefix=topic_prefix, t=int(time.time() * 1000) - 30_000)
    s.context({"battery": {"data": {"estimated_work_budget": "high"}}})
    s.wait(500).context(
        {"battery": {"data": {"estimated_work_budget": "low"}}}, observed_at=s.t + TEN_YEARS_MS
    )
    plan = guardian_plan(s.device_id, created_at_ms=s.t + 500)
    plan["preconditions"] = {"path": "battery.estimated_work_budget", "op": "in", "value": ["medium", "high"]}
    s.wait(500).start_plan(plan).wait(500).security_started()
    s.wait(100).task("security_patrol", "patrol", "progress", step_id="patrol_areas", sequence=2**63 - 1)
    for area in ("2", "3", "6"):
        s.wait(100).patrol(area)
    s.wait(100).security_stopped().wait(100).docked()
    replayed = replay_records(s.records, settings=SETTINGS)
    assert replayed.summary["experiences"] == {s.experience_id: "completed"}
    assert [d["reason_code"] for d in replayed.outs["deadletter"]] == ["clock_skew"]
    assert [e["drop_reason"] for e in replayed.outs["timeline"] if e["stage"] == "drop"] == ["sequence_jump"]

    worker = WorkerProcess(guardian_env, tmp_path / "worker.log").start()
    try:
        # the snapshots first (their topic is read apart from the plans'), once the dead letter shows
        asyncio.run(produce(kafka_bootstrap, s.records[:2]))
        asyncio.run(collect(kafka_bootstrap, names, lambda out: bool(out.values["deadletter"]), timeout_s=90))
        asyncio.run(produce(kafka_bootstrap, s.records[2:]))

        def done(out: Outputs) -> bool:
            return out.statuses().get(s.experience_id) == "completed"

        live = asyncio.run(collect(kafka_bootstrap, names, done, timeout_s=90))
    finally:
        worker.stop()
    compare(live, replayed)
    assert [e["drop_reason"] for e in live.values["timeline"] if e["stage"] == "drop"] == ["sequence_jump"]

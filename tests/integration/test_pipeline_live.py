"""The pipeline on a real broker: every scenario live, live == replay == export+replay, SIGKILL
recovery, and a poison record in the middle of a partition."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from guardian.replay import InputRecord, ReplayResult, replay_records
from tests.live import (
    Outputs,
    WorkerProcess,
    all_ended,
    assert_single_content,
    collect,
    compare,
    kcat_export,
    produce,
    produce_plans_first,
)
from tests.scenario_scripts import SCENARIOS, build, hg12
from topics.names import TopicNames

pytestmark = pytest.mark.kafka

SETTINGS = Settings.from_env({})


def fleet(prefix: str, t0: int) -> tuple[list[InputRecord], dict[str, str]]:
    """Every scenario on its own device (HG-12 on two), all starting at ``t0``."""
    records: list[InputRecord] = []
    scenario_of: dict[str, str] = {}
    for i, scenario in enumerate(sorted(SCENARIOS)):
        script = build(scenario, device_id=f"dev-{scenario.lower()}", prefix=prefix, t0=t0 + i * 7)
        records.extend(script.records)
        scenario_of[script.experience_id] = scenario
    a, b = hg12(prefix=prefix, t0=t0)
    records.extend(a.records + b.records)
    scenario_of[a.experience_id] = "HG-12"
    scenario_of[b.experience_id] = "HG-12-B"
    records.sort(key=lambda r: r.ts)
    return records, scenario_of


def expected_statuses(replayed: ReplayResult) -> dict[str, str]:
    return dict(replayed.summary["experiences"])


def test_every_scenario_live_matches_replay_and_export(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    t0 = int(time.time() * 1000) - 300_000
    records, scenario_of = fleet(topic_prefix, t0)
    replayed = replay_records(records, settings=SETTINGS)
    want = expected_statuses(replayed)
    # the stories' own outcomes (asserted in detail by the replay tests)
    by_scenario = {scenario_of[e]: s for e, s in want.items()}
    assert by_scenario == {
        "HG-01": "completed",
        "HG-02": "completed",
        "HG-03": "returned",
        "HG-04": "completed",
        "HG-05": "returned",
        "HG-06": "completed",
        "HG-07": "completed",
        "HG-08": "aborted",
        "HG-09": "completed",
        "HG-11": "completed",
        "HG-12": "completed",
        "HG-12-B": "active",
        # device context v2: a replan without battery and map context moves nowhere (HG-04-B);
        # preconditions start, block at once, or wait for a refresh (HG-13, HG-14); HG-15, HG-16
        "HG-04-B": "completed",
        "HG-13a": "active",
        "HG-13b": "blocked",
        "HG-13c": "blocked",
        "HG-13d": "blocked",
        "HG-13e": "blocked",
        "HG-14f": "active",
        "HG-14g": "blocked",
        "HG-14h": "blocked",
        "HG-15": "completed",
        "HG-16": "blocked",
    }
    worker = WorkerProcess(guardian_env, tmp_path / "worker.log").start()
    try:
        produce_plans_first(kafka_bootstrap, names, records)
        live = asyncio.run(collect(kafka_bootstrap, names, all_ended(want), timeout_s=120))
    finally:
        worker.stop()
    assert worker.proc is not None and worker.proc.returncode in (0, -15), worker.log_tail()
    compare(live, replayed)

    # export the live topics with `guardian export`, and with a client we did not write (Debian's
    # kcat), and replay each with `guardian replay`: the same decisions, dispatches and statuses
    cli = [sys.executable, "-m", "guardian"]
    ours = tmp_path / "topics.jsonl"
    subprocess.run([*cli, "export", "--out", str(ours)], env=guardian_env, check=True, timeout=120)
    assert len(ours.read_bytes().splitlines()) >= len(records)
    theirs = tmp_path / "kcat.jsonl"
    theirs.write_bytes(kcat_export(kafka_bootstrap, names))
    for export_file in (ours, theirs):
        out_dir = tmp_path / f"replay-{export_file.stem}"
        subprocess.run(
            [*cli, "replay", str(export_file), "--out", str(out_dir)],
            env=guardian_env,
            check=True,
            timeout=120,
        )
        summary = orjson.loads((out_dir / "summary.json").read_bytes())
        assert summary["decisions_mode"] == "recorded"
        assert summary["divergences"] == 0
        assert summary["experiences"] == live.statuses()
        replay_decisions = [orjson.loads(x) for x in (out_dir / "decisions.jsonl").read_bytes().splitlines()]
        replay_dispatch = [orjson.loads(x) for x in (out_dir / "dispatch.jsonl").read_bytes().splitlines()]
        assert {d["decision_id"]: d for d in replay_decisions} == assert_single_content(
            live.values["decisions"], "decision_id"
        )
        assert {d["dispatch_id"]: d for d in replay_dispatch} == assert_single_content(
            live.values["dispatch"], "dispatch_id"
        )
        assert (out_dir / "report.html").stat().st_size > 1000


def test_sigkill_mid_scenario_recovers_from_changelog(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    t0 = int(time.time() * 1000) - 300_000
    records, _ = fleet(topic_prefix, t0)
    replayed = replay_records(records, settings=SETTINGS)
    half = len(records) // 2
    first = WorkerProcess(guardian_env, tmp_path / "w1.log", worker_id="w1").start()
    try:
        produce_plans_first(kafka_bootstrap, names, records[:half])

        def some_decisions(out: Outputs) -> bool:
            return len(out.values["decisions"]) >= 3

        asyncio.run(collect(kafka_bootstrap, names, some_decisions, timeout_s=90, settle_s=0.5))
    finally:
        first.kill()
    # a new worker with an empty local store: the tables come back from their changelogs
    second = WorkerProcess(guardian_env, tmp_path / "w2.log", worker_id="w2").start()
    try:
        asyncio.run(produce(kafka_bootstrap, records[half:], in_order=True))
        live = asyncio.run(
            collect(kafka_bootstrap, names, all_ended(expected_statuses(replayed)), timeout_s=150)
        )
    finally:
        second.stop()
    compare(live, replayed)


def test_a_worker_joining_mid_scenario_changes_nothing(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    """A second worker joins while the first is busy (a rebalance with batches in flight and
    records in the merge): every record not yet committed is processed again in order, by whoever
    owns its partition now, so the outputs are replay's."""
    names = TopicNames(topic_prefix)
    t0 = int(time.time() * 1000) - 300_000
    records, _ = fleet(topic_prefix, t0)
    replayed = replay_records(records, settings=SETTINGS)
    half = len(records) // 2
    first = WorkerProcess(guardian_env, tmp_path / "w1.log", worker_id="w1").start()
    second: WorkerProcess | None = None
    try:
        produce_plans_first(kafka_bootstrap, names, records[:half])
        second = WorkerProcess(guardian_env, tmp_path / "w2.log", worker_id="w2").start()
        asyncio.run(produce(kafka_bootstrap, records[half:], in_order=True))
        live = asyncio.run(
            collect(kafka_bootstrap, names, all_ended(expected_statuses(replayed)), timeout_s=150)
        )
        assert first.alive() and second.alive(), first.log_tail() + second.log_tail()
    finally:
        first.stop()
        if second is not None:
            second.stop()
    compare(live, replayed)


def test_poison_records_do_not_stall_the_partition(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    t0 = int(time.time() * 1000) - 120_000
    script = build("HG-05", device_id="dev-poison", prefix=topic_prefix, t0=t0)
    poisoned: list[InputRecord] = []
    for i, r in enumerate(script.records):
        poisoned.append(r)
        if r.suffix in ("observations", "task-events") and i % 2 == 0:
            for j, junk in enumerate((b"\xff\xfe not utf-8", b"[]", b'{"event_id": 1}')):
                poisoned.append(InputRecord(r.suffix, r.topic, 0, 10_000 + i * 10 + j, r.ts, r.key, junk))
    replayed = replay_records(poisoned, settings=SETTINGS)
    worker = WorkerProcess(guardian_env, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce(kafka_bootstrap, poisoned, in_order=True))
        live = asyncio.run(
            collect(kafka_bootstrap, names, all_ended(expected_statuses(replayed)), timeout_s=90)
        )
    finally:
        worker.stop()
    assert live.statuses() == {script.experience_id: "returned"}
    assert len(live.values["deadletter"]) == len(poisoned) - len(script.records)
    compare(live, replayed)


def test_a_quiet_device_pending_change_is_confirmed_by_the_timer_even_after_a_restart(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    """Low light turns true and the device says nothing more: the live worker confirms the change
    when the window has passed (docs/CONTRACTS.md §4.3 step 7), as replay does at the end of its input —
    also when the worker was restarted while the change was pending."""
    names = TopicNames(topic_prefix)
    from tests.streams import Script

    quiet = Script(device_id="dev-quiet", prefix=topic_prefix, t=int(time.time() * 1000) + 500)
    quiet.start().wait(100).security_started().wait(100).patrol("2")
    quiet.wait(100).obs("vision.low_light_changed", {"low_light": True})
    replayed = replay_records(quiet.records, settings=SETTINGS)
    assert [d["decision"] for d in replayed.outs["decisions"]] == ["replan"]

    first = WorkerProcess(guardian_env, tmp_path / "w1.log", worker_id="w1").start()
    try:
        asyncio.run(produce(kafka_bootstrap, quiet.records))

        def pending(out: Outputs) -> bool:
            return any(
                e["stage"] == "evidence" and "patrolled" in e["summary"] for e in out.values["timeline"]
            )

        early = asyncio.run(collect(kafka_bootstrap, names, pending, timeout_s=60, settle_s=0.2))
        assert early.values["decisions"] == []
    finally:
        first.stop()
    second = WorkerProcess(guardian_env, tmp_path / "w2.log", worker_id="w1").start()
    try:

        def decided(out: Outputs) -> bool:
            return bool(out.values["decisions"])

        live = asyncio.run(collect(kafka_bootstrap, names, decided, timeout_s=90))
    finally:
        second.stop()
    assert assert_single_content(live.values["decisions"], "decision_id") == {
        d["decision_id"]: d for d in replayed.outs["decisions"]
    }


def test_the_dedup_sweep_prunes_old_keys_in_a_live_worker(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    """Dedup keys older than the window leave the worker's RocksDB (and their changelog gets a
    tombstone); recent ones stay."""
    from rocksdict import AccessType, Rdict

    from tests.streams import Script

    names = TopicNames(topic_prefix)
    now = int(time.time() * 1000)
    s = Script(device_id="dev-sweep", prefix=topic_prefix, t=now - 900_000)
    old = s.obs("vision.low_light_changed", {"low_light": False}, scoped=False)
    s.t = now
    recent = s.obs("vision.low_light_changed", {"low_light": False}, scoped=False)
    s.start()
    env = dict(guardian_env, GUARDIAN_DEDUP_SWEEP_S="1")
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce(kafka_bootstrap, s.records))
        asyncio.run(collect(kafka_bootstrap, names, lambda o: bool(o.statuses()), timeout_s=60, settle_s=4.0))
    finally:
        worker.stop()
    keys: set[bytes] = set()
    for db_path in (Path(env["GUARDIAN_DATA_DIR"]) / "worker").rglob("seen-*.db"):
        db = Rdict(str(db_path), access_type=AccessType.read_only())
        try:
            keys.update(bytes(k) for k in db.keys())  # noqa: SIM118 (an Rdict iterates differently)
        finally:
            db.close()
    assert f"dev-sweep\x1f{recent}".encode() in keys
    assert f"dev-sweep\x1f{old}".encode() not in keys


def test_a_quiet_device_precondition_deadline_is_decided_by_the_timer_even_after_a_restart(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    """HG-14 (g): the plan waits for a fresh snapshot that never comes. The live worker's timer ends
    it `blocked` 10 s after the plan (§9.4), as replay does at the end of its input — also when
    the worker was restarted while the plan was waiting."""
    names = TopicNames(topic_prefix)
    from tests.scenario_scripts import hg14
    from tests.streams import Script

    quiet = hg14("g")(Script(device_id="dev-waiting", prefix=topic_prefix, t=int(time.time() * 1000) + 500))
    replayed = replay_records(quiet.records, settings=SETTINGS)
    assert replayed.summary["experiences"] == {quiet.experience_id: "blocked"}

    first = WorkerProcess(guardian_env, tmp_path / "w1.log", worker_id="w1").start()
    try:
        asyncio.run(produce(kafka_bootstrap, quiet.records))

        def waiting(out: Outputs) -> bool:
            return bool(out.values["dispatch"])

        # stopped as soon as the refresh is out (the deadline is about 10 s away by then)
        asyncio.run(collect(kafka_bootstrap, names, waiting, timeout_s=60, settle_s=0))
    finally:
        first.stop()
    second = WorkerProcess(guardian_env, tmp_path / "w2.log", worker_id="w1").start()
    try:
        live = asyncio.run(
            collect(kafka_bootstrap, names, all_ended(expected_statuses(replayed)), timeout_s=90)
        )
    finally:
        second.stop()
    compare(live, replayed)
    (end,) = [e for e in live.values["timeline"] if e["stage"] == "end"]
    assert end["at_ms"] == quiet.plan["created_at_ms"] + 10_000

"""Every story of docs/SCENARIOS.md (HG-01..HG-16 and HG-04-B, every case of HG-13 and HG-14) live: a
real broker, a real ``guardian worker`` subprocess, and ``guardian simulate`` playing the devices.
The simulator's own verdict is checked, and then the outputs (and what the devices sent) are read
back from the topics and judged independently."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from pipeline import ids as pipeline_ids
from simulator.scenarios import MIX_POOL
from topics.names import TopicNames
from topics.plans import guardian_plan

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(240)]

READY_TIMEOUT_S = 90.0
SIM_TIMEOUT_S = 120.0
SPEED = 10


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@pytest.fixture
def worker(guardian_env: dict[str, str], tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    """A ``guardian worker`` subprocess on this test's topics (SIGTERM, then SIGKILL, always)."""
    log = (tmp_path / "worker.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "guardian", "worker"],
        env=guardian_env,
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield proc
    finally:
        _stop(proc)
        log.close()


async def _read_all(bootstrap: str, topics: list[str]) -> dict[str, list[tuple[str | None, bytes]]]:
    """Every record of ``topics`` up to their current end."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, auto_offset_reset="earliest"
    )
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    found: dict[str, list[tuple[str | None, bytes]]] = defaultdict(list)
    try:
        async with asyncio.timeout(60):
            await consumer.start()
            await producer.start()
            parts = [TopicPartition(t, p) for t in topics for p in sorted(await producer.partitions_for(t))]
            consumer.assign(parts)
            ends = await consumer.end_offsets(parts)
            starts = await consumer.beginning_offsets(parts)
            for tp in parts:
                consumer.seek(tp, starts[tp])
            remaining = {tp for tp in parts if ends[tp] > 0}
            while remaining:
                batches = await consumer.getmany(*remaining, timeout_ms=500)
                for tp, records in batches.items():
                    for r in records:
                        if r.offset < ends[tp] and r.value is not None:
                            found[tp.topic].append((r.key.decode() if r.key else None, r.value))
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
    finally:
        await consumer.stop()
        await producer.stop()
    return found


async def _wait_ready(bootstrap: str, names: TopicNames, proc: subprocess.Popen[bytes]) -> None:
    """Produce a probe plan until the worker answers with its goal entry."""
    device = f"probe-{uuid.uuid4().hex[:6]}"
    plan = guardian_plan(device, created_at_ms=int(time.time() * 1000))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    consumer = AIOKafkaConsumer(
        names.timeline, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest"
    )
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            await producer.start()
            await consumer.start()
            await producer.send_and_wait(
                names.plans, orjson.dumps(plan), key=device.encode(), timestamp_ms=plan["created_at_ms"]
            )
            while True:
                assert proc.poll() is None, "the worker exited"
                batches = await consumer.getmany(timeout_ms=500)
                for records in batches.values():
                    for r in records:
                        entry = orjson.loads(r.value or b"{}")
                        if (
                            entry.get("experience_id") == plan["experience_id"]
                            and entry.get("stage") == "goal"
                        ):
                            return
    finally:
        await consumer.stop()
        await producer.stop()


def test_every_scenario_live(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    tmp_path: Path,
    worker: subprocess.Popen[bytes],
) -> None:
    names = TopicNames(topic_prefix)
    asyncio.run(_wait_ready(kafka_bootstrap, names, worker))

    summary_path = tmp_path / "summary.json"
    sim = subprocess.run(
        [
            sys.executable,
            "-m",
            "guardian",
            "simulate",
            "--mix",
            "--devices",
            str(len(MIX_POOL)),
            "--speed",
            str(SPEED),
            "--seed",
            "21",
            "--timeout",
            str(SIM_TIMEOUT_S),
            "--summary-json",
            str(summary_path),
        ],
        env=guardian_env,
        capture_output=True,
        timeout=SIM_TIMEOUT_S + 60,
        check=False,
    )
    output = sim.stdout.decode(errors="replace") + sim.stderr.decode(errors="replace")
    assert sim.returncode == 0, output
    summary = orjson.loads(summary_path.read_bytes())
    assert summary["ok"] is True
    rows = {row["scenario"]: row for row in summary["experiences"]}
    assert sorted(rows) == sorted(MIX_POOL)  # every story, every case
    assert worker.poll() is None, "the worker died during the run"

    # -- judge the topics ourselves ---------------------------------------------------------------
    outputs = asyncio.run(
        _read_all(
            kafka_bootstrap,
            [names.decisions, names.dispatch, names.timeline, names.deadletter, names.task_events],
        )
    )
    exp_of = {row["experience"]: scenario for scenario, row in rows.items()}
    device_of = {row["device"]: scenario for scenario, row in rows.items()}
    status: dict[str, str] = {}
    decisions: dict[str, list[dict[str, Any]]] = defaultdict(list)
    dispatches: dict[str, list[dict[str, Any]]] = defaultdict(list)
    drops: dict[str, Counter[str]] = defaultdict(Counter)
    letters: dict[str, Counter[str]] = defaultdict(Counter)
    stages: dict[str, list[str]] = defaultdict(list)
    played: dict[str, set[str]] = defaultdict(set)
    for _, raw in outputs[names.timeline]:
        e = orjson.loads(raw)
        scenario = exp_of.get(e.get("experience_id"))
        if scenario is None:
            continue
        stages[scenario].append(e["stage"])
        if e["stage"] == "end":
            status[scenario] = e["status"]
        if e["stage"] == "drop":
            drops[scenario][e["drop_reason"]] += 1
    for _, raw in outputs[names.decisions]:
        d = orjson.loads(raw)
        if d["experience_id"] in exp_of:
            decisions[exp_of[d["experience_id"]]].append(d)
    for _, raw in outputs[names.dispatch]:
        d = orjson.loads(raw)
        if d["experience_id"] in exp_of:
            dispatches[exp_of[d["experience_id"]]].append(d)
    for key, raw in outputs[names.task_events]:
        if key in device_of:
            te = orjson.loads(raw)
            played[device_of[key]].add(f"{te['capability']}.{te['operation']}")
    for key, raw in outputs[names.deadletter]:
        d = orjson.loads(raw)
        if key in device_of:
            letters[device_of[key]][d["reason_code"]] += 1
            if d["reason_code"] in ("privacy_violation", "too_large", "not_json"):
                assert d["payload"] is None

    def kinds(s: str) -> list[str]:
        return [d["decision"] for d in decisions[s]]

    def ops(s: str) -> list[set[str]]:
        return [{f"{r['capability']}.{r['operation']}" for r in d["requests"]} for d in dispatches[s]]

    stop_return = {"security_patrol.stop", "movement.return_to_station"}
    assert status == {
        "HG-01": "completed",
        "HG-02": "completed",
        "HG-03": "returned",
        "HG-04": "completed",
        "HG-05": "returned",
        "HG-06": "completed",
        "HG-07": "completed",
        "HG-08": "aborted",
        "HG-09": "completed",
        "HG-10": "returned",
        "HG-11": "completed",
        "HG-12": "completed",
        "HG-04-B": "completed",
        "HG-13a": "completed",
        **{f"HG-13{c}": "blocked" for c in "bcde"},
        "HG-14f": "completed",
        "HG-14g": "blocked",
        "HG-14h": "blocked",
        "HG-15": "completed",
        "HG-16": "blocked",
    }
    # HG-01 quiet patrol: no decision, no dispatch
    assert kinds("HG-01") == [] and ops("HG-01") == []
    # HG-02 person + verification passed: two continues, no dispatch, budget down by 2
    assert kinds("HG-02") == ["continue", "continue"] and ops("HG-02") == []
    assert decisions["HG-02"][-1]["budget_after"]["decisions"] == 2
    # HG-03 / HG-10: ask_user with a spoken question naming the room, then return_to_station
    for s in ("HG-03", "HG-10"):
        assert kinds(s) == ["continue", "ask_user", "return_to_station"]
        assert ops(s) == [{"voice_content.speak"}, stop_return]
        tts = dispatches[s][0]["tts"]
        assert tts and not any(ch.isdigit() for ch in tts) and "area" not in tts
        assert {d["backend"] for d in decisions[s]} <= {"rules", "fallback"}
    # HG-04: flicker debounced, one replan to the remaining rooms only
    assert kinds("HG-04") == ["replan"] and drops["HG-04"]["debounced"] >= 1
    assert ops("HG-04") == [{"movement.move_to_room"}]
    # HG-05 battery low: return, stop then return
    assert kinds("HG-05") == ["return_to_station"] and ops("HG-05") == [stop_return]
    assert dispatches["HG-05"][0]["kind"] == "device_workflow_requests"
    # HG-06: no decision from network events, relayed records are stale
    assert kinds("HG-06") == [] and drops["HG-06"]["stale"] >= 1
    # HG-07: local pause then resume, no decision
    assert kinds("HG-07") == [] and ops("HG-07") == [{"security_patrol.pause"}, {"security_patrol.resume"}]
    assert all(d["decision_id"] is None for d in dispatches["HG-07"])
    # HG-08: budget spent, then the user cancel aborts anyway
    assert kinds("HG-08") == ["continue", "continue", "continue", "abort"]
    assert decisions["HG-08"][-1]["reason_code"] == "user_cancel" and drops["HG-08"]["budget_exhausted"] >= 1
    assert ops("HG-08") == [stop_return]
    # HG-09: nothing changes twice
    assert kinds("HG-09") == ["continue", "continue"] and ops("HG-09") == []
    assert drops["HG-09"]["duplicate"] >= 1 and drops["HG-09"]["out_of_order"] >= 1
    # HG-11: the right dead letters, and the canary nowhere in the outputs
    assert letters["HG-11"] == Counter(
        {"privacy_violation": 2, "unknown_contract": 1, "too_large": 1, "not_json": 1}
    )
    for topic in (names.decisions, names.dispatch, names.timeline, names.deadletter):
        assert all(b"CANARY-" not in raw for _, raw in outputs[topic]), topic
    # HG-12: cross_device dead letter; the other device's experience is unaffected
    assert letters["HG-12"] == Counter({"cross_device": 1})
    assert kinds("HG-12") == []
    # HG-04-B: no device context, so the replan's moves are left out and none is played
    assert kinds("HG-04-B") == ["replan"] and ops("HG-04-B") == []
    assert drops["HG-04-B"]["condition_not_met"] >= 1 and "movement.move_to_room" not in played["HG-04-B"]
    # HG-13: (a) runs the air-care plan to the station; (b)-(e) blocked at once, nothing played
    air_care = {"movement.move_to_room", "air_cleaning.start_room_cleaning", "movement.return_to_station"}
    assert played["HG-13a"] == air_care and ops("HG-13a") == []
    for s in ("HG-13b", "HG-13c", "HG-13d", "HG-13e", "HG-14g", "HG-14h"):
        assert stages[s][-1] == "end" and "goal" not in stages[s], s
        assert played[s] == set() and kinds(s) == [], s  # a blocked plan is never played
    # HG-14: one refresh each, its ID a pure function of device and experience
    for s in ("HG-14f", "HG-14g", "HG-14h"):
        (refresh,) = dispatches[s]
        assert ops(s) == [{"device_context.refresh"}] and refresh["decision_id"] is None
        row = rows[s]
        assert refresh["dispatch_id"] == pipeline_ids.context_refresh_dispatch_id(
            row["device"], row["experience"]
        )
    assert played["HG-14f"] == air_care
    # HG-15: promoted triggers decided; the forbidden key in its context a payload-free dead letter
    assert kinds("HG-15") == ["continue", "continue"]
    assert letters["HG-15"] == Counter({"privacy_violation": 1})
    # HG-16: the question about the unknown state is played; the plan is not
    assert ops("HG-16") == [{"voice_content.speak"}] and played["HG-16"] == {"voice_content.speak"}
    tts = dispatches["HG-16"][0]["tts"]
    assert "I need to check the current state again." in tts or "현재 상태를 다시 확인해야 합니다." in tts
    # no decision or dispatch was published twice
    for topic in (names.decisions, names.dispatch):
        ids = [
            orjson.loads(raw).get("decision_id" if topic == names.decisions else "dispatch_id")
            for _, raw in outputs[topic]
        ]
        assert len(ids) == len(set(ids)), topic

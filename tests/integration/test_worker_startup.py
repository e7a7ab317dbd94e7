"""A worker never goes dark at start-up, says what it does, and never stops itself while the broker
answers.

Fresh workers on fresh topic prefixes of one broker each produce their first output (the issue's
acceptance bound: 15 s from the worker's start); a live worker's ``/metrics`` (parsed with the
Prometheus parser) counts exactly the records it was sent and the outputs it delivered, ``/ready``
and ``/healthz`` answer, and its log holds no terminal escape codes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.errors import KafkaError
from prometheus_client.parser import text_string_to_metric_families

from guardian.kafka_local import run_sync
from streams.admin import admin_client, changelog_topics, create_topics, delete_topics, worker_topics
from tests.conftest import make_guardian_env
from tests.live import Outputs, WorkerProcess, collect, produce
from tests.streams import T0, Script
from topics.names import TopicNames

pytestmark = pytest.mark.kafka

FRESH_WORKERS = 20
#: the issue's acceptance bound for a fresh worker's first output (not a speed target)
FIRST_OUTPUT_S = 15.0
#: how long a failing start is watched further, to say whether it was slow or hung
SLOW_OR_HUNG_S = 60.0


async def first_output(bootstrap: str, names: TopicNames, within_s: float) -> float | None:
    """When (``time.monotonic()``) the first timeline record was seen (None: not within ``within_s``)."""
    consumer = AIOKafkaConsumer(
        names.timeline,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        request_timeout_ms=30_000,
        metadata_max_age_ms=1000,
    )
    start = time.monotonic()
    await consumer.start()
    try:
        while time.monotonic() - start < within_s:
            batch = await consumer.getmany(timeout_ms=200)
            if any(batch.values()):
                return time.monotonic()
        return None
    finally:
        await consumer.stop()


def readiness(worker: WorkerProcess) -> str:
    """What the worker's /ready answers (its reasons when not ready), for a failure's message."""
    try:
        status, body = get(f"{worker.base_url}/ready")
    except OSError as exc:
        return f"nothing ({exc!r})"
    return f"{status} {body.decode(errors='replace')[:500]}"


def test_twenty_fresh_workers_each_produce_their_first_output(kafka_bootstrap: str, tmp_path: Path) -> None:
    hung: list[str] = []
    for i in range(FRESH_WORKERS):
        names = TopicNames(f"f{uuid.uuid4().hex[:8]}.")
        run_sync(lambda names=names: create_topics(kafka_bootstrap, names, 4))  # type: ignore[misc]
        env = make_guardian_env(kafka_bootstrap, names.prefix, 4, tmp_path / f"data-{i}")
        script = Script(device_id=f"fresh-{i}", prefix=names.prefix).start()
        worker = WorkerProcess(env, tmp_path / f"worker-{i}.log").start()
        started = time.monotonic()
        try:
            asyncio.run(produce(kafka_bootstrap, script.records))
            # waited longer than the bound, so a failure tells a slow start from a hung one
            seen = asyncio.run(first_output(kafka_bootstrap, names, SLOW_OR_HUNG_S))
            took = None if seen is None else seen - started
            if took is None or took > FIRST_OUTPUT_S:
                said = "no output at all" if took is None else f"its first output only after {took:.1f} s"
                hung.append(
                    f"worker {i} (prefix {names.prefix}): {said} of its start "
                    f"(bound {FIRST_OUTPUT_S:g} s, watched {SLOW_OR_HUNG_S:g} s); alive={worker.alive()}; "
                    f"/ready says {readiness(worker)}; its log ends:\n{worker.log_tail(15)}"
                )
        finally:
            worker.stop()
            with contextlib.suppress(KafkaError, OSError, TimeoutError):
                run_sync(
                    lambda names=names: delete_topics(kafka_bootstrap, worker_topics(names), timeout_s=20)
                )  # type: ignore[misc]
        if hung:
            break  # one hang is enough to fail, with its log
    assert not hung, "\n".join(hung)


async def topic_configs(bootstrap: str, topics: list[str]) -> dict[str, dict[str, str]]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async with admin_client(bootstrap) as client:
        responses = await client.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        )
    found: dict[str, dict[str, str]] = {}
    for response in responses:
        for _code, _message, _type, name, entries in response.resources:
            found[name] = {entry[0]: entry[1] for entry in entries}
    return found


def test_input_topics_keep_records_of_any_age(kafka_bootstrap: str, topic_names: TopicNames) -> None:
    """Input records carry their receive time, possibly long past (the scripts of these tests are
    months old): the broker's time-based retention would delete them at its next check, before a
    worker read them (a fresh worker then started past them, ready and idle)."""
    inputs = [
        topic_names.plans,
        topic_names.device_context,
        topic_names.task_events,
        topic_names.observations,
    ]
    changelogs = changelog_topics(topic_names)
    configs = run_sync(lambda: topic_configs(kafka_bootstrap, [*inputs, *changelogs]))
    assert {t: configs[t]["retention.ms"] for t in inputs} == dict.fromkeys(inputs, "-1")
    assert {t: configs[t]["cleanup.policy"] for t in changelogs} == dict.fromkeys(changelogs, "compact")


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as err:
        return int(err.code), bytes(err.read())


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def labelled(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, label: str
) -> dict[str, float]:
    return {dict(labels)[label]: v for (n, labels), v in found.items() if n == name}


def story(prefix: str) -> Script:
    """A plan, task events, state-only and promoted observations, a duplicate and bad records."""
    s = Script(device_id="metrics-1", prefix=prefix, t=T0).start()
    s.wait(100).security_started()
    for _ in range(4):  # state only
        s.wait(200).obs("network.aws_iot_session_changed", {"connected": True}, scoped=False)
    s.wait(200).obs("security.condition_changed", {"battery": "ok"})  # a trigger: continue
    dup = s.wait(200).obs("vision.low_light_changed", {"low_light": False})
    s.wait(100).obs("vision.low_light_changed", {"low_light": False}, event_id=dup)
    s.wait(100).raw("observations", b"{not json")
    s.wait(100).obs("security.condition_changed", {"battery": "ok"}, extra={"bbox": [1, 2]})
    s.wait(100).obs("security.condition_changed", {"battery": "low"})
    return s


def test_a_live_worker_counts_what_it_was_sent(
    kafka_bootstrap: str, topic_names: TopicNames, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    script = story(topic_names.prefix)
    sent: dict[str, int] = {}
    for r in script.records:
        sent[r.suffix] = sent.get(r.suffix, 0) + 1
    worker = WorkerProcess(guardian_env, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce(kafka_bootstrap, script.records))

        def done(out: Outputs) -> bool:
            return bool(out.values["dispatch"]) and len(out.values["deadletter"]) >= 2

        out = asyncio.run(collect(kafka_bootstrap, topic_names, done, timeout_s=90, settle_s=3))
        metrics_url = f"{worker.base_url}/metrics"
        found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the last batch is counted once Kafka acknowledged it
            status, body = get(metrics_url)
            assert status == 200
            found = samples(body.decode())
            if labelled(found, "guardian_input_records_total", "topic") == {
                k: float(v) for k, v in sent.items()
            }:
                break
            time.sleep(0.5)
        assert labelled(found, "guardian_input_records_total", "topic") == {
            k: float(v) for k, v in sent.items()
        }
        outputs = {k: float(len(v)) for k, v in out.values.items() if v}
        assert labelled(found, "guardian_output_records_total", "topic") == outputs
        dead: dict[str, float] = {}
        for d in out.values["deadletter"]:
            dead[d["reason_code"]] = dead.get(d["reason_code"], 0) + 1
        assert (
            labelled(found, "guardian_dead_letters_total", "reason")
            == dead
            == {"not_json": 1, "privacy_violation": 1}
        )
        drops: dict[str, float] = {}
        for e in out.values["timeline"]:
            if e["stage"] == "drop":
                drops[e["drop_reason"]] = drops.get(e["drop_reason"], 0) + 1
        assert labelled(found, "guardian_timeline_drops_total", "reason") == drops
        assert drops.get("duplicate") == 1
        decisions: dict[tuple[str, str], float] = {}
        for d in out.values["decisions"]:
            key = (d["decision"], d["backend"])
            decisions[key] = decisions.get(key, 0) + 1
        got = {
            (dict(labels)["decision"], dict(labels)["backend"]): v
            for (n, labels), v in found.items()
            if n == "guardian_decisions_total"
        }
        assert got == decisions and decisions.get(("return_to_station", "rules")) == 1
        assert found[("guardian_trigger_to_dispatch_seconds_count", ())] == len(out.values["dispatch"])
        assert found[("guardian_batch_records_count", ())] >= 1
        assert found[("guardian_flush_duration_seconds_count", ())] >= 1
        assert found[("process_resident_memory_bytes", ())] > 0
        assert found[("guardian_table_recovery_completed", ())] == 1
        assert found[("guardian_ready", ())] == 1
        lag = labelled(found, "guardian_consumer_lag_records", "partition")
        assert lag and all(v >= 0 for v in lag.values())

        status, body = get(f"{worker.base_url}/ready")
        assert (status, orjson.loads(body)) == (200, {"ready": True})
        status, body = get(f"{worker.base_url}/healthz")
        assert (status, orjson.loads(body)) == (200, {"status": "ok"})
    finally:
        worker.stop()
    log = (tmp_path / "worker.log").read_bytes()
    assert b"\x1b" not in log, "terminal escape codes in a log that is not a terminal"
    assert f"metrics on http://127.0.0.1:{worker.web_port}/metrics".encode() in log


def test_a_worker_whose_topics_do_not_exist_says_so_and_stops(kafka_bootstrap: str, tmp_path: Path) -> None:
    names = TopicNames(f"n{uuid.uuid4().hex[:8]}.")
    env = make_guardian_env(kafka_bootstrap, names.prefix, 4, tmp_path / "data")
    env["GUARDIAN_READY_TIMEOUT_S"] = "3"
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        assert worker.proc is not None
        code = worker.proc.wait(timeout=60)
    finally:
        worker.stop()
        with contextlib.suppress(KafkaError, OSError, TimeoutError):
            run_sync(lambda: delete_topics(kafka_bootstrap, worker_topics(names), timeout_s=20))
    log = (tmp_path / "worker.log").read_text()
    assert code == 5, log
    assert f"{names.plans} (missing)" in log and "guardian topics create" in log
    lines: list[Any] = [line for line in log.splitlines() if "not ready" in line]
    assert len(lines) == 1, log


def test_a_worker_that_cannot_join_its_group_says_so_and_keeps_trying(
    kafka_bootstrap: str, topic_names: TopicNames, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    """Another kind of consumer holds the worker's group: faust cannot join it (and says nothing
    more). The worker says once what is missing, counts it and answers ``/ready`` with the reason,
    and stays: once the other consumer is gone it joins and is ready (it used to exit 5, and under
    rebalance storms workers left the group one after the other that way)."""
    env = {**guardian_env, "GUARDIAN_READY_TIMEOUT_S": "5"}
    worker = WorkerProcess(env, tmp_path / "worker.log")

    async def blocked_then_freed() -> tuple[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]]:
        blocker = AIOKafkaConsumer(
            topic_names.plans,
            bootstrap_servers=kafka_bootstrap,
            group_id=f"{topic_names.prefix}worker",
            enable_auto_commit=False,
        )
        await blocker.start()
        try:
            async with asyncio.timeout(60):
                while not blocker.assignment():
                    await blocker.getmany(timeout_ms=200)
            worker.start()
            async with asyncio.timeout(120):  # the timeout told, and counted
                while "not ready after" not in worker.log_tail(200):
                    assert worker.alive(), worker.log_tail()
                    await asyncio.sleep(0.5)
            await asyncio.sleep(6)  # more than its ready timeout again: still there, said once
            assert worker.alive(), worker.log_tail()
            said = await asyncio.to_thread(readiness, worker)
            status, body = await asyncio.to_thread(get, f"{worker.base_url}/metrics")
            assert status == 200
            return said, samples(body.decode())
        finally:
            await blocker.stop()

    try:
        said, found = asyncio.run(blocked_then_freed())
        assert said.startswith("503") and "no partition assignment from the consumer group yet" in said
        assert found[("guardian_not_ready_timeouts_total", ())] == 1
        assert found[("guardian_ready", ())] == 0
        deadline = time.monotonic() + 120  # the group is free: the worker joins it
        while not readiness(worker).startswith("200"):
            assert worker.alive(), worker.log_tail()
            assert time.monotonic() < deadline, f"never ready: {readiness(worker)}\n{worker.log_tail()}"
            time.sleep(0.5)
    finally:
        worker.stop()
    log = (tmp_path / "worker.log").read_text()
    assert worker.proc is not None and worker.proc.returncode == 0, log
    lines = [line for line in log.splitlines() if "not ready after" in line]
    assert len(lines) == 1, log
    assert "GUARDIAN_READY_TIMEOUT_S=5), still trying" in lines[0] and "no partition assignment" in lines[0]

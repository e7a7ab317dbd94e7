"""Static membership on a real broker (``streams.seam.membership``).

A worker given its ID is a static member of its consumer group: killed (SIGKILL) and restarted
under the same ID, it takes its partitions back without a rebalance (the group generation, as the
surviving worker reports it, does not change) and records flow again. A worker stopped for good
with ``GUARDIAN_LEAVE_ON_STOP`` removes itself from the group (LeaveGroup v3 by its instance ID),
so the other worker holds every partition well before the 30 s session timeout would have moved
them (before, and without the setting, a static member's partitions waited for it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from aiokafka.protocol.group import MemberAssignment
from prometheus_client.parser import text_string_to_metric_families

from config.settings import Settings
from streams.app import app_id
from tests.live import Outputs, WorkerProcess, collect, group_members, produce, ready
from tests.streams import Script
from topics.names import INPUT_SUFFIXES, TopicNames

pytestmark = pytest.mark.kafka

#: the worker's session timeout (``streams.app``): what a static member's partitions waited for
SESSION_TIMEOUT_S = 30.0


async def group_assignment(bootstrap: str, group: str) -> list[set[tuple[str, int]]]:
    """Each member's assigned topic-partitions, as the group coordinator has them."""
    members = []
    for member in await group_members(bootstrap, group):
        raw = member["member_assignment"]
        held: set[tuple[str, int]] = set()
        if raw:
            for topic, partitions in MemberAssignment.decode(raw).assignment:
                held.update((topic, p) for p in partitions)
        members.append(held)
    return members


def metric(worker: WorkerProcess, name: str) -> float | None:
    try:
        with urllib.request.urlopen(f"{worker.base_url}/metrics", timeout=5) as answer:
            text = answer.read().decode()
    except OSError:
        return None
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return float(sample.value)
    return None


def wait_until(what: str, done: object, timeout_s: float, *workers: WorkerProcess) -> None:
    deadline = time.monotonic() + timeout_s
    while not done():  # type: ignore[operator]
        for w in workers:
            assert w.alive(), f"{w.worker_id} exited while waiting for {what}:\n{w.log_tail()}"
        assert time.monotonic() < deadline, f"{what} not within {timeout_s:g} s\n" + "\n".join(
            w.log_tail(15) for w in workers
        )
        time.sleep(0.2)


def flow(bootstrap: str, names: TopicNames, tag: str, devices: int = 16) -> None:
    """New plans on every partition (``devices`` devices): each one's goal entry comes out."""
    scripts = [Script(device_id=f"{tag}-{i}", prefix=names.prefix).start() for i in range(devices)]
    asyncio.run(produce(bootstrap, [r for s in scripts for r in s.records]))
    wanted = {s.experience_id for s in scripts}

    def all_goals(out: Outputs) -> bool:
        return wanted <= {e["experience_id"] for e in out.values["timeline"] if e["stage"] == "goal"}

    asyncio.run(collect(bootstrap, names, all_goals, timeout_s=120, settle_s=0.2))


def two_workers(
    guardian_env: dict[str, str], tmp_path: Path, bootstrap: str, group: str, **env2: str
) -> tuple[WorkerProcess, WorkerProcess]:
    w1 = WorkerProcess(dict(guardian_env), tmp_path / "w1.log", worker_id="w1").start()
    w2 = WorkerProcess(
        dict(guardian_env, GUARDIAN_DATA_DIR=str(tmp_path / "data-2"), **env2),
        tmp_path / "w2.log",
        worker_id="w2",
    ).start()

    def split() -> bool:
        held = asyncio.run(group_assignment(bootstrap, group))
        return len(held) == 2 and all(held) and ready(w1) and ready(w2)

    wait_until("two workers sharing the partitions, both ready", split, 120, w1, w2)
    return w1, w2


def test_a_static_member_killed_and_restarted_under_its_id_resumes_without_a_rebalance(
    kafka_bootstrap: str, topic_names: TopicNames, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    group = app_id(replace(Settings.from_env({}), topic_prefix=topic_names.prefix))
    w1, w2 = two_workers(guardian_env, tmp_path, kafka_bootstrap, group)
    try:
        flow(kafka_bootstrap, topic_names, "before")
        generation = metric(w2, "guardian_consumer_group_generation")
        assert generation is not None and generation > 0
        held_before = sorted(map(sorted, asyncio.run(group_assignment(kafka_bootstrap, group))))
        w1.kill()  # SIGKILL: no commit, no goodbye; the broker keeps its partitions for it
        killed = time.monotonic()
        w1 = WorkerProcess(dict(guardian_env), tmp_path / "w1-again.log", worker_id="w1").start()
        wait_until("w1 ready again", lambda: ready(w1), 120, w1, w2)
        print(f"static member back and ready {time.monotonic() - killed:.1f} s after its SIGKILL")
        flow(kafka_bootstrap, topic_names, "after")
        assert metric(w2, "guardian_consumer_group_generation") == generation, (
            "the group rebalanced around the restart\n" + w2.log_tail()
        )
        assert metric(w1, "guardian_consumer_group_generation") == generation
        assert sorted(map(sorted, asyncio.run(group_assignment(kafka_bootstrap, group)))) == held_before
    finally:
        w1.stop()
        w2.stop()


def test_a_worker_leaving_for_good_hands_its_partitions_over_before_the_session_timeout(
    kafka_bootstrap: str,
    topic_names: TopicNames,
    guardian_env: dict[str, str],
    tmp_path: Path,
    kafka_partitions: int,
) -> None:
    group = app_id(replace(Settings.from_env({}), topic_prefix=topic_names.prefix))
    w1, w2 = two_workers(guardian_env, tmp_path, kafka_bootstrap, group, GUARDIAN_LEAVE_ON_STOP="1")
    inputs = {(topic_names.prefix + s, p) for s in INPUT_SUFFIXES for p in range(kafka_partitions)}
    try:
        assert w2.proc is not None
        stopped = time.monotonic()
        os.killpg(w2.proc.pid, signal.SIGTERM)  # GUARDIAN_LEAVE_ON_STOP=1: a scale-down

        def handed_over() -> bool:
            held = asyncio.run(group_assignment(kafka_bootstrap, group))
            return len(held) == 1 and inputs <= held[0]

        # bounded by the session timeout: without the member removal nothing moves before it
        wait_until("w1 holding every partition", handed_over, SESSION_TIMEOUT_S - 5, w1)
        took = time.monotonic() - stopped
        assert w2.proc.wait(timeout=60) == 0, w2.log_tail()
        print(
            f"partitions handed over {took:.2f} s after w2's SIGTERM "
            f"(w2 exited {time.monotonic() - stopped:.2f} s after it)"
        )
        assert "leaving group" not in w2.log_tail(), w2.log_tail()  # its removal did not fail
        flow(kafka_bootstrap, topic_names, "scaled-down")
    finally:
        w2.stop()
        w1.stop()

"""Worker faults under load (docs/SCENARIOS.md HG-21): a SIGKILL, a second worker joining then leaving."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from guardian.replay import replay_records
from streams.app import app_id
from tests.live import WorkerProcess, collect, group_members
from tests.reliability.fault_load import (
    SETTINGS,
    collect_all,
    compare,
    lag_returns_to_zero,
    load,
    produce_in_order,
    some_decisions,
)
from topics.names import TopicNames

pytestmark = [pytest.mark.reliability, pytest.mark.kafka]


def test_hg21_sigkill_under_load_recovers_exactly(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    tmp_path: Path,
    kafka_partitions: int,
) -> None:
    names = TopicNames(topic_prefix)
    records = load(topic_prefix, int(time.time() * 1000) - 600_000)
    replayed = replay_records(records, settings=SETTINGS)
    half = len(records) // 2
    first = WorkerProcess(guardian_env, tmp_path / "w1.log", worker_id="w1").start()
    try:
        asyncio.run(produce_in_order(kafka_bootstrap, records[:half]))
        asyncio.run(collect(kafka_bootstrap, names, some_decisions(10), timeout_s=120, settle_s=0.3))
    finally:
        first.kill()  # SIGKILL mid-load: no flush, no commit
    second = WorkerProcess(guardian_env, tmp_path / "w2.log", worker_id="w2").start()
    try:
        asyncio.run(produce_in_order(kafka_bootstrap, records[half:]))
        live = collect_all(kafka_bootstrap, names, replayed, timeout_s=240)
        compare(live, replayed, owner_index_may_lag=True)
        lag_returns_to_zero(kafka_bootstrap, topic_prefix, kafka_partitions)
    finally:
        second.stop()
    assert second.proc is not None and second.proc.returncode in (0, -15), second.log_tail()


def worker_state(worker: WorkerProcess) -> str:
    """What a worker says of itself (/ready, its input lag), for a failure's message."""
    import urllib.request

    lines = []
    for page in ("/ready", "/metrics"):
        try:
            with urllib.request.urlopen(worker.base_url + page, timeout=5) as answer:
                text = answer.read().decode()
        except OSError as exc:  # /ready answers 503 with its reasons when not ready
            read = getattr(exc, "read", None)
            text = read().decode() if read is not None else str(exc)
        if page == "/metrics":
            text = "\n".join(
                line for line in text.splitlines() if line.startswith("guardian_consumer_lag_records")
            )
        lines.append(f"{worker.worker_id} {page}: {text}")
    return "\n".join(lines) + "\n" + worker.log_tail(10)


def ready_again(worker: WorkerProcess, timeout_s: float = 60.0) -> None:
    """The worker answers ``/ready`` 200 again, and says its tables are recovered for the partitions
    it holds now (``guardian_table_recovery_completed`` 1)."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        assert worker.alive(), worker_state(worker)
        try:
            with urllib.request.urlopen(worker.base_url + "/ready", timeout=5) as answer:
                if answer.status == 200:
                    break
        except OSError:  # 503 while not ready
            pass
        assert time.monotonic() < deadline, f"{worker.worker_id} not ready again\n{worker_state(worker)}"
        time.sleep(1)
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(worker.base_url + "/metrics", timeout=5) as answer:
        families = text_string_to_metric_families(answer.read().decode())
    (completed,) = [f.samples[0].value for f in families if f.name == "guardian_table_recovery_completed"]
    assert completed == 1, worker_state(worker)


def test_two_workers_split_partitions_then_one_leaves(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    tmp_path: Path,
    kafka_partitions: int,
) -> None:
    names = TopicNames(topic_prefix)
    group = app_id(replace(SETTINGS, topic_prefix=topic_prefix))
    records = load(topic_prefix, int(time.time() * 1000) - 600_000)
    replayed = replay_records(records, settings=SETTINGS)
    # w2 leaves for good (a scale-down): a static member otherwise keeps its partitions for the
    # session timeout, waiting for a restart under its ID
    env2 = dict(guardian_env, GUARDIAN_DATA_DIR=str(tmp_path / "guardian-data-2"), GUARDIAN_LEAVE_ON_STOP="1")
    w1 = WorkerProcess(guardian_env, tmp_path / "w1.log", worker_id="w1").start()
    w2 = WorkerProcess(env2, tmp_path / "w2.log", worker_id="w2").start()
    third = len(records) // 3
    try:
        deadline = time.monotonic() + 90
        while len(asyncio.run(group_members(kafka_bootstrap, group))) < 2:
            assert time.monotonic() < deadline, "the two workers never formed one group\n" + w2.log_tail()
            assert w1.alive() and w2.alive(), w1.log_tail() + "\n" + w2.log_tail()
            time.sleep(1)
        # the fleet never pauses (a pause between two parts of the load made a quiet device of one
        # in the middle of its story: its partition, caught up and idle, followed the wall clock,
        # ten minutes past the records' time, and its refresh deadline passed before its answer)
        two_thirds = threading.Event()
        failed: list[Exception] = []

        def fleet() -> None:
            def progress(done: int) -> None:
                if done >= 2 * third:
                    two_thirds.set()

            try:
                asyncio.run(produce_in_order(kafka_bootstrap, records, delivered=progress))
            except Exception as exc:  # noqa: BLE001 - failed in the test's own thread below
                failed.append(exc)
            finally:
                two_thirds.set()

        producing = threading.Thread(target=fleet, name="fleet")
        producing.start()
        asyncio.run(collect(kafka_bootstrap, names, some_decisions(10), timeout_s=120, settle_s=0.3))
        # the partitions are split: both workers are members, each with an assignment
        assert len(asyncio.run(group_members(kafka_bootstrap, group))) == 2
        assert two_thirds.wait(300)
        w2.stop()  # SIGTERM with GUARDIAN_LEAVE_ON_STOP: a clean leave; w1 takes its partitions over
        assert w2.proc is not None and w2.proc.returncode in (0, -15), w2.log_tail()
        producing.join(300)
        assert not producing.is_alive() and not failed, failed
        try:
            live = collect_all(kafka_bootstrap, names, replayed, timeout_s=240)
            compare(live, replayed, owner_index_may_lag=True)
            lag_returns_to_zero(kafka_bootstrap, topic_prefix, kafka_partitions)
        except (TimeoutError, AssertionError) as exc:
            raise AssertionError(f"{exc}\n{worker_state(w1)}") from exc
        ready_again(w1)  # the partitions it took over recovered, as /ready and the metric say
    finally:
        w2.stop()
        w1.stop()

"""Tables recovered *for the current assignment* (``streams.seam.recovery.RecoveryWatch``), as the
worker's readiness, its ``guardian_table_recovery_completed`` metric and the quiet devices' rescan
see it, driven through faust's own recovery object on the worker's real App.

faust's ``Recovery.completed`` is set when the first assignment's tables are recovered and never
cleared: while a later assignment's changelogs were read, ``/ready`` said the tables were recovered
(the stream suspended instead, without the records left), the metric said 1, and only the rescan
knew better (with a copy of its own)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from config.settings import Settings
from streams.health import Readiness
from streams.metrics import GuardianMetrics
from streams.quiet import QuietDevices
from streams.seam.check import check
from streams.seam.parts import SeamError
from streams.seam.recovery import RecoveryWatch


class Shell:
    """The shell's part the ``guardian.confirm`` timer drives (``streams.quiet.QuietDevices``):
    the devices its store holds with a pending change."""

    def __init__(self) -> None:
        self.store: dict[str, int] = {}  # device -> when its pending change is due
        self.tracked: dict[str, int] = {}
        self.sent: list[str] = []
        self.rescanning: dict[int, bytes | None] = {}  # this fake's rescan is done at once

    def rescan(self) -> None:
        self.tracked.update(self.store)

    def due_confirmations(self, wall_ms: int) -> list[tuple[str, int, int]]:
        due = [(device, 0, wall_ms) for device, at in self.tracked.items() if at <= wall_ms]
        for device, _, _ in due:
            del self.tracked[device]
        return due

    def send_control(self, partition: int, key: str, cmd: dict[str, Any]) -> None:
        self.sent.append(key)


class Worker:
    """A worker built as ``guardian worker`` builds it (not started), taken through rebalances the
    way faust's consumer and recovery take it: the App's signals as faust sends them, faust's
    ``Recovery.on_rebalance`` and its completion (``on_recovery_completed``, or ``_resume_streams``
    as faust does without tables) on faust's own objects. The consumer is not connected: its
    assignment is given (empty: faust then seeks nothing) and its fetcher is not started."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        from streams.worker import build_worker_app

        settings = Settings.from_env({"GUARDIAN_DATA_DIR": str(tmp_path), "GUARDIAN_TOPIC_PREFIX": "r."})
        self.app, shell = build_worker_app(settings, bootstrap="127.0.0.1:9", worker_id="w0")
        assert shell.reports.readiness is not None and shell.reports.metrics is not None
        self.readiness: Readiness = shell.reports.readiness
        self.metrics: GuardianMetrics = shell.reports.metrics
        self.recovery = self.readiness.recovery
        self.faust = self.app.tables.recovery
        self.changelog = TP("r.worker-devices-changelog", 0)
        consumer = self.app.consumer
        monkeypatch.setattr(consumer, "assignment", lambda: set())
        monkeypatch.setattr(consumer, "resume_partitions", lambda tps: None)

        async def not_started() -> None:
            return None

        monkeypatch.setattr(self.app._fetcher, "maybe_start", not_started)

    def close(self) -> None:
        self.app.consumer._thread.thread_loop.close()

    def run(self, coro: Any) -> Any:
        return asyncio.run(coro)

    def rebalance(self, generation: int, *, left: int) -> None:
        """Partitions move: revoked (faust suspends the stream), then assigned with ``generation``,
        whose recovery then reads its changelogs (``left`` records to go)."""
        self.revoke()
        self.assign(generation)
        self.recovering(left)

    def revoke(self) -> None:
        self.app.flow_control.suspend()
        self.run(self.app.on_partitions_revoked.send(set()))

    def assign(self, generation: int) -> None:
        self.app.consumer_generation_id = generation  # faust's rebalance listener, first thing
        self.run(self.faust.on_rebalance(set(), set(), set(), generation))
        self.run(self.app.on_partitions_assigned.send(set()))

    def recovering(self, left: int) -> None:
        rec = self.faust
        rec.signal_recovery_start.clear()  # faust's recovery task takes the new assignment up
        rec.active_highwaters[self.changelog] = 99
        rec.active_offsets[self.changelog] = 99 - left

    def recovered(self, generation: int, *, through: str = "on_recovery_completed") -> None:
        """faust's recovery of ``generation`` ends (its changelogs read to their end)."""
        rec = self.faust
        rec.active_offsets[self.changelog] = rec.active_highwaters[self.changelog]
        self.run(getattr(rec, through)(generation_id=generation))

    def metric(self) -> float:
        from prometheus_client import generate_latest

        text = generate_latest(self.metrics.registry).decode()
        for family in text_string_to_metric_families(text):
            if family.name == "guardian_table_recovery_completed":
                return float(family.samples[0].value)
        raise AssertionError("no guardian_table_recovery_completed metric")

    def about_tables(self) -> list[str]:
        """What ``/ready`` says is missing about the tables and the stream (the claims log and the
        producer are not this test's: the worker is not connected)."""
        return [m for m in self.readiness.missing() if "table recovery" in m or "suspended" in m]


@pytest.fixture
def worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Worker]:
    w = Worker(tmp_path, monkeypatch)
    try:
        yield w
    finally:
        w.close()


@pytest.mark.parametrize("through", ["on_recovery_completed", "_resume_streams"])
def test_a_later_assignment_is_recovered_once_its_own_recovery_ends(worker: Worker, through: str) -> None:
    """A worker ready on its first assignment takes over partitions (another worker left): until
    their changelogs are read, ``/ready`` names the table recovery with the records left, the
    metric reads 0 and the quiet devices' rescan waits; once read, all three say recovered. The
    rescan then finds a taken-over device whose precondition deadline (or debounce window) has
    passed: a rescan at the first tick after the rebalance read the store before it held the
    device, and its deadline never came."""
    shell = Shell()
    quiet = QuietDevices(shell, shell.send_control, worker.recovery)  # type: ignore[arg-type]

    worker.rebalance(1, left=3)
    assert worker.about_tables() == ["table recovery not complete (3 changelog records to read)"]
    assert worker.metric() == 0
    worker.recovered(1, through=through)  # the first assignment: ready as faust says
    assert worker.faust.completed.is_set()
    assert worker.about_tables() == []
    assert worker.metric() == 1
    asyncio.run(quiet.confirm())
    assert quiet.scanned

    worker.rebalance(2, left=5)  # the partitions of a worker that left come here
    quiet.scanned = False  # (the rebalance handlers)
    assert worker.faust.completed.is_set()  # faust's own flag still says done
    assert worker.about_tables() == ["table recovery not complete (5 changelog records to read)"]
    assert worker.metric() == 0
    asyncio.run(quiet.confirm())
    assert not quiet.scanned  # the store does not hold the taken-over devices yet

    shell.store["airbot-g"] = 0  # recovered from the changelog: its deadline has passed
    worker.recovered(2, through=through)
    assert worker.about_tables() == []
    assert worker.metric() == 1
    asyncio.run(quiet.confirm())
    assert quiet.scanned and shell.sent == ["airbot-g"]


def test_a_recovery_overtaken_by_another_rebalance_does_not_count_for_the_new_one(worker: Worker) -> None:
    """faust ends a recovery that another rebalance overtook ("Recovery rebalancing again"), its
    ``on_rebalance_complete`` sent when the new generation is already set: the new assignment's
    tables are not recovered until its own recovery ends."""
    worker.rebalance(1, left=0)
    worker.recovered(1)
    worker.rebalance(2, left=4)
    worker.revoke()  # generation 3 arrives while 2 still recovers
    worker.app.consumer_generation_id = 3  # (its listener, first thing)
    worker.run(worker.faust.on_recovery_completed(generation_id=2))  # 2's recovery ends, too late
    assert worker.metric() == 0
    worker.run(worker.faust.on_rebalance(set(), set(), set(), 3))  # 3's recovery waits to start
    worker.run(worker.faust.on_recovery_completed(generation_id=2))
    worker.run(worker.app.on_partitions_assigned.send(set()))
    assert worker.metric() == 0
    (said,) = worker.about_tables()
    assert said.startswith("table recovery not complete")
    worker.recovering(2)
    assert worker.about_tables() == ["table recovery not complete (2 changelog records to read)"]
    assert worker.metric() == 0
    worker.recovered(3)
    assert worker.about_tables() == [] and worker.metric() == 1


def test_between_a_revoke_and_the_next_assignment_nothing_is_recovered(worker: Worker) -> None:
    worker.rebalance(1, left=0)
    worker.recovered(1)
    assert worker.metric() == 1
    worker.revoke()
    assert worker.metric() == 0
    assert not worker.recovery.completed()
    assert worker.readiness.missing()[0] == "no partition assignment from the consumer group yet"
    worker.assign(2)
    worker.recovering(0)  # nothing to read: faust's recovery ends at once
    assert worker.metric() == 0
    worker.recovered(2)
    assert worker.metric() == 1


def test_the_recovery_progress_keeps_a_later_assignment_waiting(worker: Worker) -> None:
    """The watchdog's timer (exit 5 when not ready in time) waits for a later assignment's recovery
    while it reads records, and its reason names the recovery and the records left."""
    reasons: list[str] = []
    worker.readiness.on_timeout = reasons.append
    worker.rebalance(1, left=0)
    worker.recovered(1)
    worker.rebalance(2, left=50)
    start = 1_000.0
    worker.readiness.wait.waiting_since = worker.readiness.wait.last_progress = start
    for step in range(1, 6):  # progress every 40 s: still waiting after 200 s
        worker.faust.active_offsets[worker.changelog] += 5
        worker.readiness.check(start + 40 * step)
    assert reasons == []
    worker.readiness.check(start + 200 + worker.readiness.timeout_s)
    assert len(reasons) == 1
    assert "table recovery not complete (25 changelog records to read)" in reasons[0]


def test_the_seam_check_passes_and_a_missing_recovery_part_is_named(worker: Worker) -> None:
    check(worker.app, [])
    app = SimpleNamespace(tables=SimpleNamespace(recovery=SimpleNamespace()), consumer_generation_id=1)
    with pytest.raises(SeamError, match=r"faust\.tables\.recovery\.Recovery\._generation_id"):
        RecoveryWatch(app).on_rebalance_complete()

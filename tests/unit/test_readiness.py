"""Readiness says what is missing and tells a wait past its timeout once (the worker keeps trying)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

from faust.types import TP

from streams.health import Readiness
from streams.seam.reads import FetchState, fetch_states
from streams.seam.recovery import RecoveryWatch
from streams.stalls import InputWatch, WaitClock
from tests.unit.readiness_fakes import fake_app


def readiness_over(app: Any, timeout_s: float, on_timeout: Any, clock: WaitClock | None = None) -> Readiness:
    """Readiness of a fake app whose generation's recovery has ended if faust says so (the real
    objects: ``test_recovery_per_assignment``)."""
    watch = RecoveryWatch(app)
    if app.tables.recovery.completed.is_set():
        watch.on_rebalance_complete()
    return Readiness(app, timeout_s, on_timeout, watch, clock or WaitClock())


def test_readiness_names_what_is_missing() -> None:
    app = fake_app(completed=False, remaining=5, producer=False)
    readiness = readiness_over(app, 60.0, lambda reason: None)
    assert readiness.missing() == [
        "no partition assignment from the consumer group yet",
        "the Kafka producer is not running",
    ]
    readiness.on_assigned()
    assert readiness.missing()[0] == "table recovery not complete (5 changelog records to read)"
    app.tables.recovery.completed.value = True
    readiness.recovery.on_rebalance_complete()
    app.producer._producer = SimpleNamespace(_closed=False)
    app.flow_control.is_active = lambda: False
    assert readiness.missing() == ["the stream is suspended (a rebalance is in progress)"]
    app.flow_control.is_active = lambda: True
    assert readiness.missing() == []


def test_a_worker_never_assigned_says_so_once_per_wait_and_keeps_trying() -> None:
    reasons: list[str] = []
    t = [0.0]
    clock = WaitClock(monotonic=lambda: t[0])
    readiness = readiness_over(fake_app(completed=True), 5.0, reasons.append, clock)
    readiness.check(1.0)
    assert reasons == []
    readiness.check(6.0)
    readiness.check(7.0)  # said once
    assert len(reasons) == 1 and readiness.wait.timeouts == 1
    assert "not ready after 6 s" in reasons[0] and "GUARDIAN_READY_TIMEOUT_S=5), still trying" in reasons[0]
    assert "no partition assignment" in reasons[0]
    assert readiness.missing() == ["no partition assignment from the consumer group yet"]
    t[0] = 100.0
    readiness.on_assigned()  # the assignment comes after all: ready
    assert readiness.check(100.0) == [] and readiness.missing() == []
    readiness.on_revoked()  # a new wait, told again past the timeout
    readiness.check(101.0)
    assert len(reasons) == 1
    readiness.check(105.5)
    assert len(reasons) == 2 and readiness.wait.timeouts == 2


def test_a_recovery_that_moves_is_waited_for_and_one_that_stalls_is_not() -> None:
    reasons: list[str] = []
    app = fake_app(completed=False, remaining=50)
    readiness = readiness_over(app, 5.0, reasons.append)
    readiness.on_assigned()
    start = time.monotonic()
    tp = next(iter(app.tables.recovery.active_offsets))
    for step in range(1, 6):  # progress every 4 s: still waiting after 20 s
        app.tables.recovery.active_offsets[tp] += 5
        readiness.check(start + 4 * step)
    assert reasons == []
    readiness.check(start + 4 * 5 + 6)  # no progress for 6 s
    assert len(reasons) == 1 and "table recovery not complete" in reasons[0]
    assert reasons[0].endswith("; assigned partitions of p.plans, p.worker-owners-changelog")


def test_the_reason_names_the_topics_from_the_real_consumer() -> None:
    """The reason asks faust's own consumer (a fake that answered what faust's does not hid a
    crash: the watchdog died when it gave up on an assigned worker, which then never exited)."""
    from streams.app import GuardianApp
    from streams.seam.reads import assigned_topics

    app = GuardianApp("ready-topics", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    try:
        assert assigned_topics(app.consumer) == []  # not started: no assignment yet
    finally:
        app.consumer._thread.thread_loop.close()  # type: ignore[attr-defined]


def test_ready_again_after_a_rebalance() -> None:
    reasons: list[str] = []
    app = fake_app(completed=True)
    readiness = readiness_over(app, 5.0, reasons.append)
    readiness.on_assigned()
    assert readiness.check(time.monotonic()) == []
    readiness.on_revoked()
    assert readiness.check(time.monotonic()) != []
    readiness.on_assigned()
    assert readiness.check(time.monotonic()) == []
    assert reasons == []


class Inputs:
    """An input partition as the watch sees it: the broker's end, the committed offset, the fetch."""

    def __init__(self) -> None:
        self.high, self.committed, self.position = 2500, None, 2500
        self.idle = True
        self.answered_ms: int | None = 0

    def lag(self) -> dict[tuple[str, int], tuple[int, int | None]]:
        return {("p.observations", 2): (self.high, self.committed), ("p.plans", 2): (10, 10)}

    def fetch(self) -> dict[tuple[str, int], FetchState]:
        return {
            ("p.observations", 2): FetchState(self.position, False, True, self.answered_ms),
            ("p.plans", 2): FetchState(10, False, True, self.answered_ms),
        }

    def watch(self) -> InputWatch:
        return InputWatch(self.lag, self.fetch, lambda: self.idle, after_s=30.0)


def test_a_partition_that_moves_or_waits_on_a_busy_pipeline_or_a_silent_broker_is_not_starved() -> None:
    inputs = Inputs()
    watch = inputs.watch()
    wall = 1_000_000
    inputs.answered_ms = wall
    assert watch.starved(0.0, wall) == []
    inputs.committed = 100  # committed meanwhile: it moves
    assert watch.starved(25.0, wall) == []
    assert watch.starved(50.0, wall) == []
    assert watch.starved(56.0, wall) != []  # 31 s without a commit
    inputs.idle = False  # the pipeline works (a backlog elsewhere): it gets there
    assert watch.starved(57.0, wall) == []
    inputs.idle = True
    assert watch.starved(58.0, wall + 31_000) == []  # no answer from the broker for 31 s
    assert watch.starved(58.0, wall + 29_000) != []
    inputs.committed = inputs.high  # read to its end: nothing to wait for
    assert watch.starved(90.0, wall) == []
    assert watch.starved(200.0, wall) == []
    inputs.committed = 100
    watch.starved(200.0, wall)
    watch.reset()  # partitions moved: the clock starts again
    assert watch.starved(220.0, wall) == []


def test_the_fetch_state_of_a_partition_reads_faust_and_aiokafka() -> None:
    """The seam reads where aiokafka's fetch stands and whether faust asks for the partition."""
    tp, other = TP("p.observations", 2), TP("p.plans", 2)
    state = SimpleNamespace(has_valid_position=True, position=2500, timestamp=123)
    fresh = SimpleNamespace(has_valid_position=False, position=None, timestamp=None)
    assignment = SimpleNamespace(tps={tp, other}, state_value={tp: state, other: fresh}.get)
    aio = SimpleNamespace(
        _subscription=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment)),
        _fetcher=SimpleNamespace(_records={other: object()}),
    )
    consumer = SimpleNamespace(_thread=SimpleNamespace(_consumer=aio), _active_partitions={other})
    assert fetch_states(consumer) == {
        ("p.observations", 2): FetchState(2500, False, False, 123),
        ("p.plans", 2): FetchState(None, True, True, None),
    }
    consumer._thread._consumer = None  # not running
    assert fetch_states(consumer) == {}

"""A worker's stop ends in bounded time: the deadline armed by its stop, the line and the exit code."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from streams.seam.stop_deadline import STOP_DEADLINE_S, StopDeadline, with_stop_deadline


class FakeTimer:
    """``threading.Timer`` that starts nothing: the test expires it."""

    def __init__(self, seconds: float, then: Callable[[], None]) -> None:
        self.seconds, self.then = seconds, then
        self.daemon = False
        self.started = False

    def start(self) -> None:
        self.started = True


class FakeWorker:
    """A ``faust.Worker`` as far as its stop goes."""

    def __init__(self) -> None:
        self.stops = 0

    async def stop(self) -> None:
        self.stops += 1


class Armed:
    """A :class:`StopDeadline` on fakes, and what it did."""

    def __init__(self, crashed: bool = False) -> None:
        self.timers: list[FakeTimer] = []
        self.said: list[str] = []
        self.ended: list[int] = []
        self.deadline = StopDeadline(
            crashed=lambda: crashed, say=self.said.append, end=self.ended.append, timer=self.timer
        )

    def timer(self, seconds: float, then: Callable[[], None]) -> FakeTimer:
        self.timers.append(FakeTimer(seconds, then))
        return self.timers[-1]


def test_the_worker_s_stop_arms_the_deadline_once_and_still_stops() -> None:
    armed = Armed()
    worker = FakeWorker()
    with_stop_deadline(worker, armed.deadline)
    assert armed.timers == []  # nothing runs while the worker works
    asyncio.run(worker.stop())
    asyncio.run(worker.stop())  # SIGTERM, then the shutdown's own stop: one deadline
    assert worker.stops == 2
    [timer] = armed.timers
    assert timer.started and timer.seconds == STOP_DEADLINE_S < 30  # inside a 30 s grace period
    assert timer.daemon  # a stop that finishes in time is not held up by the deadline's thread
    assert armed.said == [] and armed.ended == []


def test_an_expired_stop_says_why_and_exits_0() -> None:
    armed = Armed()
    armed.deadline.arm()
    armed.timers[0].then()
    assert armed.ended == [0]
    [line] = armed.said
    assert "stopping took over 20 s" in line and "did not answer" in line
    assert "read again by the partitions' next owner" in line


def test_an_expired_stop_after_a_crash_exits_1() -> None:
    armed = Armed(crashed=True)
    armed.deadline.arm()
    armed.timers[0].then()
    assert armed.ended == [1]

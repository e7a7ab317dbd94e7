"""A worker stays alive and heals itself: time spent stopped is not waiting, a stalled input
partition is found, healed in steps (seek, then rejoin), counted and named on ``/ready``; the
LeaveGroup v3 of a static member is encoded as Kafka defines it. Injected clocks, no sleeping."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from config.settings import Settings, SettingsError
from streams import health
from streams.health import Readiness
from streams.metrics import GuardianMetrics
from streams.seam import membership
from streams.seam.reads import FetchState
from streams.seam.recovery import RecoveryWatch
from streams.stalls import Heal, InputWatch, WaitClock
from tests.unit.readiness_fakes import fake_app

# -- time spent stopped ---------------------------------------------------------------------------


class Clock:
    """A monotonic clock the test moves."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def ticking(clock: Clock, wait: WaitClock, until: float, every: float = 0.5) -> float:
    """Tick ``wait`` every ``every`` s of ``clock`` up to ``until``; the last tick's time."""
    now = wait.tick()
    while clock.t + every <= until:
        clock.t += every
        now = wait.tick()
    return now


def test_a_jump_between_ticks_is_time_stopped_and_a_late_tick_is_not() -> None:
    raw = Clock()
    wait = WaitClock(0.5, raw)
    start = wait.tick()
    ticking(raw, wait, raw.t + 10)
    assert wait.now() - start == 10.0
    raw.t += 3.0  # a tick 3 s late (a busy event loop): still running time
    wait.tick()
    assert wait.now() - start == 13.0
    raw.t += 20.0  # SIGSTOP for 20 s: the next tick finds a jump
    wait.tick()
    assert wait.now() - start == 13.5  # one interval counted, the 19.5 s stopped are not
    assert wait.stopped_s == 19.5


def test_a_stopped_worker_does_not_count_the_time_stopped_as_waiting() -> None:
    """A worker without its assignment, stopped 20 s by SIGSTOP meanwhile: before, its 60 s timeout
    came 20 s early (and it exited 5); the wait told counts only the time it ran."""
    raw = Clock()
    reasons: list[str] = []
    watch = RecoveryWatch(fake_app(completed=True))
    watch.on_rebalance_complete()
    readiness = Readiness(fake_app(completed=True), 60.0, reasons.append, watch, WaitClock(0.5, raw))
    start = raw.t
    for until in (start + 30, start + 50 + 29):
        readiness.check(ticking(raw, readiness.clock, until))
        if until == start + 30:
            raw.t += 20.0  # stopped (SIGSTOP) from 30 s to 50 s of the raw clock
    assert reasons == []  # 79 s on the raw clock, 59.5 s of it running
    readiness.check(ticking(raw, readiness.clock, start + 79.5))  # 60 s running
    assert len(reasons) == 1 and "not ready after 60 s" in reasons[0]


# -- stalled input partitions ---------------------------------------------------------------------

WALL_MS = 1_000_000


class Partition:
    """An input partition as the watch sees it: the broker's end, the committed offset, the fetch."""

    def __init__(self) -> None:
        self.high, self.committed, self.position = 2500, 100, 100
        self.assigned = True

    def lag(self) -> dict[tuple[str, int], tuple[int, int | None]]:
        return {("p.observations", 2): (self.high, self.committed)} if self.assigned else {}

    def fetch(self) -> dict[tuple[str, int], FetchState]:
        state = FetchState(self.position, False, False, WALL_MS)
        return {("p.observations", 2): state} if self.assigned else {}


def stalled_worker(after_s: float = 15.0) -> tuple[Readiness, Partition, list[str]]:
    reasons: list[str] = []
    part = Partition()
    app = fake_app(completed=True)
    watch = RecoveryWatch(app)
    watch.on_rebalance_complete()
    readiness = Readiness(app, 60.0, reasons.append, watch, WaitClock(0.5, lambda: 0.0))
    readiness.inputs = InputWatch(part.lag, part.fetch, lambda: True, after_s=after_s)
    readiness.on_assigned()
    return readiness, part, reasons


def check_at(readiness: Readiness, now: float) -> list[str]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(health.time, "time", lambda: WALL_MS / 1000)
        return readiness.check(now)


def test_a_stalled_partition_is_healed_in_steps_counted_and_named_on_ready() -> None:
    readiness, part, reasons = stalled_worker()
    inputs = readiness.inputs
    assert inputs is not None
    assert check_at(readiness, 0.0) == []
    assert check_at(readiness, 14.0) == [] and readiness.heals == []  # not 15 s yet
    (why,) = check_at(readiness, 15.0)
    assert why == (
        "input partition p.observations[2] has 2400 record(s) past its committed offset (100, end "
        "2500), none committed for 15 s while the pipeline waits for input (fetch position 100, not "
        "among the partitions the consumer asks for); healing: seek"
    )
    assert readiness.heals == [Heal("seek", "p.observations", 2, 100)]
    assert inputs.detected == 1 and readiness.missing() == [why]
    readiness.heals.clear()
    part.position = 100  # the seek brought nothing: 15 s later the next step
    assert check_at(readiness, 29.0) != [] and readiness.heals == []
    check_at(readiness, 30.0)
    assert readiness.heals == [Heal("rejoin", "p.observations", 2, 100)]
    assert readiness.missing()[0].endswith("; healing: seek, then rejoin")
    readiness.heals.clear()
    readiness.on_revoked()  # the rejoin: the partition comes back, still stalled for a while
    readiness.on_assigned()
    check_at(readiness, 31.0)
    assert readiness.heals == [] and inputs.detected == 1
    part.committed = 180  # read again and committed: healed
    assert check_at(readiness, 32.0) == [] and readiness.missing() == []
    assert (inputs.detected, inputs.healed, inputs.steps_taken) == (1, 1, {"seek": 1, "rejoin": 1})
    assert reasons == []  # never 60 s not ready: nothing told
    found = scrape(readiness)
    assert found["guardian_stall_detected_total"] == {(): 1.0}
    assert found["guardian_stall_healed_total"] == {(): 1.0}
    assert found["guardian_stall_heal_actions_total"] == {("seek",): 1.0, ("rejoin",): 1.0}
    assert found["guardian_not_ready_timeouts_total"] == {(): 0.0}


def test_a_seek_that_fails_is_followed_by_a_rejoin_at_once() -> None:
    readiness, _part, _ = stalled_worker()
    inputs = readiness.inputs
    assert inputs is not None
    check_at(readiness, 0.0)
    check_at(readiness, 15.0)
    (seek,) = readiness.heals
    assert inputs.failed(seek, 15.0) == Heal("rejoin", "p.observations", 2, 100)
    assert inputs.failed(Heal("rejoin", "p.observations", 2, 100), 15.0) is None  # tried later again


def test_a_stall_ends_without_healing_when_the_partition_moves_to_another_worker() -> None:
    readiness, part, _ = stalled_worker()
    inputs = readiness.inputs
    assert inputs is not None
    check_at(readiness, 0.0)
    check_at(readiness, 15.0)
    part.assigned = False
    assert check_at(readiness, 16.0) == []
    assert inputs.episodes == {} and inputs.healed == 0


def test_the_watchdog_carries_out_heal_steps_and_never_stops_the_worker() -> None:
    """The watchdog runs on whatever the worker lacks (it used to end once it gave up)."""
    readiness, _part, reasons = stalled_worker(after_s=0.0)
    readiness.timeout_s = 0.0
    done: list[Heal] = []
    four = asyncio.Event()

    async def heal_step(step: Heal) -> bool:
        done.append(step)
        if len(done) == 4:
            four.set()
        return step.step == "rejoin"  # the seek fails: the rejoin follows at once

    async def main() -> None:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(health.time, "time", lambda: WALL_MS / 1000)
            watching = health.watchdog(readiness, GuardianMetrics(), heal_step, every_s=0.0)
            task = asyncio.ensure_future(watching)
            waiting = asyncio.ensure_future(four.wait())
            await asyncio.wait([task, waiting], timeout=10, return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()
            assert four.is_set() and not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task

    asyncio.run(main())
    assert [h.step for h in done[:4]] == ["seek", "rejoin", "seek", "rejoin"]
    assert len(reasons) == 1 and "still trying" in reasons[0]


def test_the_heal_seeks_the_consumer_and_resumes_the_partition() -> None:
    calls: list[Any] = []

    async def seek_wait(offsets: dict[TP, int]) -> None:
        calls.append(("seek", offsets))

    def resume_partitions(tps: list[TP]) -> None:
        calls.append(("resume", tps))

    consumer = SimpleNamespace(seek_wait=seek_wait, resume_partitions=resume_partitions)
    ok = asyncio.run(health.heal(SimpleNamespace(consumer=consumer), Heal("seek", "p.observations", 2, 100)))
    tp = TP("p.observations", 2)
    assert ok and calls == [("seek", {tp: 100}), ("resume", [tp])]


def scrape(readiness: Readiness) -> dict[str, dict[tuple[str, ...], float]]:
    from prometheus_client import generate_latest

    metrics = GuardianMetrics()
    metrics.registry.register(health.LivenessCollector(readiness))
    found: dict[str, dict[tuple[str, ...], float]] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sample.labels.values())] = sample.value
    return found


# -- static membership ----------------------------------------------------------------------------


def test_leave_group_v3_names_the_member_by_its_instance_id() -> None:
    request = membership.RemoveMembers("g.worker", [("m-1", "w1")]).prepare({13: (0, 5)})
    assert request.API_VERSION == 3
    assert request.encode() == (
        b"\x00\x08g.worker"  # group_id
        b"\x00\x00\x00\x01"  # one member
        b"\x00\x03m-1\x00\x02w1"  # member_id, group_instance_id
    )
    answer = membership.LeaveGroupResponse_v3.decode(
        b"\x00\x00\x00\x00\x00\x00" + b"\x00\x00\x00\x01" + b"\x00\x03m-1\x00\x02w1\x00\x52"
    )
    assert membership.removal_errors(answer) == ["w1: UnknownError"]  # 82, FENCED_INSTANCE_ID
    ok = membership.LeaveGroupResponse_v3.decode(
        b"\x00" * 6 + b"\x00\x00\x00\x01" + b"\x00\x03m-1\x00\x02w1\x00\x00"
    )
    assert membership.removal_errors(ok) == []


def test_a_static_member_leaves_for_good_only_when_its_consumer_closes() -> None:
    sent: list[Any] = []

    class Coordinator:
        group_id, member_id, _group_instance_id, generation = "g.worker", "m-1", "w1", 4

        def __init__(self) -> None:
            self._closing = asyncio.get_running_loop().create_future()
            self.dynamic_leaves = 0

        async def _maybe_leave_group(self) -> None:
            self.dynamic_leaves += 1

        async def _send_req(self, request: Any) -> Any:
            sent.append(request)
            return membership.LeaveGroupResponse_v3(0, 0, [("m-1", "w1", 0)])

        def reset_generation(self) -> None:
            self.generation = -1

    async def main() -> Coordinator:
        coordinator = Coordinator()
        membership.leave_for_good(coordinator)
        await coordinator._maybe_leave_group()  # e.g. a poll timeout: aiokafka's own (nothing sent)
        assert sent == [] and coordinator.dynamic_leaves == 1
        coordinator._closing.set_result(None)
        await coordinator._maybe_leave_group()
        return coordinator

    coordinator = asyncio.run(main())
    (request,) = sent
    assert (request.group_id, request.members) == ("g.worker", [("m-1", "w1")])
    assert coordinator.generation == -1


def test_a_worker_given_its_id_is_a_static_member_and_aiokafka_gets_the_id(tmp_path: Any) -> None:
    from streams.worker import build_worker_app

    settings = Settings.from_env({"GUARDIAN_DATA_DIR": str(tmp_path), "GUARDIAN_TOPIC_PREFIX": "s."})
    assert membership.instance_id("w1") == "w1" and membership.instance_id(None) is None

    async def main() -> Any:
        app, _ = build_worker_app(settings, bootstrap="127.0.0.1:9", worker_id="w1", instance_id="w1")
        try:
            aio = app.consumer._thread._create_worker_consumer(app.transport)
            found = aio._group_instance_id
            await aio.stop()
            return found
        finally:
            app.consumer._thread.thread_loop.close()

    assert asyncio.run(main()) == "w1"


def test_stall_and_leave_settings() -> None:
    s = Settings.from_env({})
    assert (s.stall_after_s, s.leave_on_stop) == (15.0, False)
    s = Settings.from_env({"GUARDIAN_STALL_AFTER_S": "5", "GUARDIAN_LEAVE_ON_STOP": "true"})
    assert (s.stall_after_s, s.leave_on_stop) == (5.0, True)
    for env, says in (
        ({"GUARDIAN_STALL_AFTER_S": "0"}, "GUARDIAN_STALL_AFTER_S must be more than 0"),
        ({"GUARDIAN_STALL_AFTER_S": "nan"}, "GUARDIAN_STALL_AFTER_S must be more than 0"),
        ({"GUARDIAN_LEAVE_ON_STOP": "maybe"}, "GUARDIAN_LEAVE_ON_STOP must be 1 or 0"),
    ):
        with pytest.raises(SettingsError, match=f"^{says}"):
            Settings.from_env(env)


def test_a_worker_without_an_assignment_asks_again_every_timeout() -> None:
    reasons: list[str] = []
    app = fake_app(completed=True)
    readiness = Readiness(app, 5.0, reasons.append, RecoveryWatch(app), WaitClock(0.5, lambda: 0.0))
    readiness.check(4.0)
    assert readiness.heals == []
    readiness.check(5.0)
    readiness.check(9.0)
    assert readiness.heals == [Heal("rejoin")] and len(reasons) == 1
    readiness.check(10.0)
    assert readiness.heals == [Heal("rejoin"), Heal("rejoin")]


def test_a_join_error_aiokafka_holds_back_is_taken_so_it_tries_again() -> None:
    """aiokafka waits for someone to take an error it had joining (faust, unassigned, never does)."""

    class Coordinator:
        def __init__(self, held: Exception | None) -> None:
            self.held, self.rejoins = held, 0

        def check_errors(self) -> None:
            held, self.held = self.held, None
            if held is not None:
                raise held

        def request_rejoin(self) -> None:
            self.rejoins += 1

    class Thread:
        def __init__(self, coordinator: Coordinator) -> None:
            self._consumer = SimpleNamespace(_coordinator=coordinator)

        async def call_thread(self, fun: Any) -> Any:
            return fun()

    from aiokafka.errors import InconsistentGroupProtocolError

    held = Coordinator(InconsistentGroupProtocolError())
    said = asyncio.run(membership.request_rejoin(SimpleNamespace(_thread=Thread(held)), only_if_held=True))
    assert said is not None and "InconsistentGroupProtocolError" in said and held.rejoins == 1
    joining = Coordinator(None)  # still joining on its own: left alone
    assert (
        asyncio.run(membership.request_rejoin(SimpleNamespace(_thread=Thread(joining)), only_if_held=True))
        is None
    )
    assert joining.rejoins == 0
    assert asyncio.run(membership.request_rejoin(SimpleNamespace(_thread=Thread(joining)))) is None
    assert joining.rejoins == 1  # a stalled partition's rejoin: always

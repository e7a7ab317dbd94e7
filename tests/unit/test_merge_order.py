"""The merge keeps a partition's order across its input topics and holds a plan until it is claimed.

The merge holds a record while another input topic of its partition may still hand over an earlier
one. Which topic-partitions are caught up is only known for records the merge has been given; a
topic-partition with none is judged from where faust's fetch restarts (the committed offset), never
from the consumer's fetch position, which counts records already fetched but not yet in the merge
(sitting in the inbox, or in the batch the pipeline is working through)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from faust.types import TP

from streams.memory_broker import MemoryConsumer, MemoryProducer
from tests.unit.shell_fakes import Message, shell_over
from topics.names import INPUT_SUFFIXES


def fetched_ahead(prefix: str, highwater: dict[str, int]) -> MemoryConsumer:
    """faust's consumer as the shell sees it: every input topic-partition of partition 0 fetched
    up to its high watermark (the fetch position), nothing committed yet."""
    return MemoryConsumer(high={TP(prefix + s, 0): highwater.get(s, 0) for s in INPUT_SUFFIXES})


def test_records_fetched_but_not_yet_merged_hold_back_later_records_of_other_topics(
    tmp_path: Path,
) -> None:
    """A plan's or an observation's turn comes after the task events fetched before it, even when
    the pipeline has not put those task events in the merge yet (HG-05's return dispatch stops
    security only if ``security.started`` came first)."""

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        names = shell.names
        shell.positions.consumer = fetched_ahead(names.prefix, {"task-events": 15, "observations": 1})
        shell.positions.tp_factory = TP
        now = time.monotonic()
        # the pipeline has put the observation (ts 2000) in the merge; task events 0..14 (ts from
        # 1000) are fetched and wait in the batch it is working through
        obs = Message(names.observations, 0, 0, 2_000)
        shell.positions.next_offset[("observations", 0)] = 1
        shell.held.merger.push("observations", 0, None, 2_000, 0, obs, now)
        await shell.positions.learn_positions()
        assert shell.held.merger.pop_ready(shell.positions.caught_up, now) == []
        events = [Message(names.task_events, 0, i, 1_000 + i) for i in range(15)]
        for event in events:
            shell.positions.next_offset[("task-events", 0)] = event.offset + 1
            shell.held.merger.push(
                "task-events", 0, None, round(event.timestamp * 1000), event.offset, event, now
            )
        assert shell.held.merger.pop_ready(shell.positions.caught_up, now) == [*events, obs]

    asyncio.run(main())


def test_a_topic_with_nothing_to_read_does_not_hold_the_others(tmp_path: Path) -> None:
    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        names = shell.names
        consumer = fetched_ahead(names.prefix, {"observations": 1, "task-events": 40})
        consumer._committed_offset[TP(names.task_events, 0)] = 40  # all of it processed before
        shell.positions.consumer, shell.positions.tp_factory = consumer, TP
        now = time.monotonic()
        obs = Message(names.observations, 0, 0, 2_000)
        shell.positions.next_offset[("observations", 0)] = 1
        shell.held.merger.push("observations", 0, None, 2_000, 0, obs, now)
        await shell.positions.learn_positions()
        assert shell.held.merger.pop_ready(shell.positions.caught_up, now) == [obs]

    asyncio.run(main())


def released_by(task: Any) -> list[Any]:
    """What the pipeline task's merge lets out, in order (instead of processing it)."""
    released: list[Any] = []
    task.run = released.append
    return released


def test_a_later_stamped_record_of_another_device_does_not_let_a_device_pass_its_own_next_record(
    tmp_path: Path,
) -> None:
    """Devices share a partition and their timestamps go backwards across devices (the chaos
    run's 67 of 3,549 records): dev-a's task event waits for dev-a's observation, although
    dev-b's observation, stamped later, is fetched already. dev-a's order is replay's."""
    from streams.pipeline_task import PipelineTask

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        names = shell.names
        shell.positions.consumer = fetched_ahead(names.prefix, {"observations": 2, "task-events": 1})
        shell.positions.tp_factory = TP
        await shell.positions.learn_positions()
        task = PipelineTask(None, shell)
        released = released_by(task)
        event_a = Message(names.task_events, 0, 0, 200, key=b"dev-a")
        obs_b = Message(names.observations, 0, 0, 300, key=b"dev-b")
        obs_a = Message(names.observations, 0, 1, 100, key=b"dev-a")
        for suffix, message in (("task-events", event_a), ("observations", obs_b)):
            task.merge(suffix, message)
            await task.run_ready()
        assert event_a not in released  # dev-a's observation at offset 1 is not fetched yet
        task.merge("observations", obs_a)
        await task.run_ready()
        assert [m for m in released if m.key == b"dev-a"] == [obs_a, event_a]
        assert obs_b in released

    asyncio.run(main())


def test_a_record_on_the_broker_not_yet_fetched_holds_back_its_devices_later_ones(tmp_path: Path) -> None:
    """task-events of partition 0 has one record fetched (dev-b's) and one more on the broker
    (its high watermark says 2): dev-a's observation waits for it, and it comes first."""
    from streams.pipeline_task import PipelineTask

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        names = shell.names
        shell.positions.consumer = fetched_ahead(names.prefix, {"observations": 1, "task-events": 2})
        shell.positions.tp_factory = TP
        await shell.positions.learn_positions()
        task = PipelineTask(None, shell)
        released = released_by(task)
        obs_a = Message(names.observations, 0, 0, 100, key=b"dev-a")
        event_b = Message(names.task_events, 0, 0, 500, key=b"dev-b")
        event_a = Message(names.task_events, 0, 1, 50, key=b"dev-a")
        task.merge("observations", obs_a)
        task.merge("task-events", event_b)
        await task.run_ready()
        assert obs_a not in released
        task.merge("task-events", event_a)
        await task.run_ready()
        assert [m for m in released if m.key == b"dev-a"] == [event_a, obs_a]

    asyncio.run(main())


def claiming_shell(tmp_path: Path, delay_s: float) -> tuple[Any, Any, Any]:
    """A shell whose plans are claimed on a claims log that reads a claim back ``delay_s`` after it
    is written: (the shell, its claims reader, the log)."""
    from streams.claims import ClaimsReader
    from tests.unit.claims_fakes import FakeLog

    shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
    reader = ClaimsReader("unused:9", shell.names.claims)
    reader.start_end = 0
    claims_log = FakeLog(reader, delay_s=delay_s)
    shell.held.claims, shell.batch.delivery.producer = reader, lambda: claims_log
    return shell, reader, claims_log


def test_a_plan_waits_in_the_merge_for_its_claim_and_nothing_after_it_passes_it(tmp_path: Path) -> None:
    """The claim goes out as the plan enters the merge; until a claim on its experience is read
    back, the plan and the later records of its device stay there, while another device's go on
    (no popped record waits for Kafka, so a rebalance meanwhile drops nothing the merge does not
    drop too)."""
    from tests.streams import Script

    async def main() -> None:
        shell, reader, claims_log = claiming_shell(tmp_path, delay_s=0.05)
        script = Script(device_id="dev-1", prefix=shell.names.prefix)
        script.start(experience_id="exp-1")
        plan = script.records[0]
        msg = Message(plan.topic, 0, 0, plan.ts)
        msg.key, msg.value = plan.key, plan.value  # type: ignore[attr-defined]
        later = Message(shell.names.observations, 0, 0, plan.ts + 10, key=plan.key)
        other = Message(shell.names.observations, 0, 1, plan.ts + 20, key=b"dev-2")
        shell.held.claim(msg)
        shell.held.merger.push("plans", 0, plan.key, plan.ts, 0, msg, 0.0)
        shell.held.merger.push("observations", 0, plan.key, plan.ts + 10, 0, later, 0.0)
        shell.held.merger.push("observations", 0, b"dev-2", plan.ts + 20, 1, other, 0.0)
        caught_up = lambda s, p: True  # noqa: E731 - every topic read to its end
        assert shell.held.merger.pop_ready(caught_up, 3600.0, blocked=shell.held.unsettled) == [other]
        await asyncio.sleep(0.01)
        assert claims_log.records == [(b"exp-1", b"dev-1")]  # written, not read back yet
        assert shell.held.merger.pop_ready(caught_up, 3600.0, blocked=shell.held.unsettled) == []
        await asyncio.wait_for(asyncio.gather(*reader.under_way.tasks), 1)
        assert shell.held.merger.pop_ready(caught_up, 3600.0, blocked=shell.held.unsettled) == [msg, later]
        assert shell.held.claimed == {}

    asyncio.run(main())


def test_a_plan_judged_on_its_way_into_the_merge_is_not_judged_again_when_processed(tmp_path: Path) -> None:
    """The gate's verdict on a plan entering the merge (its claim) is the one its processing uses:
    a plan is admitted once, not twice; after a rebalance the plan, read again, is judged again."""
    from tests.streams import Script

    async def main() -> None:
        shell, _, _ = claiming_shell(tmp_path, delay_s=0.0)
        gate = shell.processor.gate
        real_admit = gate.admit
        judged: list[tuple[str, int]] = []

        def admit(kind: Any, key: Any, value: Any, **kw: Any) -> Any:
            judged.append((kind, kw["offset"]))
            return real_admit(kind, key, value, **kw)

        gate.admit = admit  # type: ignore[method-assign]

        def plan_message(device_id: str, experience_id: str, offset: int) -> Message:
            plan = Script(device_id=device_id, prefix=shell.names.prefix).start(experience_id=experience_id)
            rec = plan.records[0]
            msg = Message(rec.topic, 0, offset, rec.ts)
            msg.key, msg.value = rec.key, rec.value  # type: ignore[attr-defined]
            return msg

        first = plan_message("dev-1", "exp-1", 0)
        shell.held.claim(first)
        shell.handle(first)
        assert judged == [("plans", 0)]
        experience = shell.store.at(0).get_experience("dev-1")
        assert experience is not None and experience.experience_id == "exp-1"

        refused = Message(shell.names.plans, 0, 1, first.timestamp * 1000 + 1)
        refused.key, refused.value = b"dev-2", b'{"device_id": "dev-2"}'  # type: ignore[attr-defined]
        shell.held.claim(refused)
        shell.handle(refused)
        assert judged[1:] == [("plans", 1)]
        assert shell.store.at(0).get_experience("dev-2") is None  # dead-lettered, as before

        again = plan_message("dev-3", "exp-3", 2)
        shell.held.claim(again)
        shell.rebalanced()
        shell.handle(again)
        assert judged[2:] == [("plans", 2), ("plans", 2)]
        assert shell.held.admitted_plans == {}

    asyncio.run(main())


def test_what_the_merge_knows_of_a_topic_moves_with_its_records_and_the_turns_of_the_loop(
    tmp_path: Path,
) -> None:
    """The merge's "caught up" answers are kept for the pipeline's turn, but a record of the
    topic-partition entering the merge, or the next turn, asks again."""
    from streams.pipeline_task import PipelineTask

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        names = shell.names
        consumer = fetched_ahead(names.prefix, {"task-events": 2, "observations": 1})
        shell.positions.consumer, shell.positions.tp_factory = consumer, TP
        task = PipelineTask(app=None, shell=shell)
        assert not shell.positions.caught_up_now("task-events", 0)
        for offset in range(2):
            task.merge("task-events", Message(names.task_events, 0, offset, 1_000 + offset))
        assert shell.positions.caught_up_now("task-events", 0)  # its records entered the merge: asked again
        consumer.high[TP(names.task_events, 0)] = 3  # fetched meanwhile, by faust's consumer thread
        assert shell.positions.caught_up_now("task-events", 0)  # as found in this turn
        shell.positions.new_turn()
        assert not shell.positions.caught_up_now("task-events", 0)

    asyncio.run(main())


def test_a_busy_pipeline_holds_a_record_for_an_earlier_one_however_long_it_takes(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A worker slowed down (a backlog, a busy machine) takes longer than the merge's hold to come
    to the rest of a partition's plans: the task event after them still waits for them (else the
    device's ``security.started`` evidence is lost, unlike in replay). Only a wait for input with
    nothing to do, as long as the hold, lets a record go first (a fetch that stalls)."""
    from streams import held as held_mod
    from streams.pipeline_task import PipelineTask

    real = time.monotonic
    shift = [0.0]
    monkeypatch.setattr(time, "monotonic", lambda: real() + shift[0])

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        names = shell.names
        shell.positions.consumer = fetched_ahead(names.prefix, {"plans": 2, "task-events": 1})
        shell.positions.tp_factory = TP
        await shell.positions.learn_positions()
        task = PipelineTask(None, shell)
        released: list[Any] = []
        task.run = released.append  # type: ignore[method-assign]
        plan0 = Message(names.plans, 0, 0, 1_000)
        event = Message(names.task_events, 0, 0, 2_000)
        plan1 = Message(names.plans, 0, 1, 1_500)
        task.merge("plans", plan0)
        task.merge("task-events", event)
        await task.run_ready()
        assert released == [plan0]  # the event waits: the plans topic has a record still to come
        shift[0] += held_mod.MERGE_MAX_HOLD_S + 1  # the pipeline busy with other work all that time
        await task.run_ready()
        assert released == [plan0]
        task.merge("plans", plan1)
        await task.run_ready()
        assert released == [plan0, plan1, event]

        # a fetch that stalls while the pipeline waits for input: after the hold, the record goes
        later = Message(names.task_events, 0, 1, 3_000)
        shell.positions.consumer.high[TP(names.plans, 0)] = 3
        shell.positions.new_turn()  # the fetch that saw plans@2 came in a turn of the event loop
        task.merge("task-events", later)
        await task.run_ready()
        assert released[-1] is event
        waiting = asyncio.ensure_future(shell.inbox.wait_for_input())
        await asyncio.sleep(0)
        shift[0] += held_mod.MERGE_MAX_HOLD_S + 1
        await task.run_ready()
        assert released[-1] is later
        waiting.cancel()

    asyncio.run(main())


def test_a_merge_releasing_a_long_held_backlog_lets_the_event_loop_run_between_slices(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Records held long (e.g. a partition's plans behind a slow topic) and released at once are
    processed in the merge's order, a slice at a time, with the event loop's other work (the
    fetcher, the producer, acks) between the slices, not after the whole backlog."""
    from streams import pipeline_task as pipeline_task_mod
    from streams import shell as shell_mod
    from streams.pipeline_task import PipelineTask

    monkeypatch.setattr(shell_mod, "YIELD_EVERY_S", 0.0)

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        names = shell.names
        task = PipelineTask(None, shell)
        released: list[Any] = []
        task.run = released.append  # type: ignore[method-assign]
        n = 2 * pipeline_task_mod.MERGE_SLICE + 50
        held = [Message(names.observations, i % 3, i // 3, 1_000 + i) for i in range(n)]
        for message in held:
            task.merge("observations", message)
        other_work: list[int] = []
        asyncio.get_running_loop().call_soon(lambda: other_work.append(len(released)))
        await task.run_ready()
        assert sorted(released, key=lambda m: (m.partition, m.offset)) == sorted(
            held, key=lambda m: (m.partition, m.offset)
        )
        for p in range(3):
            mine = [m.offset for m in released if m.partition == p]
            assert mine == sorted(mine)  # each partition in order
        assert other_work == [
            pipeline_task_mod.MERGE_SLICE
        ]  # ran after the first slice, not the whole backlog

    asyncio.run(main())

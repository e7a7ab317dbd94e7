"""One order for a device's records (docs/CONTRACTS.md §2 rule 11), kept by the live merge and
computed by replay from the records alone: the same order, whatever the consumer fetched when.

The consumer is faked by what the merge is told of it: the records fetched so far and, per
topic-partition, the broker's end offset (no broker, no sleeping)."""

from __future__ import annotations

import random
from dataclasses import dataclass

from pipeline.order import DeviceMerge, in_order

SUFFIXES = ("plans", "device-context", "task-events", "observations")


@dataclass(frozen=True)
class Rec:
    suffix: str
    partition: int
    offset: int
    ts: int
    key: bytes | None

    def __repr__(self) -> str:
        return f"{self.suffix}:{self.partition}@{self.offset}({self.key!r},{self.ts})"


class ConsumerView:
    """The logs of the input topic-partitions on the broker, and how far the worker has fetched
    each (in offset order, as Kafka hands them over); caught up = fetched to the end offset."""

    def __init__(self, logs: dict[tuple[str, int], list[tuple[bytes | None, int]]]) -> None:
        self.logs = {
            tp: [Rec(tp[0], tp[1], offset, ts, key) for offset, (key, ts) in enumerate(records)]
            for tp, records in logs.items()
        }
        self.fetched = dict.fromkeys(self.logs, 0)

    def end_offset(self, suffix: str, partition: int) -> int:
        return len(self.logs.get((suffix, partition), []))

    def caught_up(self, suffix: str, partition: int) -> bool:
        return self.fetched.get((suffix, partition), 0) >= self.end_offset(suffix, partition)

    def append(self, suffix: str, partition: int, key: bytes | None, ts: int) -> None:
        """A record reaches the broker."""
        log = self.logs.setdefault((suffix, partition), [])
        self.fetched.setdefault((suffix, partition), 0)
        log.append(Rec(suffix, partition, len(log), ts, key))

    def fetch(self, merge: DeviceMerge[Rec], suffix: str, partition: int, now: float = 0.0) -> bool:
        """The next record of the topic-partition into the merge; True: a late arrival."""
        rec = self.logs[(suffix, partition)][self.fetched[(suffix, partition)]]
        self.fetched[(suffix, partition)] += 1
        return merge.push(rec.suffix, rec.partition, rec.key, rec.ts, rec.offset, rec, now)

    def everything(self) -> list[Rec]:
        return [r for log in self.logs.values() for r in log]


def per_device(records: list[Rec]) -> dict[tuple[int, bytes | None], list[Rec]]:
    out: dict[tuple[int, bytes | None], list[Rec]] = {}
    for r in records:
        out.setdefault((r.partition, r.key), []).append(r)
    return out


def replay_order(records: list[Rec]) -> dict[tuple[int, bytes | None], list[Rec]]:
    return per_device([r for _, r in in_order(records)])


def test_a_device_waits_for_its_own_next_record_not_for_a_later_one_of_another_device() -> None:
    """The chaos run's case: devices share a partition and their timestamps go backwards across
    devices. A fetched record of another device stamped later says nothing of this device's next
    record: it is waited for."""
    view = ConsumerView(
        {
            ("observations", 0): [(b"dev-b", 300), (b"dev-a", 100)],
            ("task-events", 0): [(b"dev-a", 200)],
        }
    )
    merge: DeviceMerge[Rec] = DeviceMerge(SUFFIXES)
    released: list[Rec] = []
    view.fetch(merge, "task-events", 0)  # dev-a's task event, stamped 200
    view.fetch(merge, "observations", 0)  # dev-b's observation, stamped 300
    released += merge.pop_ready(view.caught_up, 0.0)
    # dev-b's observation may go (task-events is caught up); dev-a's task event waits for its
    # observation at offset 1, still on the broker
    assert [r.key for r in released] == [b"dev-b"]
    view.fetch(merge, "observations", 0)
    released += merge.pop_ready(view.caught_up, 0.0)
    assert per_device(released) == replay_order(view.everything())
    assert [(r.key, r.ts) for r in released if r.key == b"dev-a"] == [(b"dev-a", 100), (b"dev-a", 200)]


def test_a_record_on_the_broker_not_yet_fetched_is_waited_for() -> None:
    """The task-events partition has a record fetched (another device's) and one more on the
    broker: the end offset says so, and the observation waits for it."""
    view = ConsumerView(
        {
            ("task-events", 0): [(b"dev-b", 500), (b"dev-a", 50)],
            ("observations", 0): [(b"dev-a", 100)],
        }
    )
    merge: DeviceMerge[Rec] = DeviceMerge(SUFFIXES)
    view.fetch(merge, "observations", 0)
    view.fetch(merge, "task-events", 0)
    first = merge.pop_ready(view.caught_up, 0.0)
    assert [(r.suffix, r.key) for r in first] == [("task-events", b"dev-b")]  # dev-b waits for nothing
    assert merge.holds_device(0, b"dev-a") and not merge.holds_device(0, b"dev-b")
    view.fetch(merge, "task-events", 0)
    rest = merge.pop_ready(view.caught_up, 0.0)
    assert [(r.suffix, r.ts) for r in rest] == [("task-events", 50), ("observations", 100)]
    assert len(merge) == 0


def test_within_a_topic_a_device_keeps_offset_order_when_its_timestamps_go_backwards() -> None:
    logs: dict[tuple[str, int], list[tuple[bytes | None, int]]] = {
        ("observations", 0): [(b"d", 100), (b"d", 40), (b"d", 300)],
        ("task-events", 0): [(b"d", 50), (b"d", 200)],
    }
    expected = [("task-events", 50), ("observations", 100), ("observations", 40), ("task-events", 200)]
    expected.append(("observations", 300))
    assert [(r.suffix, r.ts) for _, r in in_order(ConsumerView(logs).everything())] == expected
    # order times: an observation stamped 40 after one stamped 100 goes at 100
    assert [t for t, _ in in_order(ConsumerView(logs).everything())] == [50, 100, 100, 200, 300]
    view = ConsumerView(logs)
    merge: DeviceMerge[Rec] = DeviceMerge(SUFFIXES)
    released: list[Rec] = []
    for suffix in ("observations", "observations", "task-events", "observations", "task-events"):
        view.fetch(merge, suffix, 0)
        released += merge.pop_ready(view.caught_up, 0.0)
    assert [(r.suffix, r.ts) for r in released] == expected


def test_whatever_the_consumer_fetches_when_the_live_order_is_replays() -> None:
    """Random partitions shared by devices, timestamps out of order within and across devices,
    fetched in random interleavings and slices: every device's records go once each, in the order
    replay computes from the records alone, and none is a late arrival."""
    rng = random.Random(5)
    for trial in range(300):
        devices = [f"dev-{i}".encode() for i in range(rng.randrange(1, 5))]
        logs: dict[tuple[str, int], list[tuple[bytes | None, int]]] = {}
        for suffix in SUFFIXES:
            for partition in range(2):
                logs[(suffix, partition)] = [
                    (rng.choice(devices), rng.randrange(0, 30)) for _ in range(rng.randrange(0, 6))
                ]
        view = ConsumerView(logs)
        merge: DeviceMerge[Rec] = DeviceMerge(SUFFIXES)
        released: list[Rec] = []
        pending = [tp for tp, log in view.logs.items() for _ in log]
        rng.shuffle(pending)  # the consumer's fetch order across topic-partitions
        for tp in pending:
            assert not view.fetch(merge, *tp), trial
            if rng.random() < 0.5:
                released += merge.pop_ready(view.caught_up, 0.0, limit=rng.randrange(1, 4))
        while len(merge):
            released += merge.pop_ready(view.caught_up, 0.0, limit=rng.randrange(1, 4))
        assert sorted(released, key=repr) == sorted(view.everything(), key=repr), trial
        assert per_device(released) == replay_order(view.everything()), trial


def test_a_record_reaching_the_broker_after_its_device_went_past_it_is_a_late_arrival() -> None:
    view = ConsumerView({("observations", 0): [(b"d", 100)], ("task-events", 0): []})
    merge: DeviceMerge[Rec] = DeviceMerge(SUFFIXES)
    assert not view.fetch(merge, "observations", 0)
    assert [r.ts for r in merge.pop_ready(view.caught_up, 0.0)] == [100]  # task-events caught up
    view.append("task-events", 0, b"d", 60)  # stamped before, reached the broker after
    view.append("task-events", 0, b"other", 60)
    assert view.fetch(merge, "task-events", 0)  # late: in arrival order, and said so
    assert not view.fetch(merge, "task-events", 0)  # another device's: not late
    assert [(r.key, r.ts) for r in merge.pop_ready(view.caught_up, 0.0)] == [(b"d", 60), (b"other", 60)]
    # replay cannot know when it reached the broker: it puts it first
    assert [r.ts for r in replay_order(view.everything())[(0, b"d")]] == [60, 100]


def test_ties_follow_the_replay_order_plans_first() -> None:
    merge: DeviceMerge[str] = DeviceMerge(SUFFIXES)
    merge.push("observations", 1, b"d", 7, 0, "obs", 0.0)
    merge.push("task-events", 1, b"d", 7, 0, "te", 0.0)
    merge.push("plans", 1, b"d", 7, 0, "plan", 0.0)
    assert merge.pop_ready(lambda s, p: True, 0.0) == ["plan", "te", "obs"]


def test_partitions_and_devices_do_not_wait_for_each_other() -> None:
    merge: DeviceMerge[str] = DeviceMerge(SUFFIXES)
    merge.push("observations", 0, b"a", 1, 0, "p0", 0.0)
    merge.push("observations", 1, b"b", 1, 0, "p1", 0.0)
    # partition 0's task events are behind; partition 1 goes on
    assert merge.pop_ready(lambda s, p: not (p == 0 and s == "task-events"), 0.0) == ["p1"]
    assert len(merge) == 1 and merge.holds(0) and not merge.holds(1)


def test_nothing_waits_longer_than_the_hold_limit() -> None:
    merge: DeviceMerge[str] = DeviceMerge(SUFFIXES, max_hold_s=1.0)
    merge.push("observations", 0, b"d", 1, 0, "obs", 0.0)
    assert merge.pop_ready(lambda s, p: False, 0.5) == []
    assert merge.pop_ready(lambda s, p: False, 1.5) == ["obs"]
    assert merge.drain() == []


def test_a_limit_releases_the_ready_items_in_slices_in_order() -> None:
    merge: DeviceMerge[str] = DeviceMerge(("a", "b"), max_hold_s=10.0)
    for i in range(5):
        merge.push("a", 0, b"d", 100 + i, i, f"a{i}", 0.0)
    first = merge.pop_ready(lambda s, p: True, 0.0, limit=2)
    second = merge.pop_ready(lambda s, p: True, 0.0, limit=2)
    rest = merge.pop_ready(lambda s, p: True, 0.0)
    assert (first, second, rest) == (["a0", "a1"], ["a2", "a3"], ["a4"])
    assert len(merge) == 0


def test_a_blocked_head_holds_its_device_past_the_hold_limit_and_only_its_device() -> None:
    merge: DeviceMerge[str] = DeviceMerge(SUFFIXES, max_hold_s=1.0)
    merge.push("plans", 0, b"d", 100, 0, "plan", 0.0)
    merge.push("observations", 0, b"d", 200, 0, "after-plan", 0.0)
    merge.push("observations", 0, b"e", 150, 1, "other-device", 0.0)
    merge.push("observations", 1, b"f", 300, 0, "other-partition", 0.0)
    waiting = {"plan"}
    released = merge.pop_ready(lambda s, p: True, 60.0, blocked=waiting.__contains__)
    assert sorted(released) == ["other-device", "other-partition"]
    waiting.clear()
    assert merge.pop_ready(lambda s, p: True, 60.0, blocked=waiting.__contains__) == ["plan", "after-plan"]

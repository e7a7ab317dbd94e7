"""The timestamp merge that lets a worker catching up on a backlog process records as replay does."""

from __future__ import annotations

from streams.merge import TimestampMerger

SUFFIXES = ("plans", "device-context", "task-events", "observations")


def test_a_backlog_is_released_in_timestamp_order_across_topics() -> None:
    m: TimestampMerger[str] = TimestampMerger(SUFFIXES, max_hold_s=10.0)
    # observations arrive first (a whole batch), task events later, as a consumer may fetch them
    for ts in (10, 20, 30):
        m.push("observations", 0, ts, ts, f"obs{ts}", now=0.0)
    behind = {"task-events"}
    assert m.pop_ready(lambda s, p: s not in behind, now=0.1) == []
    for ts in (5, 25):
        m.push("task-events", 0, ts, ts, f"te{ts}", now=0.2)
    behind.clear()
    assert m.pop_ready(lambda s, p: True, now=0.3) == ["te5", "obs10", "obs20", "te25", "obs30"]


def test_ties_follow_the_replay_order_plans_first() -> None:
    m: TimestampMerger[str] = TimestampMerger(SUFFIXES, max_hold_s=10.0)
    m.push("observations", 1, 7, 0, "obs", now=0.0)
    m.push("task-events", 1, 7, 0, "te", now=0.0)
    m.push("plans", 1, 7, 0, "plan", now=0.0)
    assert m.pop_ready(lambda s, p: True, now=0.0) == ["plan", "te", "obs"]


def test_partitions_do_not_wait_for_each_other() -> None:
    m: TimestampMerger[str] = TimestampMerger(SUFFIXES, max_hold_s=10.0)
    m.push("observations", 0, 1, 0, "p0", now=0.0)
    m.push("observations", 1, 1, 0, "p1", now=0.0)
    # partition 0's task events are behind; partition 1 goes on
    assert m.pop_ready(lambda s, p: not (p == 0 and s == "task-events"), now=0.0) == ["p1"]
    assert len(m) == 1


def test_nothing_waits_longer_than_the_hold_limit() -> None:
    m: TimestampMerger[str] = TimestampMerger(SUFFIXES, max_hold_s=1.0)
    m.push("observations", 0, 1, 0, "obs", now=0.0)
    assert m.pop_ready(lambda s, p: False, now=0.5) == []
    assert m.pop_ready(lambda s, p: False, now=1.5) == ["obs"]
    assert m.drain() == []


def test_a_limit_releases_the_ready_items_in_slices_in_order() -> None:
    merger: TimestampMerger[str] = TimestampMerger(("a", "b"), max_hold_s=10.0)
    for i in range(5):
        merger.push("a", 0, 100 + i, i, f"a{i}", 0.0)
    first = merger.pop_ready(lambda s, p: True, 0.0, limit=2)
    second = merger.pop_ready(lambda s, p: True, 0.0, limit=2)
    rest = merger.pop_ready(lambda s, p: True, 0.0)
    assert (first, second, rest) == (["a0", "a1"], ["a2", "a3"], ["a4"])
    assert len(merger) == 0


def test_a_blocked_head_holds_its_partition_past_the_hold_limit_and_only_its_partition() -> None:
    m: TimestampMerger[str] = TimestampMerger(SUFFIXES, max_hold_s=1.0)
    m.push("plans", 0, 100, 0, "plan", now=0.0)
    m.push("observations", 0, 200, 0, "after-plan", now=0.0)
    m.push("observations", 1, 300, 0, "other-partition", now=0.0)
    waiting = {"plan"}
    assert m.pop_ready(lambda s, p: True, now=60.0, blocked=waiting.__contains__) == ["other-partition"]
    waiting.clear()
    assert m.pop_ready(lambda s, p: True, now=60.0, blocked=waiting.__contains__) == ["plan", "after-plan"]

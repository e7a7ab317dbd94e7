"""The chaos run's pure parts: its seeded schedule, the pause it reads from the group's commits,
and the verdict comparing live outputs with replay's."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from chaos import schedule
from chaos.progress import Sample, pause_after, summarise
from chaos.verify import compare


def test_a_seed_gives_one_schedule_and_another_seed_another() -> None:
    assert schedule.plan(11, 240, 2) == schedule.plan(11, 240, 2)
    assert schedule.plan(11, 240, 2) != schedule.plan(12, 240, 2)


@pytest.mark.parametrize("seed", range(20))
def test_a_storm_holds_each_rare_fault_once_and_faults_15_to_40_s_apart(seed: int) -> None:
    faults = schedule.plan(seed, 240, 2)
    kinds = [f.kind for f in faults]
    for kind in schedule.ONCE:
        assert kinds.count(kind) == 1, kinds
    assert set(kinds) <= {"kill", *schedule.ONCE}
    gaps = [b.at_s - a.at_s for a, b in itertools.pairwise(faults)]
    assert all(15 <= g <= 40 for g in gaps), gaps
    assert faults[0].at_s == schedule.FIRST_AT_S
    assert all(0 <= f.slot < 2 for f in faults if f.kind != "broker")
    burst = next(f for f in faults if f.kind == "burst")
    assert len(burst.gaps_s) == 2 and all(0.1 <= g <= 1 for g in burst.gaps_s)
    assert next(f for f in faults if f.kind == "broker").hold_s == 70
    assert next(f for f in faults if f.kind == "stop").hold_s == 20


def test_a_short_storm_still_holds_every_rare_fault() -> None:
    kinds = [f.kind for f in schedule.plan(3, 20, 2)]
    assert sorted(kinds) == sorted(schedule.ONCE)


def test_the_scale_shape_only_kills() -> None:
    assert {f.kind for f in schedule.plan(5, 300, 4, "scale")} == {"kill"}


def _s(at: float, committed: dict[int, int], ends: dict[int, int]) -> Sample:
    return Sample(at, {("t", p): o for p, o in committed.items()}, {("t", p): o for p, o in ends.items()})


def test_the_pause_ends_when_every_partition_with_records_moved() -> None:
    samples = [
        _s(0.0, {0: 5, 1: 5}, {0: 10, 1: 10}),
        _s(1.0, {0: 6, 1: 5}, {0: 10, 1: 10}),  # partition 1 still waits
        _s(2.0, {0: 7, 1: 5}, {0: 12, 1: 10}),
        _s(3.5, {0: 8, 1: 6}, {0: 12, 1: 10}),
    ]
    assert pause_after(samples, 0.5) == 3.0


def test_a_partition_without_records_does_not_wait_and_a_stuck_one_never_ends() -> None:
    idle = [_s(0.0, {0: 5, 1: 10}, {0: 10, 1: 10}), _s(1.0, {0: 6, 1: 10}, {0: 10, 1: 10})]
    assert pause_after(idle, 0.2) == pytest.approx(0.8)
    stuck = [_s(0.0, {0: 5}, {0: 10}), _s(1.0, {0: 5}, {0: 11}), _s(2.0, {0: 5}, {0: 12})]
    assert pause_after(stuck, 0.2) is None
    assert summarise({"kill": [None, 2.0, 4.0]})["kill"] == {
        "faults": 3,
        "unended": 1,
        "median_s": 3.0,
        "worst_s": 4.0,
    }


def _timeline(device: str, seq: int, ref: str, **more: Any) -> dict[str, Any]:
    return {
        "device_id": device,
        "experience_id": f"exp-{device}",
        "seq": seq,
        "stage": "observe",
        "ref_id": ref,
        **more,
    }


def test_identical_copies_pass_and_are_counted() -> None:
    entry = _timeline("d1", 1, "e1")
    decision = {"decision_id": "dec_1", "decision": "continue"}
    verdict = compare(
        {"timeline": [entry, dict(entry)], "decisions": [decision, dict(decision)]},
        {"timeline": [entry], "decisions": [decision]},
        {"exp-d1": "active"},
    )
    assert verdict.ok, verdict.problems
    assert verdict.counts["timeline"]["identical_copies"] == 1


def test_one_id_with_two_contents_fails() -> None:
    a = {"decision_id": "dec_1", "decision": "continue"}
    b = {"decision_id": "dec_1", "decision": "abort"}
    verdict = compare({"decisions": [a, b]}, {"decisions": [a]}, {})
    assert not verdict.ok
    assert "two contents" in verdict.problems[0]


def test_another_processing_order_shows_as_other_seq_numbers() -> None:
    live = [_timeline("d1", 1, "e2"), _timeline("d1", 2, "e1")]
    replay = [_timeline("d1", 1, "e1"), _timeline("d1", 2, "e2")]
    verdict = compare({"timeline": live}, {"timeline": replay}, {"exp-d1": "active"})
    assert verdict.counts["timeline"]["different"] == 2
    assert any("d1#1 differs" in p for p in verdict.problems)


def test_missing_and_unexpected_outputs_and_other_statuses_fail() -> None:
    replay = {"dispatch": [{"dispatch_id": "dsp_1"}], "deadletter": []}
    live = {
        "dispatch": [],
        "deadletter": [
            {"source_topic": "p.observations", "partition": 0, "offset": 3, "reason_code": "not_json"}
        ],
        "timeline": [_timeline("d1", 1, "exp-d1", stage="end", status="failed")],
    }
    verdict = compare(live, replay, {"exp-d1": "completed"})
    text = "\n".join(verdict.problems)
    assert "1 dispatch missing live: dsp_1" in text
    assert "1 deadletter unexpected live: p.observations:0:3" in text
    assert "experience exp-d1: live failed, replay completed" in text


def test_a_worker_giving_up_on_a_stopped_broker_is_told_apart_from_one_exiting_by_itself() -> None:
    """Exit 3 while the run had the broker stopped during the worker's start-up wait is the
    outage's doing; exit 3 with the broker up all through the wait, or any other exit, is not."""
    from chaos.cluster import START_WAIT_S, gave_up_on_stopped_broker
    from streams.worker import BROKER_WAIT_S

    assert START_WAIT_S >= BROKER_WAIT_S
    outage = [(10.0, 80.0)]
    assert gave_up_on_stopped_broker(3, 41.4, 62.3, outage)  # started and gave up inside the outage
    assert gave_up_on_stopped_broker(3, 63.1, 84.0, outage)  # the broker came back near its wait's end
    assert gave_up_on_stopped_broker(3, 50.0, 70.0, [(10.0, None)])  # the broker still down
    assert not gave_up_on_stopped_broker(3, 85.0, 105.0, outage)  # the broker answered all along
    assert not gave_up_on_stopped_broker(3, 0.0, 200.0, [(100.0, 170.0)])  # outage after its wait
    assert not gave_up_on_stopped_broker(5, 41.4, 62.3, outage)  # another exit stays a failure
    assert not gave_up_on_stopped_broker(3, 41.4, 62.3, [])  # no outage at all


def test_a_worker_retries_a_batch_longer_than_the_chaos_runs_broker_outage(tmp_path: Path) -> None:
    """A worker with a batch in flight when the broker stops rides through the outage (it stops
    only when a batch is still undelivered after the producer's retries)."""
    from chaos.schedule import BROKER_HOLD_S
    from config.settings import Settings
    from streams.app import create_app

    settings = Settings.from_env({"GUARDIAN_DATA_DIR": str(tmp_path)})
    app = create_app(settings, bootstrap="127.0.0.1:1")
    assert app.conf.producer_request_timeout >= BROKER_HOLD_S + 30

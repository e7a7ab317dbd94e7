"""The stories the simulator gained (HG-04-B, HG-13..HG-16) through the pipeline's functional core,
and the rule that a simulated device plays only what the pipeline started or dispatched."""

from __future__ import annotations

import asyncio

import pytest

from simulator.clock import SimClock
from simulator.context_stories import AIR_CARE_OPS, CASES, RECHECK
from simulator.expect import Observed
from simulator.fleet import Fleet, FleetConfig, format_table
from simulator.scenarios import EXPECTED, MIX_POOL, SCENARIO_IDS, case_of, check, scenario_for
from tests.unit.simulator_transports import Loopback

NEW_CASES = ("HG-04-B", *(f"HG-13{c}" for c in "abcde"), *(f"HG-14{c}" for c in "fgh"), "HG-15", "HG-16")


class Watched(Loopback):
    """The core as the 'broker', keeping every record the devices sent."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str]] = []

    async def send(self, suffix: str, key: str, value: bytes, timestamp_ms: int) -> None:
        self.sent.append((suffix, key))
        await super().send(suffix, key, value, timestamp_ms)


def play(*cases: str) -> tuple[Fleet, Watched]:
    """A fleet of one device per case, through the core (with the worker's timer)."""

    async def run() -> Fleet:
        loop = Watched()
        config = FleetConfig(
            devices=len(cases), scenarios=cases, seed=5, speed=40.0, timeout_s=60.0, start_spread_s=0.2
        )
        fleet = Fleet(config, loop, clock=SimClock(40.0))
        loop.fleet = fleet
        report = await fleet.run(on_tick=loop.tick, tick_s=0.05)
        assert not report.timed_out, format_table(report.rows)
        return fleet

    fleet = asyncio.run(run())
    assert isinstance(fleet.transport, Watched)
    return fleet, fleet.transport


@pytest.mark.parametrize("case", NEW_CASES)
def test_each_new_story_ends_as_expected(case: str) -> None:
    fleet, _ = play(case)
    report = fleet.report(0.0, 0.0, False)
    assert report.ok, format_table(report.rows)
    (row,) = report.rows
    assert row.scenario == case and row.status == EXPECTED[case].status


def test_the_air_care_plan_runs_once_started_and_ends_docked() -> None:
    fleet, _ = play("HG-13a", "HG-14f")
    for member in fleet.members:
        assert member.seen.status == "completed"
        played = [entry.split(":")[0] for entry in member.device.log]
        assert [op for op in AIR_CARE_OPS if op in played] == list(AIR_CARE_OPS)
        assert member.device.log[-1] == "movement.return_to_station:completed:movement.station_charging"


@pytest.mark.parametrize("case", ["HG-13b", "HG-13c", "HG-13d", "HG-13e", "HG-14g", "HG-14h"])
def test_a_blocked_plan_is_never_played(case: str) -> None:
    fleet, loop = play(case)
    (member,) = fleet.members
    assert member.seen.status == "blocked"
    assert member.device.log == []  # not one step of the plan
    assert [s for s, key in loop.sent if key == member.device_id and s == "task-events"] == []
    assert member.device.phase == "stood down"


def test_what_was_dispatched_is_played_even_when_the_plan_is_blocked() -> None:
    fleet, _ = play("HG-16")
    (member,) = fleet.members
    assert member.seen.status == "blocked"
    (speak,) = member.seen.dispatches
    assert any(sentence in str(speak["tts"]) for sentence in RECHECK)
    assert member.device.log == [
        "voice_content.speak:accepted",
        "voice_content.speak:completed:tts.playback_completed",
    ]


def test_without_device_context_the_replan_moves_nowhere() -> None:
    fleet, loop = play("HG-04-B")
    (member,) = fleet.members
    assert [d["decision"] for d in member.seen.decisions] == ["replan"]
    assert member.seen.dispatches == []
    assert not any(entry.startswith("movement.move_to_room") for entry in member.device.log)
    assert [s for s, key in loop.sent if key == member.device_id and s == "device-context"] == []


def test_the_stale_context_answer_comes_from_the_story() -> None:
    fleet, loop = play("HG-14f", "HG-14g")
    answered, silent = fleet.members
    snapshots = {m.device_id: [s for s, key in loop.sent if key == m.device_id and s == "device-context"]
                 for m in fleet.members}  # fmt: skip
    # (f): the stale snapshot, the answer to the refresh, then its own once the plan runs
    assert len(snapshots[answered.device_id]) >= 2 and answered.seen.status == "completed"
    assert len(snapshots[silent.device_id]) == 1 and silent.seen.status == "blocked"


def test_check_flags_a_played_step_and_an_end_for_the_wrong_reason() -> None:
    end = {"seq": 1, "stage": "end", "status": "blocked", "summary": "preconditions: UNKNOWN: battery"}
    seen = Observed(status="blocked", timeline=[end], played=["movement.move_to_room"])
    problems = check(EXPECTED["HG-13b"], seen)
    assert any("the device played ['movement.move_to_room']" in p for p in problems)
    assert any("does not say 'KNOWN false'" in p for p in problems)
    fine = Observed(status="blocked", timeline=[{**end, "summary": "preconditions: KNOWN false"}])
    assert check(EXPECTED["HG-13b"], fine) == []
    said = Observed(status="blocked", timeline=[{**end, "stage": "act", "seq": 0}, end], dispatches=[])
    assert any("no spoken text" in p for p in check(EXPECTED["HG-16"], said))


def test_the_mix_plays_every_story_first_then_the_other_cases() -> None:
    first_lap = [case_of(scenario_for(i, (), mix=True))[0] for i in range(len(SCENARIO_IDS))]
    assert first_lap == list(SCENARIO_IDS) and len(SCENARIO_IDS) == 17
    assert sorted(MIX_POOL) == sorted(f"{s}{c}" for s in SCENARIO_IDS for c in CASES.get(s) or [""])
    assert [scenario_for(i, ("HG-13",), mix=False) for i in range(6)] == [
        "HG-13a", "HG-13b", "HG-13c", "HG-13d", "HG-13e", "HG-13a",
    ]  # fmt: skip
    assert [scenario_for(i, ("HG-05", "HG-14"), mix=False) for i in range(4)] == [
        "HG-05", "HG-14f", "HG-05", "HG-14g",
    ]  # fmt: skip

"""The simulated fleet without a broker: scripts, every scenario end to end through the pipeline's
functional core (a loopback transport), and at-least-once delivery of the core's outputs."""

from __future__ import annotations

import asyncio
import random

import pytest

from simulator.clock import SimClock
from simulator.fleet import Fleet, FleetConfig, format_progress, format_table
from simulator.scenarios import (
    CASE_IDS,
    EXPECTED,
    MIX_POOL,
    SCENARIO_IDS,
    Expect,
    Observed,
    Story,
    build_story,
    case_of,
    check,
    scenario_for,
)
from tests.unit.simulator_transports import Loopback, Recorder

# ------------------------------------------------------------------------------------------------
# scripts
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scenario", CASE_IDS)
def test_scenario_scripts_are_deterministic_for_a_seed(scenario: str) -> None:
    areas = ["2", "3", "6"]
    a = build_story(scenario, random.Random("7:dev"), areas)
    b = build_story(scenario, random.Random("7:dev"), areas)
    assert a == b
    assert scenario in EXPECTED


def test_seeds_change_the_script() -> None:
    stories = {repr(build_story("HG-02", random.Random(seed), ["2", "3", "6"])) for seed in range(20)}
    assert len(stories) > 1


def test_unknown_scenario_is_refused() -> None:
    with pytest.raises(ValueError, match="HG-99"):
        build_story("HG-99", random.Random(1), ["2"])


def test_fleet_is_reproducible_and_mixes_round_robin() -> None:
    async def build(seed: int) -> list[tuple[str, str, str, tuple[str, ...], Story]]:
        fleet = Fleet(FleetConfig(devices=14, mix=True, seed=seed), Recorder())
        return [
            (m.device_id, m.experience_id, m.scenario, tuple(m.areas), m.device.story) for m in fleet.members
        ]

    first, again, other = asyncio.run(build(3)), asyncio.run(build(3)), asyncio.run(build(4))
    assert first == again
    assert first != other
    assert [row[2] for row in first] == list(MIX_POOL[:14])
    assert scenario_for(5, ("HG-05", "HG-07"), mix=False) == "HG-07"


def test_a_lone_cross_device_scenario_gets_a_partner() -> None:
    async def build() -> Fleet:
        return Fleet(FleetConfig(devices=1, scenarios=("HG-12",)), Recorder())

    fleet = asyncio.run(build())
    assert [m.scenario for m in fleet.members] == ["HG-12", "HG-01"]
    lone, partner = fleet.members
    assert lone.device.player.partner == (partner.experience_id, partner.workflow_id)


# ------------------------------------------------------------------------------------------------
# expected outcomes and every scenario through the functional core
# ------------------------------------------------------------------------------------------------


def test_check_reports_what_is_missing() -> None:
    seen = Observed(status="returned", timeline=[{"seq": 1, "stage": "goal"}, {"seq": 2, "stage": "end"}])
    problems = check(Expect("completed", ("continue",)), seen)
    assert any("status returned != completed" in p for p in problems)
    assert any("decisions" in p for p in problems)
    assert any("physical evidence" in p for p in problems)


def test_every_scenario_meets_its_outcome_through_the_pipeline_core() -> None:
    async def run() -> Fleet:
        loop = Loopback()
        config = FleetConfig(
            devices=len(MIX_POOL), mix=True, seed=11, speed=40.0, timeout_s=60.0, start_spread_s=0.3
        )
        fleet = Fleet(config, loop, clock=SimClock(40.0))
        loop.fleet = fleet
        report = await fleet.run(on_tick=loop.tick, tick_s=0.05)
        assert not report.timed_out
        return fleet

    fleet = asyncio.run(run())
    report = fleet.report(0.0, 0.0, False)
    table = format_table(report.rows)
    assert report.ok, table
    assert sorted(r.scenario for r in report.rows) == sorted(CASE_IDS)
    assert {case_of(r.scenario)[0] for r in report.rows} == set(SCENARIO_IDS)
    assert len(SCENARIO_IDS) == 17
    assert "HG-04" in "\n".join(format_progress(fleet))


def test_without_device_context_hg04_moves_nowhere() -> None:
    async def run() -> Fleet:
        loop = Loopback()
        config = FleetConfig(
            devices=1, scenarios=("HG-04",), seed=3, speed=40.0, timeout_s=60.0, start_spread_s=0.0,
            device_context=False,
        )  # fmt: skip
        fleet = Fleet(config, loop, clock=SimClock(40.0))
        loop.fleet = fleet
        await fleet.run()
        return fleet

    fleet = asyncio.run(run())
    report = fleet.report(0.0, 0.0, False)
    assert report.ok, format_table(report.rows)
    (row,) = report.rows
    assert row.dispatches == 0 and row.decisions == 1


# ------------------------------------------------------------------------------------------------
# at-least-once delivery of the pipeline's outputs
# ------------------------------------------------------------------------------------------------


class Redelivering(Loopback):
    """The core as the 'broker', every output delivered twice (as after a worker crash: the records
    read again give their outputs again); ``tamper`` changes the copy of each dispatch."""

    def __init__(self, tamper: bool = False) -> None:
        super().__init__()
        self.tamper = tamper

    async def send(self, suffix: str, key: str, value: bytes, timestamp_ms: int) -> None:
        outs = self.process(suffix, key, value, timestamp_ms)
        for out in outs:
            self.deliver(out.kind, out.key, out.value)
        for out in outs:
            copy = dict(out.value)
            if self.tamper and out.kind == "dispatch":
                copy["created_at_ms"] = int(copy["created_at_ms"]) + 1
            self.deliver(out.kind, out.key, copy)


def run_fleet(transport: Redelivering) -> Fleet:
    async def run() -> Fleet:
        config = FleetConfig(devices=14, mix=True, seed=11, speed=40.0, timeout_s=60.0, start_spread_s=0.3)
        fleet = Fleet(config, transport, clock=SimClock(40.0))
        transport.fleet = fleet
        await fleet.run()
        return fleet

    return asyncio.run(run())


def test_an_identical_redelivery_is_counted_not_a_failure() -> None:
    fleet = run_fleet(Redelivering())
    report = fleet.report(0.0, 0.0, False)
    assert report.ok, format_table(report.rows)
    assert report.totals["redelivered"] == sum(
        report.totals[k] for k in ("decisions", "dispatch", "timeline", "deadletter")
    )
    assert report.totals.get("conflicting", 0) == 0
    assert sum(r.dispatches for r in report.rows) == report.totals["dispatch"] > 0


def test_a_redelivery_with_other_contents_is_a_failure() -> None:
    fleet = run_fleet(Redelivering(tamper=True))
    report = fleet.report(0.0, 0.0, False)
    assert not report.ok
    assert report.totals["conflicting"] == report.totals["dispatch"] > 0
    failed = [p for r in report.rows for p in r.problems if "delivered twice with different contents" in p]
    assert len(failed) == report.totals["dispatch"]
    assert failed[0].startswith("dispatch record (dispatch_id=dsp_")

"""The simulated device without a broker: its state machine, the order of its requests, its outbox,
and its context snapshots."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import orjson
import pytest

from simulator.device import Device, Timing, topo_order
from simulator.outbox import Outbox
from simulator.scenarios import Story, build_story
from tests.unit.simulator_transports import Recorder
from topics.gate import Admitted, Gate, Rejected
from topics.plans import guardian_plan
from topics.records import TaskEvent
from topics.registry import load_registry

T0 = 1_785_400_000_000


class StepClock:
    """A virtual clock: sleeping advances it at once (deterministic, no wall time)."""

    def __init__(self, start_ms: int = T0) -> None:
        self.t = start_ms

    def now_ms(self) -> int:
        return self.t

    async def sleep(self, sim_ms: float) -> None:
        self.t += int(sim_ms)
        await asyncio.sleep(0)


@pytest.fixture
def gate() -> Gate:
    return Gate(load_registry())


def make_device(gate: Gate, transport: Recorder, clock: StepClock, scenario: str = "HG-01") -> Device:
    areas = ["2", "3", "6"]
    story = build_story(scenario, random.Random(1), areas)
    device = Device(
        "dev-0001", seed=5, story=story, transport=transport, clock=clock, gate=gate, timing=Timing()
    )
    plan = guardian_plan("dev-0001", experience_id="exp-1", workflow_id="wf-1", areas=areas, created_at_ms=T0)
    assert device.accept_plan(orjson.dumps(plan))
    return device


def dispatch(
    *requests: dict[str, Any], experience_id: str = "exp-1", dispatch_id: str = "dsp_1"
) -> dict[str, Any]:
    kind = (
        "device_workflow_requests" if any(r.get("depends_on") for r in requests) else "device_task_requests"
    )
    return {
        "dispatch_id": dispatch_id,
        "decision_id": None,
        "trigger_event_id": "obs_x",
        "device_id": "dev-0001",
        "experience_id": experience_id,
        "workflow_id": "wf-1",
        "created_at_ms": T0,
        "kind": kind,
        "requests": list(requests),
        "tts": None,
    }


def req(step_id: str, capability: str, operation: str, **extra: Any) -> dict[str, Any]:
    return {"step_id": step_id, "capability": capability, "operation": operation, "args": {}, **extra}


def signals(transport: Recorder) -> list[tuple[str, str | None, str | None]]:
    out = []
    for te in transport.values("task-events"):
        ev = te.get("evidence") or {}
        out.append(
            (f"{te['capability']}.{te['operation']}", te["status"], ev.get("signal") or ev.get("kind"))
        )
    return out


def test_topo_order_honours_depends_on() -> None:
    items = [req("c", "x", "y", depends_on=["b"]), req("a", "x", "y"), req("b", "x", "y", depends_on=["a"])]
    assert [i["step_id"] for i in topo_order(items)] == ["a", "b", "c"]


# ------------------------------------------------------------------------------------------------
# the device state machine
# ------------------------------------------------------------------------------------------------


def test_device_refuses_an_invalid_plan(gate: Gate) -> None:
    plan = guardian_plan("dev-0001", experience_id="exp-1", workflow_id="wf-1", created_at_ms=T0)
    plan["steps"].append({"step_id": "watch", "capability": "live_view", "operation": "start", "args": {}})
    device = Device(
        "dev-0001",
        seed=1,
        story=Story("HG-01"),
        transport=Recorder(),
        clock=StepClock(),
        gate=gate,
        timing=Timing(),
    )
    assert not device.accept_plan(orjson.dumps(plan))
    assert device.refused is not None and device.phase == "refused"


def test_device_pauses_and_resumes_with_physical_evidence_after_an_ack(gate: Gate) -> None:
    async def scenario() -> tuple[Device, Recorder]:
        transport, clock = Recorder(), StepClock()
        device = make_device(gate, transport, clock)
        device.state.security = "running"
        await device.obey(dispatch(req("local_pause_security", "security_patrol", "pause")))
        assert device.state.security == "paused" and not device.state.running.is_set()
        await device.obey(
            dispatch(req("local_resume_security", "security_patrol", "resume"), dispatch_id="dsp_2")
        )
        assert device.state.security == "running" and device.state.running.is_set()
        return device, transport

    _, transport = asyncio.run(scenario())
    assert signals(transport) == [
        ("security_patrol.pause", "accepted", "command_ack"),
        ("security_patrol.pause", "paused", "security.paused"),
        ("security_patrol.resume", "accepted", "command_ack"),
        ("security_patrol.resume", "resumed", "security.resumed"),
    ]
    events = transport.values("task-events")
    assert [e["dispatch_id"] for e in events] == ["dsp_1", "dsp_1", "dsp_2", "dsp_2"]
    for e in events:
        TaskEvent.model_validate(e)


def test_device_stops_and_returns_in_dependency_order(gate: Gate) -> None:
    async def scenario() -> tuple[Device, Recorder]:
        transport, clock = Recorder(), StepClock()
        device = make_device(gate, transport, clock)
        device.state.security, device.state.docked = "running", False
        device.state.route.extend(["3", "6"])
        await device.obey(
            dispatch(
                req("sup_return_home", "movement", "return_to_station", depends_on=["sup_stop_security"]),
                req("sup_stop_security", "security_patrol", "stop"),
            )
        )
        return device, transport

    device, transport = asyncio.run(scenario())
    assert signals(transport) == [
        ("security_patrol.stop", "accepted", "command_ack"),
        ("security_patrol.stop", "completed", "security.stopped"),
        ("movement.return_to_station", "accepted", "command_ack"),
        ("movement.return_to_station", "started", None),
        ("movement.return_to_station", "completed", "movement.station_charging"),
    ]
    sequences = [e["sequence"] for e in transport.values("task-events")]
    assert sequences == sorted(sequences) and len(set(sequences)) == len(sequences)
    state = device.state
    assert state.docked and state.security == "stopped" and not state.route and state.winding_down


def test_device_ignores_dispatches_of_another_experience(gate: Gate) -> None:
    async def scenario() -> Recorder:
        transport = Recorder()
        device = make_device(gate, transport, StepClock())
        device.state.security = "running"
        await device.obey(dispatch(req("s", "security_patrol", "stop"), experience_id="exp-other"))
        return transport

    assert asyncio.run(scenario()).records == []


def test_device_speaks_and_follows_a_replan(gate: Gate) -> None:
    async def scenario() -> tuple[Device, Recorder]:
        transport = Recorder()
        device = make_device(gate, transport, StepClock())
        device.state.security, device.state.current_area = "running", "2"
        device.state.route.extend(["3", "6"])
        await device.obey(dispatch(req("sup_ask_user", "voice_content", "speak", args={"text": "?"})))
        moves = [
            req("sup_replan_move_2", "movement", "move_to_room", args={"area_id": "2"}),
            req(
                "sup_replan_move_6",
                "movement",
                "move_to_room",
                args={"area_id": "6"},
                depends_on=["sup_replan_move_2"],
            ),
        ]
        await device.obey(dispatch(*moves, dispatch_id="dsp_replan"))
        return device, transport

    device, transport = asyncio.run(scenario())
    assert signals(transport) == [
        ("voice_content.speak", "accepted", "command_ack"),
        ("voice_content.speak", "completed", "tts.playback_completed"),
        ("movement.move_to_room", "completed", "movement.arrived"),
    ]
    # the replan drops area 3 from the route; area 6 is reached later with the dispatch's step
    assert list(device.state.route) == ["6"]
    assert device.state.route_requests == {"6": ("dsp_replan", "sup_replan_move_6")}


def test_invalid_records_are_rejected_by_the_gate_for_the_right_reason(gate: Gate) -> None:
    device = make_device(gate, Recorder(), StepClock(), "HG-11")
    expected = {
        "bbox": "privacy_violation",
        "nested_pin": "privacy_violation",
        "unknown_contract": "unknown_contract",
        "too_large": "too_large",
        "not_json": "not_json",
    }
    for variant, reason in expected.items():
        raw = device.player.invalid_record(variant)
        verdict = gate.admit(
            "observations", device.device_id, raw, source_topic="t", partition=0, offset=0, received_at_ms=T0
        )
        assert isinstance(verdict, Rejected), variant
        letter = verdict.dead_letter
        assert letter.reason_code == reason, variant
        if reason != "unknown_contract":
            assert letter.payload is None
            assert device.canary not in letter.model_dump_json()
    assert len(device.player.invalid_record("too_large")) > 20 * 1024


def test_routine_and_story_records_pass_the_gate(gate: Gate) -> None:
    async def scenario() -> Recorder:
        transport, clock = Recorder(), StepClock()
        device = make_device(gate, transport, clock, "HG-07")
        device.state.current_area = "2"
        for _ in range(40):
            await device.reports.routine()
        for beat in device.story.anchors[0].beats:
            await device.player.play_beat(beat)
        return transport

    transport = asyncio.run(scenario())
    for suffix, key, value, ts in transport.records:
        verdict = gate.admit(suffix, key, value, source_topic="t", partition=0, offset=0, received_at_ms=ts)  # type: ignore[arg-type]
        assert isinstance(verdict, Admitted), value
        assert verdict.record.observed_at_ms <= ts  # type: ignore[union-attr]


# ------------------------------------------------------------------------------------------------
# the outbox
# ------------------------------------------------------------------------------------------------


def test_outbox_resend_keeps_event_ids_and_bytes() -> None:
    async def scenario() -> Recorder:
        transport = Recorder()
        outbox = Outbox(transport, "dev-0001", StepClock())
        for n in range(60):
            await outbox.emit("observations", orjson.dumps({"event_id": f"e{n}"}))
        assert await outbox.resend_last() == 50
        return transport

    transport = asyncio.run(scenario())
    first, again = transport.records[:60], transport.records[60:]
    assert [v for _, _, v, _ in again] == [v for _, _, v, _ in first[10:]]
    stamps = [ts for *_, ts in transport.records]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps)


def test_outbox_buffers_offline_and_nothing_overtakes_the_buffer() -> None:
    async def scenario() -> Recorder:
        transport = Recorder()
        outbox = Outbox(transport, "dev-0001", StepClock())
        await outbox.emit("task-events", b"1", sequence=1)
        outbox.go_offline()
        await outbox.emit("task-events", b"2", sequence=2)
        await outbox.emit("observations", b"3")
        assert [v for _, _, v, _ in transport.records] == [b"1"]
        relay = asyncio.create_task(outbox.go_online())
        await asyncio.sleep(0)
        await outbox.emit("task-events", b"4", sequence=3)  # emitted while the relay runs
        assert await relay == 3
        assert outbox.last_sequence_sent == 3
        return transport

    assert [v for _, _, v, _ in asyncio.run(scenario()).records] == [b"1", b"2", b"3", b"4"]


def test_restart_resends_then_reports_a_stale_sequence(gate: Gate) -> None:
    async def scenario() -> tuple[Device, Recorder]:
        transport, clock = Recorder(), StepClock()
        device = make_device(gate, transport, clock, "HG-09")
        device.state.current_area = "2"
        for _ in range(5):
            await device.records.task_event("security_patrol", "patrol", "progress", step_id="patrol_areas")
            await device.reports.routine()
        await device.player.restart(2000)
        return device, transport

    _, transport = asyncio.run(scenario())
    events = transport.values("task-events")
    originals = events[:5]
    again = [e for e in events[5:] if "restart" not in e["event_id"]]
    stale = [e for e in events if "restart" in e["event_id"]]
    assert [e["event_id"] for e in again] == [e["event_id"] for e in originals]
    assert len(stale) == 1 and stale[0]["sequence"] <= max(e["sequence"] for e in originals)
    assert len(transport.records) == 20 + 1


async def test_the_device_answers_a_context_refresh_with_a_snapshot_the_gate_admits(gate: Gate) -> None:
    transport = Recorder()
    device = make_device(gate, transport, StepClock())
    await device.obey(dispatch(req("ctx_refresh", "device_context", "refresh")))
    (snapshot,) = transport.values("device-context")
    verdict = gate.admit(
        "device-context",
        b"dev-0001",
        orjson.dumps(snapshot),
        source_topic="t",
        partition=0,
        offset=0,
        received_at_ms=T0,
    )
    assert isinstance(verdict, Admitted)
    assert snapshot["domains"]["battery"]["data"]["estimated_work_budget"] == "medium"
    assert [a["area_id"] for a in snapshot["domains"]["map"]["data"]["areas"]] == ["2", "3", "6"]
    # with device context off, the device sends none
    quiet = Recorder()
    off = make_device(gate, quiet, StepClock())
    off.reports.send_context = False
    await off.obey(dispatch(req("ctx_refresh", "device_context", "refresh")))
    assert quiet.values("device-context") == []

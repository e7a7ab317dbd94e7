"""The stories of docs/SCENARIOS.md as scripted device streams (the device's side, including its answers
to the dispatches the pipeline sends). Replay tests run them offline; live tests produce the very
same records to a real broker."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from simulator.context_stories import HG13_CONTEXT, HG14_CONTEXT, HG14_REPLY, HG14_REPLY_MS, air, battery
from tests.streams import T0, Script
from topics import plans
from topics.plans import guardian_plan

CANARY = "CANARY-7f3a"


def quiet_patrol(s: Script, areas: tuple[str, ...] = ("2", "3", "6")) -> Script:
    for area in areas:
        s.wait(800).obs("security.person_detected", {"area_id": area, "presence": "absent"})
        s.obs("vision.low_light_changed", {"low_light": False})
        s.wait(700).patrol(area)
    return s


def hg01(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.obs("network.aws_iot_session_changed", {"connected": True, "session_state": "connected"}, scoped=False)
    quiet_patrol(s)
    s.wait(500).security_stopped().wait(3000).docked()
    return s


def hg02(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(800).patrol("2")
    s.wait(500).obs(
        "security.person_detected", {"area_id": "2", "presence": "detected", "verification_state": "pending"}
    )
    s.wait(1200).obs(
        "security.person_detected", {"area_id": "2", "presence": "detected", "verification_state": "pending"}
    )
    s.wait(800).obs(
        "security.verification_result",
        {"outcome": "passed", "method": "face", "terminal": True, "attempt": 1},
    )
    s.wait(800).patrol("3").wait(800).patrol("6")
    s.wait(500).security_stopped().wait(3000).docked()
    return s


def hg03(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(800).patrol("2")
    s.wait(500).obs(
        "security.person_detected", {"area_id": "2", "presence": "detected", "verification_state": "pending"}
    )
    s.wait(1200).obs(
        "security.verification_result",
        {"outcome": "failed", "method": "face", "terminal": True, "attempt": 1},
    )
    s.wait(2000).task(
        "voice_content", "speak", "completed", kind="command_ack", signal="tts.playback_completed"
    )
    s.wait(3000).obs(
        "security.verification_result", {"outcome": "failed", "method": "pin", "terminal": True, "attempt": 2}
    )
    # the device obeys: stop security, then return to the station
    s.wait(1500).security_stopped().wait(4000).docked()
    return s


def hg04(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(800).patrol("2")
    # fresh battery and map context: the replan's moves pass their `requires`
    s.wait(100).fresh_context()
    s.wait(300).obs("vision.low_light_changed", {"low_light": True})
    s.wait(600).obs("vision.low_light_changed", {"low_light": False})
    s.wait(600).obs("vision.low_light_changed", {"low_light": True})
    s.wait(1000).obs("vision.low_light_changed", {"low_light": True})
    s.wait(1100).obs("vision.low_light_changed", {"low_light": True})
    s.wait(2000).patrol("3").wait(800).patrol("6")
    s.wait(500).security_stopped().wait(3000).docked()
    return s


def hg04b(variant: str) -> Callable[[Script], Script]:
    """HG-04-B: HG-04 without usable device context: none at all, a stale battery domain, or a
    low work budget."""

    def story(s: Script) -> Script:
        s.start().wait(500).security_started()
        s.wait(800).patrol("2")
        if variant == "stale":
            s.wait(100).context(
                {
                    "battery": {"data": {"estimated_work_budget": "medium"}, "observed_at_ms": s.t - 120_000},
                    "map": {"data": {"areas": [{"area_id": a, "area_name": a + "번 방"} for a in "236"]}},
                }
            )
        elif variant == "low":
            s.wait(100).fresh_context(budget="low")
        s.wait(300).obs("vision.low_light_changed", {"low_light": True})
        s.wait(2100).obs("vision.low_light_changed", {"low_light": True})
        s.wait(2000).patrol("3").wait(800).patrol("6")
        s.wait(500).security_stopped().wait(3000).docked()
        return s

    return story


def hg05(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(800).patrol("2")
    s.wait(500).obs("security.condition_changed", {"battery": "low"})
    # an acknowledgement is not evidence
    s.wait(300).task("security_patrol", "stop", "accepted", kind="command_ack", signal="security.stopped")
    s.wait(300).task(
        "movement", "return_to_station", "accepted", kind="command_ack", signal="movement.station_charging"
    )
    s.wait(1000).security_stopped().wait(4000).docked()
    return s


def hg06(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(800).patrol("2")
    s.obs("network.aws_iot_session_changed", {"connected": True, "session_state": "connected"}, scoped=False)
    s.wait(500).obs(
        "network.aws_iot_session_changed", {"connected": False, "session_state": "disconnected"}, scoped=False
    )
    lost_from = s.t
    # the device buffers 30 s of observations while offline ...
    buffered = []
    for i in range(6):
        buffered.append((lost_from + 1000 + i * 5000, i))
    s.wait(30_000)
    s.obs(
        "network.aws_iot_session_changed", {"connected": True, "session_state": "reconnecting"}, scoped=False
    )
    # ... and relays them late: observed 30 s ago, received now (stale)
    for observed_at, i in buffered:
        s.wait(20).obs(
            "security.person_detected",
            {"area_id": "3", "presence": "detected" if i % 2 else "absent", "verification_state": "none"},
            observed_at=observed_at,
        )
    s.wait(20).obs("security.condition_changed", {"battery": "low"}, observed_at=lost_from + 2000)
    s.wait(3500).obs(
        "network.aws_iot_session_changed", {"connected": True, "session_state": "connected"}, scoped=False
    )
    s.wait(800).patrol("3").wait(800).patrol("6")
    s.wait(500).security_stopped().wait(3000).docked()
    return s


def hg07(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(800).patrol("2")
    s.wait(500).obs(
        "voice_llm.pipeline_state_changed",
        {"voice_session_active": True, "pipeline_busy": True},
        scoped=False,
    )
    s.wait(500).task("security_patrol", "pause", "completed", signal="security.paused")
    s.wait(20_000).obs("voice_llm.pipeline_state_changed", {"voice_session_active": False}, scoped=False)
    s.wait(500).task("security_patrol", "resume", "completed", signal="security.resumed")
    s.wait(800).patrol("3").wait(800).patrol("6")
    s.wait(500).security_stopped().wait(3000).docked()
    return s


def hg08(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(800).patrol("2")
    for i, facts in enumerate(
        (
            {"session_state": "running", "result": "ok"},
            {"session_state": "running", "result": "ok", "event_code": 12},
            {"session_state": "running", "result": "ok", "event_code": 13},
            {"session_state": "running", "result": "ok", "event_code": 14},
        )
    ):
        s.wait(400 + i).obs("security.session_state_changed", facts)
    s.wait(800).obs("user.cancel_requested", {"channel": "app"}, scoped=False)
    s.wait(1000).security_stopped().wait(4000).docked()
    return s


def hg09(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(800).patrol("2")
    s.wait(500).obs(
        "security.person_detected", {"area_id": "2", "presence": "detected", "verification_state": "pending"}
    )
    s.wait(1200).obs("security.verification_result", {"outcome": "passed", "terminal": True})
    s.wait(800).patrol("3")
    # device restart: its outbox relays the last records again, same IDs and sequences
    resend = list(s.records[-6:])
    s.wait(2000)
    for r in resend:
        s.records.append(r.__class__(r.suffix, r.topic, r.partition, r.offset + 1000, s.t, r.key, r.value))
        s.wait(10)
    # the task manager re-emits an old lifecycle step under a new event ID: an old sequence
    s.task(
        "security_patrol",
        "patrol",
        "progress",
        signal="security.area_patrolled",
        area_id="3",
        sequence=2,
        event_id="te_replayed_old_sequence",
    )
    s.wait(500).patrol("6")
    s.wait(500).security_stopped().wait(3000).docked()
    return s


def hg11(s: Script) -> Script:
    s.start().wait(500).security_started()
    s.wait(300).obs(
        "security.person_detected",
        {"area_id": "2", "presence": "detected", "bbox": [1, 2, CANARY]},
    )
    s.wait(300).obs(
        "security.verification_result",
        {"outcome": "failed"},
        extra={"context": {"deep": [{"PIN": CANARY}]}},
    )
    s.wait(300).obs("security.door_opened", {"door": "front"})
    s.wait(300).raw("observations", b'{"event_id": "big", "pad": "' + b"x" * 20_480 + b'"}')
    s.wait(300).raw("observations", b"this is not json " + CANARY.encode())
    quiet_patrol(s)
    s.wait(500).security_stopped().wait(3000).docked()
    return s


# -- device context v2 (HG-13..HG-16) --------------------------------------------------------


def air_care_plan(s: Script, on_unknown: str | None = None) -> dict[str, Any]:
    """Adaptive air care (device doc, example A) for the script's device, created now."""
    return plans.air_care_plan(s.device_id, created_at_ms=s.t, on_unknown=on_unknown)


def hg13(device: str) -> Callable[[Script], Script]:
    """HG-13 (a)-(e): one device each; the context arrives just before the plan."""

    def story(s: Script) -> Script:
        s.context(HG13_CONTEXT[device])
        s.wait(200).start_plan(air_care_plan(s))
        return s

    return story


def hg14(device: str) -> Callable[[Script], Script]:
    """HG-14 (f)-(h): the air-quality envelope is 6 minutes old; the plan says refresh."""

    def story(s: Script) -> Script:
        s.context(HG14_CONTEXT)
        s.wait(200).start_plan(air_care_plan(s, on_unknown="refresh"))
        reply = HG14_REPLY[device]
        if reply is not None:
            s.wait(HG14_REPLY_MS).context(reply)
        return s

    return story


def _area(area_id: str, name: str) -> dict[str, str]:
    return {"area_id": area_id, "area_name": name}


def hg15(s: Script) -> Script:
    """HG-15: rich device context (coordinates, raw readings, streaming, a stale network), a
    promoted trigger, then a context record with a forbidden key (dead letter, changes nothing). The
    plan also allows air cleaning, so the air quality is among the domains its planning reads."""
    plan = guardian_plan(s.device_id, created_at_ms=s.t)
    plan["allowed_action_contracts"].append("air_cleaning.start_room_cleaning")
    s.start_plan(plan).wait(500).security_started()
    s.wait(300).context(
        {
            "movement": {
                "data": {"state": "moving", "current_area_id": "2", "x": 1.25, "y": -3.5, "theta": 0.7}
            },
            "map": {"data": {"areas": [_area("2", "거실"), _area("3", "안방")]}},
            "air_quality": air("moderate"),
            "battery": battery("medium"),
            "security": {"data": {"session_state": "running", "stage": "patrolling", "current_area_id": "2"}},
            "streaming": {"data": {"live_view_active": True}},
            "network": {"data": {"aws_iot_connected_cached": True, "last_error": "none"},
                        "observed_at_ms": s.t - 60_000},
        }
    )  # fmt: skip
    s.wait(300).patrol("2")
    s.wait(300).obs(
        "security.person_detected", {"area_id": "2", "presence": "detected", "verification_state": "pending"}
    )
    s.wait(1200).obs(
        "security.person_detected", {"area_id": "2", "presence": "detected", "verification_state": "pending"}
    )
    s.wait(300).context({"battery": {"data": {"estimated_work_budget": "low", "face_image": CANARY}}})
    s.wait(300).patrol("3").wait(800).patrol("6")
    s.wait(500).security_stopped().wait(3000).docked()
    return s


def hg16(s: Script) -> Script:
    """HG-16: a plan with on_unknown ask_user whose preconditions are UNKNOWN (no context)."""
    s.start_plan(air_care_plan(s, on_unknown="ask_user"))
    return s


SCENARIOS: dict[str, Callable[[Script], Script]] = {
    "HG-01": hg01,
    "HG-02": hg02,
    "HG-03": hg03,
    "HG-04": hg04,
    "HG-04-B": hg04b("none"),
    "HG-05": hg05,
    "HG-06": hg06,
    "HG-07": hg07,
    "HG-08": hg08,
    "HG-09": hg09,
    "HG-11": hg11,
    **{f"HG-13{d}": hg13(d) for d in "abcde"},
    **{f"HG-14{d}": hg14(d) for d in "fgh"},
    "HG-15": hg15,
    "HG-16": hg16,
}


def build(
    scenario: str, *, device_id: str = "airbot-0001", prefix: str = "guardian.", t0: int = T0
) -> Script:
    s = Script(device_id=device_id, prefix=prefix, t=t0)
    return SCENARIOS[scenario](s)


def hg12(prefix: str = "guardian.", t0: int = T0) -> tuple[Script, Script]:
    """Device A patrols; device B sends an observation correlated to A's experience."""
    a = Script(device_id="airbot-000A", prefix=prefix, t=t0)
    a.start().wait(500).security_started()
    b = Script(device_id="airbot-000B", prefix=prefix, t=t0 + 100)
    b.start(experience_id="exp_b_own")
    b.t = a.t + 200
    b.obs(
        "security.person_detected",
        {"area_id": "2", "presence": "detected", "verification_state": "failed"},
        correlation={
            "experience_id": a.experience_id,
            "workflow_id": a.workflow_id,
            "step_id": "patrol_areas",
        },
    )
    b.wait(1500).obs(
        "security.verification_result",
        {"outcome": "failed", "terminal": True},
        correlation={
            "experience_id": a.experience_id,
            "workflow_id": a.workflow_id,
            "step_id": "patrol_areas",
        },
    )
    a.t = b.t + 500
    quiet_patrol(a)
    a.wait(500).security_stopped().wait(3000).docked()
    return a, b

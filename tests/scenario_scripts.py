"""The stories of docs/SCENARIOS.md as scripted device streams (the device's side, including its answers
to the dispatches the pipeline sends). Replay tests run them offline; live tests produce the very
same records to a real broker."""

from __future__ import annotations

from collections.abc import Callable

from tests.streams import T0, Script

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
    s.wait(300).obs("vision.low_light_changed", {"low_light": True})
    s.wait(600).obs("vision.low_light_changed", {"low_light": False})
    s.wait(600).obs("vision.low_light_changed", {"low_light": True})
    s.wait(1000).obs("vision.low_light_changed", {"low_light": True})
    s.wait(1100).obs("vision.low_light_changed", {"low_light": True})
    s.wait(2000).patrol("3").wait(800).patrol("6")
    s.wait(500).security_stopped().wait(3000).docked()
    return s


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


SCENARIOS: dict[str, Callable[[Script], Script]] = {
    "HG-01": hg01,
    "HG-02": hg02,
    "HG-03": hg03,
    "HG-04": hg04,
    "HG-05": hg05,
    "HG-06": hg06,
    "HG-07": hg07,
    "HG-08": hg08,
    "HG-09": hg09,
    "HG-11": hg11,
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

"""The bounded context of docs/CONTRACTS.md §6.1 (``supervisor.context.build_context``)."""

from __future__ import annotations

import orjson
import pytest

from supervisor import context as context_module
from supervisor.context import MAX_CONTEXT_BYTES, build_context, context_size
from tables.state import Budgets, DebounceState, DeviceState, ExperienceState, SnapshotEntry, Trigger
from topics.context import KeptEnvelope
from topics.gate import forbidden_key_paths
from topics.plans import guardian_plan
from topics.registry import Registry, load_registry

T0 = 1785400000000
CANARY = "CANARY-123"


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry()


def experience(areas: tuple[str, ...] = ("2", "3", "6"), **plan_kw: object) -> ExperienceState:
    plan = guardian_plan("airbot-0001", areas=areas, created_at_ms=T0, **plan_kw)  # type: ignore[arg-type]
    return ExperienceState(
        experience_id=plan["experience_id"],
        device_id="airbot-0001",
        workflow_id=plan["workflow_id"],
        plan=plan,
        areas=list(areas),
        budgets=Budgets(decisions=1, max_decisions=3, local_retry=1, cloud_replan=2, user_question=1),
    )


def trigger(
    event_id: str = "obs_9",
    type_: str = "security.verification_result",
    at: int = T0 + 10_000,
    **facts: object,
) -> Trigger:
    return Trigger(
        event_id=event_id,
        type=type_,
        observed_at_ms=at - 50,
        received_at_ms=at,
        facts=dict(facts or {"outcome": "failed", "terminal": True}),  # type: ignore[arg-type]
        correlation=("exp", "wf", "patrol_areas"),
    )


def test_sections_rooms_in_words_ids_only_for_remaining_areas(registry: Registry) -> None:
    exp = experience()
    exp.patrolled = ["2"]
    exp.current_area = "2"
    t = trigger(
        type_="security.person_detected", area_id="3", presence="detected", verification_state="failed"
    )
    ctx = build_context(exp, None, t, registry=registry)
    assert ctx["goal"].startswith("Check the home safely")
    assert ctx["phase"] == "active"
    assert ctx["areas"] == {
        "current": "거실",
        "remaining": [{"area_id": "3", "room": "안방"}, {"area_id": "6", "room": "주방"}],
        "patrolled": ["거실"],
    }
    assert ctx["budgets"] == {"decisions_left": 2, "user_question": 1, "cloud_replan": 2, "local_retry": 1}
    assert ctx["trigger"]["type"] == "security.person_detected"
    # the trigger's area is named by its room, not its ID
    assert ctx["trigger"]["facts"] == {"room": "안방", "presence": "detected", "verification_state": "failed"}
    assert "movement.move_to_room" in ctx["allowed_actions"]
    # empty sections are left out: no device snapshot, no recent observations
    for section in ("domains", "stale_domains", "device_context", "recent"):
        assert section not in ctx
    assert forbidden_key_paths(ctx) == []


def test_facts_are_projected_to_the_allowlist(registry: Registry) -> None:
    exp = experience()
    t = trigger(
        type_="security.person_detected",
        area_id="2",
        presence="detected",
        bbox=CANARY,
        weird="x",
        PIN=CANARY,
        light="dim-" + CANARY,  # outside its enum
    )
    ctx = build_context(exp, None, t, registry=registry)
    assert ctx["trigger"]["facts"] == {"room": "거실", "presence": "detected"}
    raw = orjson.dumps(ctx).decode()
    assert CANARY not in raw
    # without a registry: scalars under keys that are not forbidden only
    bare = build_context(exp, None, t)
    assert "bbox" not in bare["trigger"]["facts"] and "PIN" not in bare["trigger"]["facts"]
    # an unknown contract shows no facts at all
    unknown = trigger(type_="security.door_opened", door=CANARY)
    assert "facts" not in build_context(exp, None, unknown, registry=registry)["trigger"]


def test_domain_states_from_the_snapshot_leave_stale_ones_out(registry: Registry) -> None:
    exp = experience()
    now = T0 + 10_000
    dev = DeviceState(device_id="airbot-0001")
    dev.snapshot["security.condition_changed"] = SnapshotEntry(
        "o1", now - 1000, now - 990, {"battery": "low"}
    )
    dev.snapshot["network.aws_iot_session_changed"] = SnapshotEntry(
        "o2", now - 60_000, now - 59_000, {"connected": False, "session_state": "disconnected"}
    )
    dev.snapshot["voice_llm.pipeline_state_changed"] = SnapshotEntry(
        "o3", now - 500, now - 400, {"voice_session_active": True, "model_readiness": "ready"}, stale=True
    )
    dev.snapshot["security.session_state_changed"] = SnapshotEntry(
        "o4", now - 300, now - 250, {"session_state": "running", "result": "ok", "event_code": 7}
    )
    dev.debounce["security.person_detected/2"] = DebounceState(stable="detected")
    ctx = build_context(exp, dev, trigger(at=now), registry=registry)
    assert ctx["domains"] == {
        "battery": "low",
        "security_session": "running",
        "security_result": "ok",
        "presence": {"거실": "detected"},
    }
    # the 60 s old network state (TTL 10 s) and the device-flagged stale voice state are unknown
    assert sorted(ctx["stale_domains"]) == [
        "cloud_connected",
        "cloud_session",
        "voice_model",
        "voice_session_active",
    ]
    assert "device_context" not in ctx  # no device context v2 snapshot


def test_recent_promoted_observations_at_most_six_newest_first(registry: Registry) -> None:
    exp = experience()
    for i in range(9):
        exp.recent.append(
            Trigger(f"obs_{i}", "security.condition_changed", T0 + i * 100, T0 + i * 100, {"battery": "ok"})
        )
    t = trigger(event_id="obs_8", type_="security.condition_changed", at=T0 + 800, battery="ok")
    exp.recent.append(
        Trigger("obs_later", "security.condition_changed", T0 + 900, T0 + 900, {"battery": "low"})
    )
    ctx = build_context(exp, None, t, registry=registry)
    recent = ctx["recent"]
    assert len(recent) == 6
    # the trigger itself and what came after it are not "recent"
    assert [r["age_ms"] for r in recent] == [100, 200, 300, 400, 500, 600]
    assert all(r["facts"] == {"battery": "ok"} for r in recent)


def test_the_bound_is_stated_and_enforced(registry: Registry) -> None:
    assert "4096 bytes" in (context_module.__doc__ or "")
    assert "4096 bytes" in (build_context.__doc__ or "")
    areas = tuple(f"a{i}" for i in range(120))
    names = {a: "방" * 60 + a for a in areas}
    exp = experience(areas=areas, area_names=names)
    exp.plan["goal_summary"] = "Patrol " * 400
    exp.patrolled = list(areas[:50])
    exp.current_area = "a1"
    dev = DeviceState(device_id="airbot-0001")
    for i in range(40):
        dev.debounce[f"security.person_detected/a{i}"] = DebounceState(stable="detected")
    big_map = [{"area_id": f"m{i}", "area_name": "방" * 60} for i in range(64)]
    dev.context["map"] = KeptEnvelope(T0, 1, 600_000, True, "summary", "normal", {"areas": big_map})
    dev.context["battery"] = KeptEnvelope(T0, 1, 60_000, True, "summary", "normal", {"charging": True})
    for i in range(20):
        exp.recent.append(
            Trigger(
                f"obs_{i}",
                "security.person_detected",
                T0 + i,
                T0 + i,
                {"area_id": f"a{i}", "presence": "detected", "verification_state": "failed", "light": "low"},
            )
        )
    t = trigger(at=T0 + 1000, outcome="failed", method="face", terminal=True, attempt=3)
    ctx = build_context(exp, dev, t, registry=registry)
    assert context_size(ctx) <= MAX_CONTEXT_BYTES
    # what matters most survives: the trigger, budgets, phase, some remaining areas
    assert ctx["trigger"]["facts"]["outcome"] == "failed"
    assert ctx["budgets"]["decisions_left"] == 2
    assert ctx["areas"]["remaining"][0]["area_id"] == "a50"
    assert ctx["areas"]["remaining_total"] == 70
    assert all(len(r["room"]) <= 32 for r in ctx["areas"]["remaining"])
    assert len(ctx.get("recent", [])) <= 6


def test_a_normal_context_is_far_below_the_bound(registry: Registry) -> None:
    exp = experience()
    dev = DeviceState(device_id="airbot-0001")
    dev.snapshot["security.condition_changed"] = SnapshotEntry(
        "o1", T0 + 9000, T0 + 9000, {"battery": "ok", "network": "ok", "low_light": False}
    )
    for i in range(6):
        exp.recent.append(
            Trigger(f"obs_{i}", "security.verification_result", T0 + i, T0 + i, {"outcome": "failed"})
        )
    size = context_size(build_context(exp, dev, trigger(), registry=registry))
    assert size < 2000

"""The bounded context a model backend sees (docs/CONTRACTS.md §6.1).

:func:`build_context` turns an experience, the device snapshot and one trigger into a small JSON
object: goal summary, phase, current / remaining / patrolled areas, domain states, budgets, the
allowed actions, the trigger, and at most 6 recent promoted observations. Everything in it is
rebuilt from allowlisted scalar facts (the registry's allowlist when one is passed; scalars of at
most 64 characters whose key is not a §4.2 forbidden key otherwise) and from the plan's own
semantic fields: never a raw record, never a copied dict. Rooms are named by the household's
``area_names``; area IDs appear only where a replan needs them (the remaining areas). Empty
sections are left out.

Size bound: the context is at most :data:`MAX_CONTEXT_BYTES` = 4096 bytes as compact UTF-8 JSON
(``orjson.dumps``). Strings are cut (goal 200 characters, room names 32, fact strings 64), lists
are capped (16 areas, 6 recent observations), and when the whole is still too large, sections
are shrunk in a fixed order (recent observations, device context, patrolled areas, stale list,
remaining areas, goal) until it fits.

``device_context`` is the planner summary of the device's context v2 (§9.3,
:func:`supervisor.summary.planner_summary`): its domains with their freshness, room names instead
of area IDs, never coordinates, raw readings or ``streaming`` (built when a registry is passed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from supervisor.summary import planner_summary
from tables.state import DeviceState, ExperienceState, SnapshotEntry, Trigger
from topics.records import FORBIDDEN_KEYS, MAX_FACT_STR_LEN
from topics.registry import Registry

#: The bound of :func:`build_context`, in bytes of compact UTF-8 JSON.
MAX_CONTEXT_BYTES = 4096
#: At most this many recent promoted observations (§6.1).
MAX_RECENT = 6
#: A recent observation older than this (relative to the trigger) is left out.
MAX_RECENT_AGE_MS = 600_000
MAX_GOAL_CHARS = 200
MAX_ROOM_CHARS = 32
MAX_AREAS = 16
MAX_ALLOWED_ACTIONS = 16

#: Domain states from the device snapshot: contract -> ((fact, context key), ...).
DOMAIN_FACTS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "security.condition_changed",
        (("battery", "battery"), ("network", "network"), ("low_light", "low_light")),
    ),
    ("vision.low_light_changed", (("low_light", "low_light"),)),
    (
        "security.session_state_changed",
        (("session_state", "security_session"), ("result", "security_result")),
    ),
    (
        "network.aws_iot_session_changed",
        (("connected", "cloud_connected"), ("session_state", "cloud_session")),
    ),
    (
        "voice_llm.pipeline_state_changed",
        (
            ("voice_session_active", "voice_session_active"),
            ("pipeline_busy", "voice_pipeline_busy"),
            ("model_readiness", "voice_model"),
        ),
    ),
    (
        "security.verification_result",
        (
            ("outcome", "last_verification"),
            ("terminal", "verification_terminal"),
            ("attempt", "verification_attempt"),
        ),
    ),
)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _scalar(value: object) -> bool:
    t = type(value)
    if t is bool or t is int:
        return True
    return t is str and len(value) <= MAX_FACT_STR_LEN  # type: ignore[arg-type]


def allowed_facts(
    contract: str, facts: dict[str, Any], registry: Registry | None
) -> dict[str, str | bool | int]:
    """The facts of ``contract`` that may be shown: allowlisted keys with valid scalar values.

    With a registry: the contract's allowlist and value rules (an unknown contract shows nothing).
    Without: scalars (strings of at most 64 characters) whose key is not a forbidden key."""
    out: dict[str, str | bool | int] = {}
    spec = registry.contracts.get(contract) if registry is not None else None
    if registry is not None and spec is None:
        return out
    for key, value in facts.items():
        if not isinstance(key, str) or key.casefold() in FORBIDDEN_KEYS or not _scalar(value):
            continue
        if spec is not None:
            fact = spec.facts.get(key)
            if fact is None or not fact.allows(value):
                continue
        out[key] = value
    return out


def _room(exp: ExperienceState, area_id: str) -> str | None:
    name = exp.area_name(area_id)
    return _clip(name, MAX_ROOM_CHARS) if name else None


def _facts_view(
    exp: ExperienceState, contract: str, facts: dict[str, Any], registry: Registry | None
) -> dict[str, Any]:
    """Allowed facts, with ``area_id`` shown as the room name when the plan names it."""
    view: dict[str, Any] = {}
    for key, value in allowed_facts(contract, facts, registry).items():
        if key == "area_id" and isinstance(value, str):
            room = _room(exp, value)
            if room is not None:
                view["room"] = room
                continue
        view[key] = value
    return view


def _is_stale(entry: SnapshotEntry, contract: str, now_ms: int, registry: Registry | None) -> bool:
    if entry.stale:
        return True
    if registry is None:
        return False
    spec = registry.contracts.get(contract)
    return spec is None or now_ms - entry.observed_at_ms > spec.default_ttl_ms


def _domains(
    exp: ExperienceState, device: DeviceState, now_ms: int, registry: Registry | None
) -> tuple[dict[str, Any], list[str]]:
    states: dict[str, Any] = {}
    observed: dict[str, int] = {}
    stale: list[str] = []
    for contract, pairs in DOMAIN_FACTS:
        entry = device.snapshot.get(contract)
        if entry is None:
            continue
        facts = allowed_facts(contract, entry.facts, registry)
        is_stale = _is_stale(entry, contract, now_ms, registry)
        for fact, key in pairs:
            if fact not in facts:
                continue
            if is_stale:
                if key not in states and key not in stale:
                    stale.append(key)
                continue
            if key in states and observed[key] >= entry.observed_at_ms:
                continue
            states[key] = facts[fact]
            observed[key] = entry.observed_at_ms
            if key in stale:
                stale.remove(key)
    # the latest presence per room (security.person_detected is kept per area in the debounce state)
    presence: dict[str, str] = {}
    for key, st in sorted(device.debounce.items()):
        if not key.startswith("security.person_detected/") or not isinstance(st.stable, str):
            continue
        area = key.split("/", 1)[1]
        room = _room(exp, area)
        if room is not None and st.stable in ("detected", "absent") and len(presence) < MAX_AREAS:
            presence[room] = st.stable
    if presence:
        states["presence"] = presence
    return states, stale


def _recent(exp: ExperienceState, trigger: Trigger, registry: Registry | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for t in reversed(exp.recent):
        if len(out) >= MAX_RECENT:
            break
        if t.event_id == trigger.event_id or t.received_at_ms > trigger.received_at_ms:
            continue
        age = trigger.received_at_ms - t.observed_at_ms
        if age > MAX_RECENT_AGE_MS or (registry is not None and t.type not in registry.contracts):
            continue
        item: dict[str, Any] = {"type": t.type, "age_ms": max(0, age)}
        facts = _facts_view(exp, t.type, t.facts, registry)
        if facts:
            item["facts"] = facts
        out.append(item)
    return out


def build_context(
    exp: ExperienceState,
    device: DeviceState | None,
    trigger: Trigger,
    *,
    registry: Registry | None = None,
) -> dict[str, Any]:
    """The §6.1 context for deciding ``trigger``: at most 4096 bytes as compact JSON.

    Pass the registry to project facts through the contracts' allowlist (the Gemini backend
    does); without it, facts are limited to short scalars under non-forbidden keys."""
    plan = exp.plan
    ctx: dict[str, Any] = {}
    goal = plan.get("goal_summary")
    if isinstance(goal, str) and goal.strip():
        ctx["goal"] = _clip(goal, MAX_GOAL_CHARS)
    ctx["phase"] = exp.phase
    ctx["security_session"] = exp.security
    ctx["docked"] = exp.docked

    areas: dict[str, Any] = {}
    if exp.current_area is not None:
        areas["current"] = _room(exp, exp.current_area) or "an unnamed area"
    remaining = exp.remaining_areas()
    if remaining:
        rows: list[dict[str, str]] = []
        for area in remaining[:MAX_AREAS]:
            row = {"area_id": area}
            room = _room(exp, area)
            if room is not None:
                row["room"] = room
            rows.append(row)
        areas["remaining"] = rows
        if len(remaining) > MAX_AREAS:
            areas["remaining_total"] = len(remaining)
    patrolled = [_room(exp, a) or "an unnamed area" for a in exp.patrolled if a in exp.areas]
    if patrolled:
        areas["patrolled"] = patrolled[:MAX_AREAS]
    if areas:
        ctx["areas"] = areas

    if device is not None:
        states, stale = _domains(exp, device, trigger.received_at_ms, registry)
        if states:
            ctx["domains"] = states
        if stale:
            ctx["stale_domains"] = stale
        if registry is not None and device.context:
            summary = planner_summary(plan, device.context, trigger.received_at_ms, registry)["domains"]
            if summary:
                ctx["device_context"] = summary

    b = exp.budgets
    ctx["budgets"] = {
        "decisions_left": max(0, b.max_decisions - b.decisions),
        "user_question": b.user_question,
        "cloud_replan": b.cloud_replan,
        "local_retry": b.local_retry,
    }
    allowed = [a for a in plan.get("allowed_action_contracts") or () if isinstance(a, str) and len(a) <= 64]
    if allowed:
        ctx["allowed_actions"] = allowed[:MAX_ALLOWED_ACTIONS]

    trig: dict[str, Any] = {
        "type": trigger.type,
        "age_ms": max(0, trigger.received_at_ms - trigger.observed_at_ms),
    }
    facts = _facts_view(exp, trigger.type, trigger.facts, registry)
    if facts:
        trig["facts"] = facts
    ctx["trigger"] = trig

    recent = _recent(exp, trigger, registry)
    if recent:
        ctx["recent"] = recent
    return _bounded(ctx)


def context_size(ctx: dict[str, Any]) -> int:
    """Bytes of ``ctx`` as compact UTF-8 JSON (the measure of the bound)."""
    return len(orjson.dumps(ctx))


def _bounded(ctx: dict[str, Any]) -> dict[str, Any]:
    """Shrink ``ctx`` in a fixed order until it fits :data:`MAX_CONTEXT_BYTES`."""
    if context_size(ctx) <= MAX_CONTEXT_BYTES:
        return ctx
    steps = (
        _shrink_list(ctx, ("recent",)),
        _shrink_areas(ctx),
        _drop(ctx, ("device_context",)),
        _shrink_list(ctx, ("areas", "patrolled")),
        _drop(ctx, ("stale_domains",)),
        _drop(ctx, ("domains", "presence")),
        _shrink_list(ctx, ("areas", "remaining"), keep=1),
        _drop(ctx, ("allowed_actions",)),
        _drop(ctx, ("domains",)),
    )
    for step in steps:
        while context_size(ctx) > MAX_CONTEXT_BYTES and step():
            pass
        if context_size(ctx) <= MAX_CONTEXT_BYTES:
            return ctx
    if "goal" in ctx:
        ctx["goal"] = _clip(ctx["goal"], 60)
    if context_size(ctx) > MAX_CONTEXT_BYTES:
        # last resort: the trigger's type, phase and budgets only
        ctx = {k: ctx[k] for k in ("phase", "budgets") if k in ctx} | {
            "trigger": {"type": _clip(str(ctx["trigger"]["type"]), MAX_FACT_STR_LEN)}
        }
    return ctx


def _shrink_areas(ctx: dict[str, Any]) -> Callable[[], bool]:
    """A step that halves the room list of ``device_context.map`` (keeping at least 4)."""

    def step() -> bool:
        data = ((ctx.get("device_context") or {}).get("map") or {}).get("data") or {}
        rooms = data.get("areas")
        if not isinstance(rooms, list) or len(rooms) <= 4:
            return False
        del rooms[max(4, len(rooms) // 2) :]
        return True

    return step


def _parent(ctx: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node: Any = ctx
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def _shrink_list(ctx: dict[str, Any], path: tuple[str, ...], keep: int = 0) -> Callable[[], bool]:
    """A step that removes the last item of the list at ``path`` (the section when empty)."""

    def step() -> bool:
        parent = _parent(ctx, path)
        if parent is None or not isinstance(parent.get(path[-1]), list):
            return False
        items: list[Any] = parent[path[-1]]
        if len(items) <= keep:
            return False
        items.pop()
        if not items:
            del parent[path[-1]]
        return True

    return step


def _drop(ctx: dict[str, Any], path: tuple[str, ...]) -> Callable[[], bool]:
    """A step that removes the section at ``path``."""

    def step() -> bool:
        parent = _parent(ctx, path)
        if parent is None or path[-1] not in parent:
            return False
        del parent[path[-1]]
        return True

    return step

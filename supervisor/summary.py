"""The planner summary projector, ``planner_context_summary.v2`` (docs/CONTRACTS.md §9.3).

One pure function, :func:`planner_summary`, is what a planner or the supervisor may see of a
device's context:

1. the capabilities in play are the plan's steps and ``allowed_action_contracts``;
2. their catalog entries' ``context_reads``, united, name the domains to read;
3. of those, only domains whose envelope says ``planner_exposure: summary`` (and not
   ``sensitivity: sensitive``: this product's fail-closed reading), and only keys that are neither
   *grounding* nor *evidence*; ``streaming`` never;
4. each domain is ``{"state": "fresh"|"stale"|"unavailable", "age_ms": N, "data": {...}}``,
   freshness computed now on the receive-time clock; a stale domain keeps its values and says
   ``stale``; an unavailable one has no ``data``; a domain with no envelope (or one observed more
   than 5 s ahead of the receive-time clock) is left out, as are empty sections;
5. area IDs are replaced by their room names (``map.areas``, else the plan's ``area_names``);
   an area without a name keeps its ID; the map lends its names only when it could be projected
   itself (available, ``summary``, ``normal``, not future-dated);
6. never coordinates, raw readings, frames, URLs, PIN or face data, credentials, logs, or a key
   of the forbidden list: only keys of the domain table, with values valid for them, pass.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from topics.context import DOMAIN_TABLE, NEVER_PROJECTED, ContextView, KeptEnvelope
from topics.records import FORBIDDEN_KEYS
from topics.registry import Registry

SUMMARY_VERSION = "planner_context_summary.v2"
#: The most room names a summary lists for ``map.areas``.
MAX_SUMMARY_AREAS = 16
MAX_NAME_CHARS = 32
_AREA_KEYS = {"current_area_id": "current_area"}


def capabilities_in_play(plan: Mapping[str, Any]) -> list[str]:
    """The capabilities of the plan's steps and ``allowed_action_contracts``, in order."""
    out: list[str] = []
    for step in plan.get("steps") or ():
        cap = step.get("capability") if isinstance(step, Mapping) else None
        if isinstance(cap, str) and cap not in out:
            out.append(cap)
    for contract in plan.get("allowed_action_contracts") or ():
        if isinstance(contract, str):
            cap = contract.partition(".")[0]
            if cap not in out:
                out.append(cap)
    return out


def domains_to_read(plan: Mapping[str, Any], registry: Registry) -> list[str]:
    """The union of the ``context_reads`` of the capabilities in play (catalog order kept)."""
    out: list[str] = []
    for cap in capabilities_in_play(plan):
        spec = registry.capabilities.get(cap)
        for domain in spec.context_reads if spec is not None else ():
            if domain not in out:
                out.append(domain)
    return out


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_NAME_CHARS else text[: MAX_NAME_CHARS - 1] + "…"


def _projectable(env: KeptEnvelope, now_ms: int) -> bool:
    """An envelope a planner may see: ``planner_exposure: summary``, not ``sensitive``, and not
    observed more than 5 s ahead of the receive-time clock (never current)."""
    return env.exposure == "summary" and env.sensitivity == "normal" and not env.skewed(now_ms)


def area_names(context: ContextView, plan: Mapping[str, Any], now_ms: int) -> dict[str, str]:
    """area_id -> room name: ``map.areas`` first, else the plan's ``area_names``. The map's names
    count only when the map itself could be projected (available, exposure ``summary``, not
    ``sensitive``, not future-dated, its list valid): a map a planner may not see lends it no name."""
    names: dict[str, str] = {}
    plan_names = plan.get("area_names")
    if isinstance(plan_names, Mapping):
        names.update({str(k): _clip(v) for k, v in plan_names.items() if isinstance(v, str) and v.strip()})
    env = context.get("map")
    if env is None or not env.available or not _projectable(env, now_ms):
        return names
    areas = env.data.get("areas")
    if DOMAIN_TABLE["map"].keys["areas"].allows(areas):
        assert isinstance(areas, list)
        names.update((item["area_id"], _clip(item["area_name"])) for item in areas)
    return names


def _data(domain: str, data: Mapping[str, Any], names: Mapping[str, str]) -> dict[str, Any]:
    spec = DOMAIN_TABLE[domain]
    out: dict[str, Any] = {}
    for key, value in data.items():
        kspec = spec.keys.get(key)
        if (
            kspec is None
            or not kspec.projected
            or key.casefold() in FORBIDDEN_KEYS
            or not kspec.allows(value)
        ):
            continue
        if key in _AREA_KEYS and isinstance(value, str):
            name = names.get(value)
            if name is not None:
                out[_AREA_KEYS[key]] = name
            else:
                out[key] = value
        elif kspec.type == "area_list":
            rooms = [names.get(a["area_id"]) or a["area_id"] for a in value]
            if rooms:
                out[key] = rooms[:MAX_SUMMARY_AREAS]
        else:
            out[key] = value
    return out


def planner_summary(
    plan: Mapping[str, Any], context: ContextView, now_ms: int, registry: Registry
) -> dict[str, Any]:
    """``planner_context_summary.v2`` of ``context`` for ``plan`` at ``now_ms`` (receive-time
    clock): ``{"summary": ..., "domains": {domain: {"state", "age_ms", "data"?}}}``."""
    names = area_names(context, plan, now_ms)
    domains: dict[str, Any] = {}
    for domain in domains_to_read(plan, registry):
        env = context.get(domain)
        if env is None or domain in NEVER_PROJECTED or domain not in DOMAIN_TABLE:
            continue
        if not _projectable(env, now_ms):
            continue  # not for a planner; or from a clock ahead of ours, never current
        age = env.age_ms(now_ms)
        entry: dict[str, Any]
        if not env.available:
            entry = {"state": "unavailable", "age_ms": age}
        else:
            entry = {"state": "fresh" if age <= env.ttl_ms else "stale", "age_ms": age}
            data = _data(domain, env.data, names)
            if data:
                entry["data"] = data
        domains[domain] = entry
    return {"summary": SUMMARY_VERSION, "domains": domains}


__all__ = [
    "MAX_SUMMARY_AREAS",
    "SUMMARY_VERSION",
    "area_names",
    "capabilities_in_play",
    "domains_to_read",
    "planner_summary",
]

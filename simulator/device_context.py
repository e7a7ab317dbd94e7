"""What a simulated device says about itself (docs/CONTRACTS.md §9.1): its own snapshot of battery,
map and movement, and the snapshots its story scripts (HG-13..HG-15), as record bytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from simulator.context_snapshot import snapshot
from topics.context import DOMAIN_TABLE

#: Stands for the device's canary value in a story's domain specs (HG-15's forbidden key).
CANARY_SLOT = "$canary"


def own_snapshot(
    device_id: str,
    n: int,
    now: int,
    *,
    plan: Mapping[str, Any],
    docked: bool,
    current_area: str | None,
) -> bytes:
    """The device's ``n``-th snapshot of its battery, map and movement, as it is ``now``."""
    names = plan.get("area_names") or {}
    areas = [{"area_id": str(a), "area_name": str(names.get(a) or a)} for a in plan.get("areas") or ()]
    movement: dict[str, Any] = {"state": "docked" if docked else "moving"}
    if current_area is not None:
        movement["current_area_id"] = current_area
    data = {
        "battery": {"charging": docked, "estimated_work_budget": "medium", "level_pct": 70},
        "map": {"areas": areas, "map_edit_active": False},
        "movement": movement,
    }
    domains = {
        name: {
            "available": True,
            "freshness": {
                "observed_at_ms": now,
                "received_at_ms": now,
                "age_ms": 0,
                "ttl_ms": DOMAIN_TABLE[name].default_ttl_ms,
                "state": "fresh",
            },
            "provenance": {
                "source_component": "DeviceAgent",
                "source_symbol": "Simulator.snapshot",
                "source_event": "context_snapshot",
                "source_kind": "domain_state",
                "sequence": n,
            },
            "planner_exposure": "summary",
            "sensitivity": "normal",
            "data": values,
        }
        for name, values in data.items()
    }
    return orjson.dumps(
        {
            "contract_version": "device_context.v2",
            "event_id": f"ctx_{device_id}_{n:06d}",
            "device_id": device_id,
            "observed_at_ms": now,
            "domains": domains,
        }
    )


def story_snapshot(
    device_id: str, n: int, now: int, domains: Mapping[str, Mapping[str, Any]], *, canary: str
) -> bytes:
    """The device's ``n``-th snapshot, of the domains its story gives (the canary put in its slot)."""
    value = orjson.dumps(snapshot(device_id, f"ctx_{device_id}_{n:06d}", domains, now_ms=now, sequence=n))
    return value.replace(CANARY_SLOT.encode(), canary.encode())

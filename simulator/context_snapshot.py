"""A device_context.v2 snapshot (docs/CONTRACTS.md §9.1) from short domain specs.

Each domain is given as ``{"data": ..., **envelope}``; the envelope defaults to available, observed
now (or ``age_ms`` before now, or at ``observed_at_ms``), a freshness ``state`` of fresh, the TTL
left to the domain, exposure ``summary`` and sensitivity ``normal``. The simulated devices and the
scripted streams of the tests build their snapshots with :func:`snapshot`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def envelope(spec: Mapping[str, Any], *, now_ms: int, sequence: int) -> dict[str, Any]:
    """One domain's envelope from its spec (unknown spec keys are refused: a typo is a bug)."""
    rest = dict(spec)
    observed = int(rest.pop("observed_at_ms", now_ms - int(rest.pop("age_ms", 0))))
    freshness: dict[str, Any] = {"observed_at_ms": observed, "state": rest.pop("state", "fresh")}
    if "ttl_ms" in rest:
        freshness["ttl_ms"] = rest.pop("ttl_ms")
    env: dict[str, Any] = {
        "available": rest.pop("available", True),
        "freshness": freshness,
        "provenance": {"source_component": "DeviceAgent", "sequence": rest.pop("sequence", sequence)},
        "planner_exposure": rest.pop("planner_exposure", "summary"),
        "sensitivity": rest.pop("sensitivity", "normal"),
    }
    if "data" in rest:
        env["data"] = rest.pop("data")
    if rest:
        raise ValueError(f"unknown domain spec keys {sorted(rest)}")
    return env


def snapshot(
    device_id: str,
    event_id: str,
    domains: Mapping[str, Mapping[str, Any]],
    *,
    now_ms: int,
    sequence: int,
    observed_at_ms: int | None = None,
) -> dict[str, Any]:
    """The snapshot record of ``domains`` as ``device_id`` sends it at ``now_ms``."""
    at = now_ms if observed_at_ms is None else observed_at_ms
    return {
        "contract_version": "device_context.v2",
        "event_id": event_id,
        "device_id": device_id,
        "observed_at_ms": at,
        "domains": {name: envelope(spec, now_ms=at, sequence=sequence) for name, spec in domains.items()},
    }

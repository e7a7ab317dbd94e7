"""Builders of scripted device streams (kcat -J records) for replay and live scenario tests."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from guardian.replay import InputRecord
from simulator.context_snapshot import snapshot
from topics.names import TopicNames
from topics.plans import guardian_plan

T0 = 1785400000000


@dataclass
class Script:
    """One device's records, in the order and at the receive times given."""

    device_id: str = "airbot-0001"
    prefix: str = "guardian."
    t: int = T0
    records: list[InputRecord] = field(default_factory=list)
    plan: dict[str, Any] = field(default_factory=dict)
    seq: int = 0
    n_obs: int = 0
    n_ctx: int = 0
    offsets: dict[str, int] = field(default_factory=dict)

    @property
    def experience_id(self) -> str:
        return str(self.plan["experience_id"])

    @property
    def workflow_id(self) -> str:
        return str(self.plan["workflow_id"])

    def _add(self, suffix: str, value: bytes | None, ts: int | None = None, key: str | None = None) -> None:
        topic = TopicNames(self.prefix).prefix + suffix
        off = self.offsets.get(suffix, 0)
        self.offsets[suffix] = off + 1
        self.records.append(
            InputRecord(
                suffix=suffix,
                topic=topic,
                partition=0,
                offset=off,
                ts=self.t if ts is None else ts,
                key=(key or self.device_id).encode(),
                value=value,
            )
        )

    def wait(self, ms: int) -> Script:
        self.t += ms
        return self

    def start(self, **kw: Any) -> Script:
        self.plan = guardian_plan(self.device_id, created_at_ms=self.t, **kw)
        self._add("plans", orjson.dumps(self.plan))
        return self

    def start_plan(self, plan: dict[str, Any]) -> Script:
        """Send ``plan`` as it is (its ``device_id`` set to this device's)."""
        self.plan = {**plan, "device_id": self.device_id}
        self._add("plans", orjson.dumps(self.plan))
        return self

    def obs(
        self,
        type_: str,
        facts: dict[str, Any],
        *,
        event_id: str | None = None,
        observed_at: int | None = None,
        scoped: bool = True,
        correlation: dict[str, str] | None = None,
        freshness_ms: int = 50,
        extra: dict[str, Any] | None = None,
        **fields: Any,
    ) -> str:
        self.n_obs += 1
        eid = event_id or f"obs_{self.device_id}_{self.n_obs:05d}"
        value: dict[str, Any] = {
            "event_id": eid,
            "device_id": self.device_id,
            "type": type_,
            "source": "DeviceAgent.Test",
            "observed_at_ms": self.t if observed_at is None else observed_at,
            "freshness_ms": freshness_ms,
            "privacy_class": "semantic_only",
            "facts": facts,
            **fields,
        }
        if correlation is not None:
            value["correlation"] = correlation
        elif scoped and self.plan:
            value["correlation"] = {
                "experience_id": self.experience_id,
                "workflow_id": self.workflow_id,
                "step_id": "patrol_areas",
            }
        if extra:
            value.update(extra)
        self._add("observations", orjson.dumps(value))
        return eid

    def raw(self, suffix: str, value: bytes | None, key: str | None = None) -> None:
        self._add(suffix, value, key=key)

    def task(
        self,
        capability: str,
        operation: str,
        status: str,
        *,
        signal: str | None = None,
        area_id: str | None = None,
        kind: str = "physical",
        step_id: str | None = None,
        sequence: int | None = None,
        event_id: str | None = None,
        reason_code: str | None = None,
    ) -> str:
        if sequence is None:
            self.seq += 1
            sequence = self.seq
        eid = event_id or f"te_{self.device_id}_{sequence:05d}"
        value: dict[str, Any] = {
            "event_id": eid,
            "device_id": self.device_id,
            "sequence": sequence,
            "occurred_at_ms": self.t,
            "task_id": f"task_{capability}_{operation}",
            "experience_id": self.experience_id,
            "workflow_id": self.workflow_id,
            "step_id": step_id,
            "dispatch_id": None,
            "capability": capability,
            "operation": operation,
            "status": status,
            "reason_code": reason_code,
            "evidence": None,
        }
        if signal is not None:
            ev: dict[str, Any] = {"kind": kind, "signal": signal}
            if area_id is not None:
                ev["area_id"] = area_id
            value["evidence"] = ev
        self._add("task-events", orjson.dumps(value))
        return eid

    def context(
        self,
        domains: Mapping[str, Mapping[str, Any]],
        *,
        observed_at: int | None = None,
        event_id: str | None = None,
    ) -> str:
        """A device_context.v2 snapshot; each domain given as ``{"data": ..., **envelope}``
        (defaults: available, observed now, ttl left to the domain, exposure summary)."""
        self.n_ctx += 1
        eid = event_id or f"ctx_{self.device_id}_{self.n_ctx:05d}"
        value = snapshot(
            self.device_id, eid, domains, now_ms=self.t, sequence=self.n_ctx, observed_at_ms=observed_at
        )
        self._add("device-context", orjson.dumps(value))
        return eid

    def fresh_context(self, budget: str = "medium", areas: tuple[str, ...] = ("2", "3", "6")) -> Script:
        """Battery and map context that a replan's moves need (§11 ``requires``)."""
        names = {"2": "거실", "3": "안방", "6": "주방"}
        self.context(
            {
                "battery": {"data": {"charging": False, "estimated_work_budget": budget, "level_pct": 64}},
                "map": {"data": {"areas": [{"area_id": a, "area_name": names.get(a, "방")} for a in areas]}},
            }
        )
        return self

    # -- common story pieces -----------------------------------------------------------------
    def security_started(self) -> Script:
        self.task(
            "security_patrol", "start", "completed", signal="security.started", step_id="start_security"
        )
        return self

    def patrol(self, area: str) -> Script:
        self.task(
            "security_patrol",
            "patrol",
            "progress",
            signal="security.area_patrolled",
            area_id=area,
            step_id="patrol_areas",
        )
        return self

    def security_stopped(self) -> Script:
        self.task("security_patrol", "stop", "completed", signal="security.stopped", step_id="stop_security")
        return self

    def docked(self) -> Script:
        self.task(
            "movement",
            "return_to_station",
            "completed",
            signal="movement.station_charging",
            step_id="return_home",
        )
        return self

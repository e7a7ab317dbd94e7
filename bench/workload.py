"""The benchmark's fleet workload: a fixed, documented mix of input records over many devices.

Every device first gets a plan (docs/CONTRACTS.md §3, with a decision budget large enough that the
mix's promoted triggers all reach a decision) and the physical ``security.started`` evidence (the *setup*
records). Then the *measured* records are observations, one device after the other (round robin),
in this fixed mix per block of 20 records:

====  ==========================================================================  ================
 n    record                                                                      pipeline outcome
====  ==========================================================================  ================
 16   state-only: ``security.person_detected`` absent / ``vision.low_light_changed``  snapshot only,
      false / ``network.aws_iot_session_changed`` connected (resting values)        no output
  1   promoted: ``security.session_state_changed`` running/ok                      decision ``continue``
  1   duplicate: the device's previous record again (same event_id and content)   timeline ``duplicate``
  1   stale: a person_detected observed 60 s before it is received                 timeline ``stale``
  1   invalid: facts carry a forbidden ``bbox`` key                                dead letter
====  ==========================================================================  ================

The slot of a device's k-th record is ``(k + device index) % 20`` (devices are staggered; the
record before a duplicate is the promoted one), and a device's first record is always state-only.
That is 80% state-only, 5% promoted, 5% duplicates, 5% stale and 5% invalid. Kafka timestamps
(receive times) advance by 1 ms per record; ``observed_at_ms`` is 30 ms before the receive time
(fresh), except for the stale ones.

Latency devices (``lat-*``) get only the setup records; one battery-low observation each is the
trigger whose ``return_to_station`` dispatch the latency probe waits for.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import orjson

from topics.names import TopicNames
from topics.plans import guardian_plan

#: the mix, per block of 20 measured records (see the module docstring)
MIX = {"state_only": 16, "promoted": 1, "duplicate": 1, "stale": 1, "invalid": 1}
BLOCK = 20
#: the plan's decision budget: every promoted trigger of the mix reaches a decision
BENCH_MAX_DECISIONS = 1_000_000
STALE_AGE_MS = 60_000
OBSERVED_BEFORE_MS = 30


@dataclass(frozen=True, slots=True)
class Rec:
    """One record to produce: topic, key, value, Kafka timestamp (ms)."""

    topic: str
    key: bytes
    value: bytes
    ts: int


def device_ids(n: int, prefix: str = "bench") -> list[str]:
    return [f"{prefix}-{i:06d}" for i in range(n)]


def setup_records(names: TopicNames, devices: list[str], t0: int) -> list[Rec]:
    """A plan, then ``security.started``, for every device (timestamps from ``t0``)."""
    out: list[Rec] = []
    for i, dev in enumerate(devices):
        ts = t0 + i
        plan = guardian_plan(dev, created_at_ms=ts, max_decisions=BENCH_MAX_DECISIONS)
        out.append(Rec(names.plans, dev.encode(), orjson.dumps(plan), ts))
    base = t0 + len(devices)
    for i, dev in enumerate(devices):
        ts = base + i
        plan_ts = t0 + i
        task = {
            "event_id": f"te_{dev}_start",
            "device_id": dev,
            "sequence": 1,
            "occurred_at_ms": ts,
            "task_id": "task_security_start",
            "experience_id": f"exp_{dev}_{plan_ts}",
            "workflow_id": f"wf_{dev}_{plan_ts}",
            "step_id": "start_security",
            "dispatch_id": None,
            "capability": "security_patrol",
            "operation": "start",
            "status": "completed",
            "reason_code": None,
            "evidence": {"kind": "physical", "signal": "security.started"},
        }
        out.append(Rec(names.task_events, dev.encode(), orjson.dumps(task), ts))
    return out


def state_only_records(names: TopicNames, devices: list[str], setup_t0: int, t0: int, n: int) -> list[Rec]:
    """``n`` of the mix's state-only records (the core micro-benchmark's input)."""
    nd = len(devices)
    out: list[Rec] = []
    for i in range(n):
        d = i % nd
        dev = devices[d]
        k = i // nd
        ts = t0 + i
        type_, facts = _STATE_ONLY[k % len(_STATE_ONLY)]
        value = _obs(dev, setup_t0 + d, k, type_, facts, ts, ts - OBSERVED_BEFORE_MS)
        out.append(Rec(names.observations, dev.encode(), orjson.dumps(value), ts))
    return out


def setup_end(devices: list[str], t0: int) -> int:
    """The first timestamp after the setup records of ``devices``."""
    return t0 + 2 * len(devices)


def _obs(
    dev: str, plan_ts: int, n: int, type_: str, facts: dict[str, object], ts: int, observed_at: int
) -> dict[str, object]:
    value: dict[str, object] = {
        "event_id": f"obs_{dev}_{n:07d}",
        "device_id": dev,
        "type": type_,
        "source": "DeviceAgent.Bench",
        "observed_at_ms": observed_at,
        "freshness_ms": 20,
        "privacy_class": "semantic_only",
        "facts": facts,
    }
    if type_ != "network.aws_iot_session_changed":
        value["correlation"] = {
            "experience_id": f"exp_{dev}_{plan_ts}",
            "workflow_id": f"wf_{dev}_{plan_ts}",
            "step_id": "patrol_areas",
        }
    return value


_STATE_ONLY: tuple[tuple[str, dict[str, object]], ...] = (
    ("security.person_detected", {"area_id": "2", "presence": "absent"}),
    ("security.person_detected", {"area_id": "3", "presence": "absent"}),
    ("vision.low_light_changed", {"low_light": False}),
    ("security.person_detected", {"area_id": "6", "presence": "absent"}),
    ("network.aws_iot_session_changed", {"connected": True, "session_state": "connected"}),
)


def measured_records(
    names: TopicNames, devices: list[str], setup_t0: int, t0: int, n: int, start: int = 0
) -> Iterator[Rec]:
    """``n`` observations in the documented mix, round robin over ``devices``, from timestamp ``t0``.

    ``setup_t0`` is the ``t0`` the devices' setup records were made with (their experience IDs
    derive from it); ``start`` continues a previous call (record numbers and timestamps go on)."""
    nd = len(devices)
    topic = names.observations
    for i in range(start, start + n):
        d = i % nd
        dev = devices[d]
        plan_ts = setup_t0 + d
        k = i // nd  # this device's record number
        slot = (k + d) % BLOCK  # staggered per device; the record before a duplicate is admitted
        ts = t0 + i
        fresh = ts - OBSERVED_BEFORE_MS
        if slot < 16 or k == 0:
            type_, facts = _STATE_ONLY[k % len(_STATE_ONLY)]
            value = _obs(dev, plan_ts, k, type_, facts, ts, fresh)
        elif slot == 16:
            facts = {"session_state": "running", "result": "ok", "event_code": k % 1000}
            value = _obs(dev, plan_ts, k, "security.session_state_changed", facts, ts, fresh)
        elif slot == 17:
            # the device's previous (promoted) record again: same event_id, same content
            facts = {"session_state": "running", "result": "ok", "event_code": (k - 1) % 1000}
            value = _obs(dev, plan_ts, k - 1, "security.session_state_changed", facts, ts, fresh)
        elif slot == 18:
            facts = {"area_id": "2", "presence": "absent"}
            value = _obs(dev, plan_ts, k, "security.person_detected", facts, ts, ts - STALE_AGE_MS)
        else:
            facts = {"area_id": "2", "presence": "absent", "bbox": [1, 2, 3, 4]}
            value = _obs(dev, plan_ts, k, "security.person_detected", facts, ts, fresh)
        yield Rec(topic, dev.encode(), orjson.dumps(value), ts)


def battery_low(names: TopicNames, dev: str, plan_ts: int, n: int, ts: int) -> Rec:
    """The latency probe's trigger: battery low on a fresh experience -> return_to_station."""
    value = _obs(dev, plan_ts, n, "security.condition_changed", {"battery": "low"}, ts, ts - 5)
    return Rec(names.observations, dev.encode(), orjson.dumps(value), ts)

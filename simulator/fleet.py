"""The fleet: devices, the cloud planner that starts them, and the watcher of the pipeline's outputs.

:class:`Fleet` is transport-agnostic: devices send through a :class:`~simulator.outbox.Transport`
and the pipeline's outputs come back through :meth:`Fleet.handle_output` (the Kafka consumer of
:mod:`simulator.kafka`, or a loopback in tests). It routes dispatches to their device's inbox,
collects decisions, dispatches, timeline entries and dead letters per experience, ends when every
experience has its ``end`` entry (or at the timeout) and checks each against its scenario's
expected outcome. What it runs (:class:`FleetConfig`), whom it tracks (:class:`Member`) and what
it reports (:class:`FleetReport`, :func:`format_table`) live in sibling modules, re-exported here.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

import orjson

from simulator.clock import SimClock
from simulator.device import Device, Timing
from simulator.fleet_config import FleetConfig as FleetConfig
from simulator.fleet_member import Member as Member
from simulator.fleet_member import experience_ids as experience_ids
from simulator.fleet_report import FleetReport as FleetReport
from simulator.fleet_report import Row as Row
from simulator.fleet_report import format_table as format_table
from simulator.outbox import Transport, TransportError
from simulator.redelivery import Deliveries
from simulator.scenarios import (
    CASE_IDS,
    EXPECTED,
    SCENARIO_IDS,
    build_story,
    check,
    expected_for,
    scenario_for,
)
from topics.gate import Gate
from topics.plans import DEFAULT_AREA_NAMES, air_care_plan, guardian_plan
from topics.registry import load_registry

AREA_POOL: tuple[str, ...] = tuple(sorted(DEFAULT_AREA_NAMES))
CANARY_MARK = b"CANARY-"
#: how long (simulated) before its plan a device sends the snapshot its story opens with
CONTEXT_LEAD_MS = 200


class Fleet:
    """The simulated devices, their planner and the watcher of the outputs."""

    def __init__(
        self,
        config: FleetConfig,
        transport: Transport,
        *,
        clock: SimClock | None = None,
        gate: Gate | None = None,
    ) -> None:
        for s in config.scenarios:
            if s not in SCENARIO_IDS and s not in CASE_IDS:
                raise ValueError(f"unknown scenario {s!r}: use one of {', '.join(SCENARIO_IDS)}")
        if config.devices < 1:
            raise ValueError("a fleet needs at least one device")
        self.config = config
        self.transport = transport
        self.clock = clock or SimClock(config.speed)
        self.gate = gate or Gate(load_registry())
        self.members: list[Member] = []
        self.by_experience: dict[str, Member] = {}
        self.by_device: dict[str, Member] = {}
        self.counts: Counter[str] = Counter()
        #: outputs delivered so far: an identical copy (at-least-once) is counted, not used twice
        self.deliveries = Deliveries()
        self.last_output = time.monotonic()
        self.errors: list[str] = []
        self._build()

    # ------------------------------------------------------------------ building
    def _build(self) -> None:
        cfg = self.config
        scenarios = [scenario_for(i, cfg.scenarios, cfg.mix) for i in range(cfg.devices)]
        if len(scenarios) == 1 and scenarios[0] == "HG-12":
            scenarios.append("HG-01")  # HG-12 needs another device's experience to point at
        prefix = cfg.prefix()
        ids = [f"{prefix}{i:04d}" for i in range(len(scenarios))]
        timing = Timing(rate=cfg.rate, patrol_ms=int(cfg.patrol_seconds * 1000))
        for i, (device_id, scenario) in enumerate(zip(ids, scenarios, strict=True)):
            rng = random.Random(f"{cfg.seed}:{device_id}:plan")
            areas = rng.sample(AREA_POOL, min(cfg.areas_per_device, len(AREA_POOL)))
            story = build_story(scenario, random.Random(f"{cfg.seed}:{device_id}:story"), areas)
            partner: tuple[str, str] | None = None
            if story.needs_partner:
                j = i - 1 if i > 0 else i + 1
                partner = experience_ids(ids[j], scenarios[j])
            device = Device(
                device_id,
                seed=cfg.seed,
                story=story,
                transport=self.transport,
                clock=self.clock,
                gate=self.gate,
                timing=timing,
                partner=partner,
                send_context=cfg.device_context,
            )
            exp_id, wf_id = experience_ids(device_id, scenario)
            member = Member(
                index=i,
                device=device,
                scenario=scenario,
                experience_id=exp_id,
                workflow_id=wf_id,
                areas=areas,
                expect=expected_for(scenario, device_context=cfg.device_context),
                start_offset_ms=int(rng.uniform(0, cfg.start_spread_s * 1000)),
            )
            self.members.append(member)
            self.by_experience[exp_id] = member
            self.by_device[device_id] = member

    def plan_for(self, member: Member) -> dict[str, Any]:
        """The docs/CONTRACTS.md §3 plan of a member, created now: the guardian patrol, or (the
        device-context stories) adaptive air care in the member's first area."""
        story = member.device.story
        if story.plan == "air_care":
            return air_care_plan(
                member.device_id,
                experience_id=member.experience_id,
                workflow_id=member.workflow_id,
                area=member.areas[0],
                created_at_ms=self.clock.now_ms(),
                on_unknown=story.on_unknown,
            )
        plan = guardian_plan(
            member.device_id,
            experience_id=member.experience_id,
            workflow_id=member.workflow_id,
            areas=member.areas,
            created_at_ms=self.clock.now_ms(),
            max_decisions=self.config.max_decisions,
        )
        plan["allowed_action_contracts"].extend(story.extra_allowed)
        return plan

    # ------------------------------------------------------------------ outputs
    def handle_output(self, suffix: str, key: str | None, value: bytes) -> None:
        """One record of decisions, dispatch, timeline or deadletter (any device; ours are kept)."""
        try:
            obj = orjson.loads(value)
        except orjson.JSONDecodeError:
            return
        if not isinstance(obj, dict):
            return
        self.last_output = time.monotonic()
        if CANARY_MARK in value:
            for m in self.members:
                if m.device.canary.encode() in value:
                    m.canary_leaked = True
        if suffix == "deadletter":
            member = self.by_device.get(key or "")
            if member is None or not self._first_delivery(member, suffix, obj):
                return
            self.counts["deadletter"] += 1
            member.seen.dead_letters.append(obj)
            if obj.get("reason_code") == "plan_invalid" and obj.get("event_id") == member.experience_id:
                member.rejected_by_guardian = True
                member.accepted.set()
            return
        member = self.by_experience.get(str(obj.get("experience_id")))
        if member is None or not self._first_delivery(member, suffix, obj):
            return
        self.counts[suffix] += 1
        if suffix == "timeline":
            member.seen.timeline.append(obj)
            stage = obj.get("stage")
            if (
                stage == "drop"
                and obj.get("drop_reason") == "duplicate"
                and obj.get("ref_id") == member.experience_id
            ):
                if not member.accepted.is_set():
                    member.error = (
                        f"experience {member.experience_id} already ran on these topics: "
                        "use another --seed or --device-prefix (or a fresh topic prefix)"
                    )
                    member.rejected_by_guardian = True
                    member.accepted.set()
            elif stage == "goal":
                member.accepted.set()
            elif stage == "end":
                member.seen.status = str(obj.get("status"))
                member.ended.set()
        elif suffix == "decisions":
            member.seen.decisions.append(obj)
        elif suffix == "dispatch":
            member.seen.dispatches.append(obj)
            if obj.get("device_id") == member.device_id:
                member.device.dispatches.inbox.put_nowait(obj)

    def _first_delivery(self, member: Member, suffix: str, obj: dict[str, Any]) -> bool:
        """Is ``obj`` the first delivery of its record? A copy re-delivered identically (at least
        once) is counted under ``redelivered``; one with other contents is a failure of ``member``."""
        verdict = self.deliveries.judge(suffix, obj)
        if verdict == "again":
            self.counts["redelivered"] += 1
        elif verdict == "conflict":
            self.counts["conflicting"] += 1
            member.seen.conflicts.append(self.deliveries.describe(suffix, obj))
        return verdict == "first"

    # ------------------------------------------------------------------ running
    async def _run_member(self, m: Member) -> None:
        try:
            await self.clock.sleep(m.start_offset_ms)
            first = m.device.story.context_first
            if first is not None:
                await m.device.send_domains(first)
                await self.clock.sleep(CONTEXT_LEAD_MS)
            m.plan = self.plan_for(m)
            plan_bytes = orjson.dumps(m.plan)
            await self.transport.send("plans", m.device_id, plan_bytes, m.device.records.outbox.stamp())
            await m.device.run(plan_bytes, started=lambda: self._started(m))
        except TransportError as exc:
            m.error = str(exc)
            self.errors.append(f"{m.device_id}: {exc}")

    async def _started(self, m: Member) -> bool:
        """Wait for the pipeline's verdict on ``m``'s plan: True once it started it (its goal entry),
        False when it refused it or ended it first (blocked by its preconditions)."""
        waits = [asyncio.ensure_future(m.accepted.wait()), asyncio.ensure_future(m.ended.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return m.accepted.is_set() and not m.rejected_by_guardian and m.seen.status is None

    def settled(self) -> bool:
        return all(m.settled for m in self.members)

    async def run(self, on_tick: Callable[[Fleet], None] | None = None, tick_s: float = 1.0) -> FleetReport:
        """Run every device until every experience ended (or the timeout); the final report."""
        started = time.monotonic()
        sim_started = self.clock.now_ms()
        deadline = started + self.config.timeout_s
        tasks = [asyncio.create_task(self._run_member(m)) for m in self.members]
        timed_out = False
        next_tick = started
        try:
            while not self.settled():
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if on_tick is not None and now >= next_tick:
                    on_tick(self)
                    next_tick = now + tick_s
                for t in tasks:
                    if t.done() and not t.cancelled() and t.exception() is not None:
                        raise t.exception()  # type: ignore[misc]
                await asyncio.sleep(min(0.1, max(0.0, deadline - now)))
            if not timed_out:
                await self._drain(deadline)
        finally:
            for t in tasks:
                t.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException) and not isinstance(r, asyncio.CancelledError):
                raise r
        if on_tick is not None:
            on_tick(self)
        return self.report(time.monotonic() - started, (self.clock.now_ms() - sim_started) / 1000, timed_out)

    async def _drain(self, deadline: float) -> None:
        """Let trailing outputs arrive: until none came for ``drain_s`` (bounded)."""
        limit = min(deadline, time.monotonic() + 4 * self.config.drain_s + 1)
        while time.monotonic() < limit:
            quiet = time.monotonic() - self.last_output
            if quiet >= self.config.drain_s:
                return
            await asyncio.sleep(min(0.1, self.config.drain_s - quiet))

    # ------------------------------------------------------------------ reporting
    def progress(self) -> list[tuple[str, Counter[str]]]:
        """Phases per scenario, in scenario order."""
        by: dict[str, Counter[str]] = {}
        for m in self.members:
            by.setdefault(m.scenario, Counter())[m.phase] += 1
        return sorted(by.items())

    def check_member(self, m: Member) -> list[str]:
        cross_ids = {
            eid for other in self.members if other is not m for eid in other.device.player.cross_event_ids
        }
        foreign = [str(e.get("ref_id")) for e in m.seen.timeline if e.get("ref_id") in cross_ids] + [
            str(d.get("trigger_event_id")) for d in m.seen.decisions if d.get("trigger_event_id") in cross_ids
        ]
        names = (m.plan or {}).get("area_names") or {}
        m.seen.played = [entry.split(":")[0] for entry in m.device.log]
        problems = check(
            m.expect, m.seen, area_names=names, canary_leaked=m.canary_leaked, foreign_refs=foreign
        )
        if m.error is not None:
            problems.insert(0, f"error: {m.error}")
        if m.device.refused is not None:
            problems.insert(0, f"the device refused the plan: {m.device.refused}")
        if m.device.crashed:
            problems.insert(0, "the device crashed")
        return problems

    def report(self, wall_s: float, sim_s: float, timed_out: bool) -> FleetReport:
        rows: list[Row] = []
        for m in self.members:
            problems = self.check_member(m)
            rows.append(
                Row(
                    device=m.device_id,
                    experience=m.experience_id,
                    scenario=m.scenario,
                    status=m.seen.status or ("refused" if m.phase == "refused" else "active"),
                    expected=m.expect.status,
                    decisions=len(m.seen.decisions),
                    dispatches=len(m.seen.dispatches),
                    dead_letters=len(m.seen.dead_letters),
                    ok=not problems,
                    problems=problems,
                )
            )
        totals = {k: int(v) for k, v in sorted(self.counts.items())}
        totals["records_sent"] = sum(m.device.records.outbox.sent for m in self.members) + len(self.members)
        cfg = asdict(self.config)
        cfg["scenarios"] = list(self.config.scenarios)
        return FleetReport(rows, wall_s, sim_s, timed_out, cfg, totals, list(self.errors))


def format_progress(fleet: Fleet) -> list[str]:
    """A small live table: experiences per scenario and phase, and the output totals."""
    phases = ["waiting for guardian", "running", "paused", "winding down", "returning", "docked"]
    ended = sorted(
        {m.phase for m in fleet.members if m.phase.startswith("ended") or m.phase in ("refused", "error")}
    )
    columns = ["starting", *phases, *ended]
    columns = [c for c in columns if any(m.phase == c for m in fleet.members)] or ["starting"]
    short = {c: c.replace("ended: ", "").replace("waiting for guardian", "waiting") for c in columns}
    head = ["scenario", "story", *[short[c] for c in columns]]
    lines = [head]
    for scenario, counter in fleet.progress():
        lines.append(
            [scenario, EXPECTED[scenario].story[:28], *[str(counter.get(c, 0) or "") for c in columns]]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    text = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in lines]
    c = fleet.counts
    n_ended = sum(1 for m in fleet.members if m.seen.status is not None)
    text.append(
        f"{n_ended}/{len(fleet.members)} ended; decisions {c['decisions']}, dispatches {c['dispatch']}, "
        f"timeline {c['timeline']}, dead letters {c['deadletter']}"
    )
    return text

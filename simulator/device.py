"""One simulated home robot: the device side of the wire contract, honestly played.

A :class:`Device` receives its plan (bytes, as the planner published it), validates it against its
own capability catalog (the gate: device policy is authoritative, an invalid plan does not run) and
follows it: task events with increasing ``sequence`` (``command_ack`` first, physical evidence only
when the simulated action has finished), routine observations that reflect its own state, the
beats of its scenario's story, and the dispatches that reach its ``inbox``. Everything it sends goes
through its :class:`Outbox` (durable: it re-sends its last 50 records with the same event IDs after
a bridge restart, and buffers while the AWS IoT session is down).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from simulator.clock import Clock
from simulator.device_context import own_snapshot, story_snapshot
from simulator.outbox import Outbox, Transport
from simulator.scenarios import Anchor, Beat, Story
from topics.gate import Admitted, Gate

PERSON = "security.person_detected"
LOW_LIGHT = "vision.low_light_changed"
NETWORK = "network.aws_iot_session_changed"
VOICE = "voice_llm.pipeline_state_changed"
ROUTINE_TYPES = (PERSON, LOW_LIGHT, NETWORK, VOICE)
SCOPED_ROUTINE = frozenset({PERSON, LOW_LIGHT})

_SOURCES = {
    PERSON: "DeviceAgent.WssVisionObserver",
    LOW_LIGHT: "DeviceAgent.WssVisionObserver",
    NETWORK: "DeviceAgent.AwsIotBridge",
    VOICE: "DeviceAgent.VoicePipeline",
    "user.cancel_requested": "DeviceAgent.UserInput",
}
_DEFAULT_SOURCE = "DeviceAgent.SecurityManager"


@dataclass(frozen=True)
class Timing:
    """Simulated durations (ms) of the device's actions, and its observation rate during patrol."""

    rate: float = 2.0
    patrol_ms: int = 10_000
    travel_ms: int = 2_000
    ack_ms: int = 200
    check_ms: int = 300
    start_ms: int = 1_200
    stop_ms: int = 800
    dock_ms: int = 4_000
    pause_ms: int = 500
    speak_ms: int = 3_000

    def ticks(self) -> int:
        """Observation ticks in one area's patrol."""
        if self.rate <= 0:
            return max(1, round(self.patrol_ms / 1000))
        return max(1, round(self.rate * self.patrol_ms / 1000))

    def tick_ms(self) -> float:
        return self.patrol_ms / self.ticks()


def topo_order(items: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Steps or requests in dependency order (``depends_on``), stable; unknown dependencies are ignored."""
    pending = list(items)
    ids = {str(i.get("step_id")) for i in pending}
    done: set[str] = set()
    ordered: list[Mapping[str, Any]] = []
    while pending:
        progressed = False
        for item in list(pending):
            deps = [str(d) for d in item.get("depends_on") or () if str(d) in ids]
            if all(d in done for d in deps):
                ordered.append(item)
                done.add(str(item.get("step_id")))
                pending.remove(item)
                progressed = True
        if not progressed:  # a cycle: the gate rejects those plans; keep the given order
            ordered.extend(pending)
            break
    return ordered


class Device:
    """One robot with its bridge. ``phase`` is for progress displays only."""

    def __init__(
        self,
        device_id: str,
        *,
        seed: int,
        story: Story,
        transport: Transport,
        clock: Clock,
        gate: Gate,
        timing: Timing,
        partner: tuple[str, str] | None = None,
        send_context: bool = True,
    ) -> None:
        self.device_id = device_id
        #: the bridge publishes device_context.v2 snapshots (and answers device_context.refresh)
        self.send_context = send_context
        self.n_context = 0
        self.seed = seed
        self.story = story
        self.clock = clock
        self.gate = gate
        self.timing = timing
        self.partner = partner
        self.outbox = Outbox(transport, device_id, clock)
        self.inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        # separate seeded streams: story timing never shifts routine records and vice versa
        self.rng_routine = random.Random(f"{seed}:{device_id}:routine")
        self.rng_timing = random.Random(f"{seed}:{device_id}:timing")
        self.canary = f"CANARY-{seed}-{device_id}"
        # the experience
        self.plan: dict[str, Any] = {}
        self.experience_id = ""
        self.workflow_id = ""
        # counters
        self.sequence = 0
        self.n_routine = 0
        self.n_story = 0
        self.n_restarts = 0
        # physical state
        self.security = "idle"  # idle, running, paused, stopped
        self.docked = True
        self.current_area: str | None = None
        self.route: deque[str] = deque()
        self.route_requests: dict[str, tuple[str, str]] = {}
        self.low_light = False
        self.voice_active = False
        self.connected = True
        self.person_areas: set[str] = set()
        self.winding_down = False
        self.phase = "idle"
        self.refused: str | None = None
        self.leg = -1
        self.log: list[str] = []
        #: event IDs of records correlated to another device's experience (HG-12)
        self.cross_event_ids: list[str] = []
        self._running = asyncio.Event()
        self._running.set()
        self._plan_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._finished = asyncio.Event()
        self.crashed = False

    # ------------------------------------------------------------------ records
    def _correlation(self) -> dict[str, str]:
        return {
            "experience_id": self.experience_id,
            "workflow_id": self.workflow_id,
            "step_id": "patrol_areas",
        }

    def observation(
        self,
        type_: str,
        facts: Mapping[str, Any],
        *,
        story: bool,
        scoped: bool,
        correlation: Mapping[str, str] | None = None,
        rng: random.Random | None = None,
    ) -> dict[str, Any]:
        """A docs/CONTRACTS.md §4 observation as the device observed it a moment ago."""
        r = rng or self.rng_routine
        if story:
            self.n_story += 1
            event_id = f"obs-{self.seed}-{self.device_id}-s{self.n_story:05d}"
        else:
            self.n_routine += 1
            event_id = f"obs-{self.seed}-{self.device_id}-r{self.n_routine:06d}"
        delay = r.randrange(20, 250)
        value: dict[str, Any] = {
            "event_id": event_id,
            "device_id": self.device_id,
            "type": type_,
            "source": _SOURCES.get(type_, _DEFAULT_SOURCE),
            "observed_at_ms": max(0, self.clock.now_ms() - delay),
            "freshness_ms": delay,
            "privacy_class": "semantic_only",
            "facts": dict(facts),
        }
        if type_ == PERSON:
            value["confidence"] = round(r.uniform(0.8, 0.99), 2)
        if correlation is not None:
            value["correlation"] = dict(correlation)
        elif scoped:
            value["correlation"] = self._correlation()
        return value

    async def _emit_obs(self, value: dict[str, Any]) -> None:
        await self.outbox.emit("observations", orjson.dumps(value))

    async def task_event(
        self,
        capability: str,
        operation: str,
        status: str,
        *,
        step_id: str | None,
        dispatch_id: str | None = None,
        signal: str | None = None,
        area_id: str | None = None,
        ack: bool = False,
        reason_code: str | None = None,
    ) -> None:
        """Send a §5 task event with the next sequence."""
        self.sequence += 1
        evidence: dict[str, Any] | None = None
        if signal is not None:
            evidence = {"kind": "physical", "signal": signal}
            if area_id is not None:
                evidence["area_id"] = area_id
        elif ack:
            evidence = {"kind": "command_ack"}
        value = {
            "event_id": f"te-{self.seed}-{self.device_id}-{self.sequence:05d}",
            "device_id": self.device_id,
            "sequence": self.sequence,
            "occurred_at_ms": self.clock.now_ms(),
            "task_id": f"task-{self.device_id}-{step_id or operation}",
            "experience_id": self.experience_id,
            "workflow_id": self.workflow_id,
            "step_id": step_id,
            "dispatch_id": dispatch_id,
            "capability": capability,
            "operation": operation,
            "status": status,
            "reason_code": reason_code,
            "evidence": evidence,
        }
        self.log.append(f"{capability}.{operation}:{status}" + (f":{signal}" if signal else ""))
        await self.outbox.emit("task-events", orjson.dumps(value), sequence=self.sequence)

    def _jitter(self, ms: int) -> float:
        return ms * self.rng_timing.uniform(0.85, 1.15)

    # ------------------------------------------------------------------ life cycle
    def accept_plan(self, plan_bytes: bytes) -> bool:
        """Validate the plan against the device's own catalog; False (and ``refused``) when invalid."""
        verdict = self.gate.admit(
            "plans",
            self.device_id,
            plan_bytes,
            source_topic="device",
            partition=0,
            offset=0,
            received_at_ms=self.clock.now_ms(),
        )
        if not isinstance(verdict, Admitted):
            self.refused = verdict.dead_letter.detail
            self.phase = "refused"
            return False
        self.plan = orjson.loads(plan_bytes)
        self.experience_id = str(self.plan["experience_id"])
        self.workflow_id = str(self.plan["workflow_id"])
        return True

    def context_snapshot(self) -> bytes:
        """A device_context.v2 snapshot of the device's battery, map and movement (§9.1)."""
        self.n_context += 1
        return own_snapshot(
            self.device_id,
            self.n_context,
            self.clock.now_ms(),
            plan=self.plan,
            docked=self.docked,
            current_area=self.current_area,
        )

    async def send_domains(self, domains: Mapping[str, Mapping[str, Any]]) -> None:
        """Send a snapshot of the domains the story gives now (whatever ``send_context`` says)."""
        self.n_context += 1
        value = story_snapshot(
            self.device_id, self.n_context, self.clock.now_ms(), domains, canary=self.canary
        )
        await self.outbox.emit("device-context", value, durable=False)

    async def publish_context(self) -> None:
        """Send a snapshot now (when the fleet has device context on and the story lets it)."""
        if self.send_context and self.story.sends_context:
            await self.outbox.emit("device-context", self.context_snapshot(), durable=False)

    async def run(self, plan_bytes: bytes, started: Callable[[], Awaitable[bool]] | None = None) -> None:
        """Follow the plan and obey dispatches until docked (and the story has played out).

        The plan runs only once ``started`` says the pipeline started it (its goal); meanwhile the
        device obeys what is dispatched to it (a context refresh, a question). A plan the pipeline
        blocked or refused is never played: the device stands down, still obeying what is
        dispatched to it (a question may arrive after the end), until the fleet stops it."""
        if not self.accept_plan(plan_bytes):
            return
        inbox = asyncio.create_task(self._obey_inbox())
        inbox.add_done_callback(self._on_done)
        plan_task: asyncio.Task[None] | None = None
        try:
            if started is not None and not await started():
                self.phase = "stood down"
                await inbox
                return
            await self.publish_context()
            self.phase = "running"
            plan_task = self._plan_task = asyncio.create_task(self._follow_plan())
            plan_task.add_done_callback(self._on_done)
            await self._finished.wait()
            while not self.crashed:
                pending = [t for t in self._tasks if not t.done()]
                if not pending:
                    break
                await asyncio.wait(pending)
        finally:
            tasks = [t for t in (inbox, plan_task, *self._tasks) if t is not None]
            for task in tasks:
                task.cancel()
            for task in tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if self.phase not in ("refused", "stood down"):
                self.phase = "docked" if self.docked else self.phase

    def _on_done(self, task: asyncio.Task[None]) -> None:
        """A crashed task ends the device's run (``run`` re-raises its exception)."""
        if not task.cancelled() and task.exception() is not None:
            self.crashed = True
            self._finished.set()

    async def _follow_plan(self) -> None:
        for step in topo_order(self.plan.get("steps") or ()):
            await self._run_step(step)
        self._finish()

    def _finish(self) -> None:
        self.phase = "docked"
        self._finished.set()

    async def _run_step(self, step: Mapping[str, Any]) -> None:
        cap, op, step_id = str(step["capability"]), str(step["operation"]), str(step["step_id"])
        t = self.timing
        if (cap, op) == ("security_patrol", "check"):
            await self.task_event(cap, op, "accepted", step_id=step_id, ack=True)
            await self.clock.sleep(self._jitter(t.check_ms))
            await self.task_event(cap, op, "completed", step_id=step_id)
        elif (cap, op) == ("security_patrol", "start"):
            areas = (step.get("args") or {}).get("area_ids") or self.plan.get("areas") or []
            self.route = deque(str(a) for a in areas)
            await self._security_start(step_id, None)
        elif (cap, op) == ("security_patrol", "patrol"):
            await self._patrol(step_id)
        elif (cap, op) == ("security_patrol", "stop"):
            await self._security_stop(step_id, None)
        elif (cap, op) == ("movement", "return_to_station"):
            await self._return(step_id, None)
        else:
            await self._execute(step, None)

    # ------------------------------------------------------------------ physical actions
    async def _security_start(self, step_id: str, dispatch_id: str | None) -> None:
        cap, op = "security_patrol", "start"
        await self.task_event(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
        await self.clock.sleep(self._jitter(self.timing.start_ms))
        self.security, self.docked = "running", False
        await self.task_event(
            cap, op, "completed", step_id=step_id, dispatch_id=dispatch_id, signal="security.started"
        )

    async def _security_stop(self, step_id: str, dispatch_id: str | None) -> None:
        cap, op = "security_patrol", "stop"
        await self.task_event(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
        await self.clock.sleep(self._jitter(self.timing.stop_ms))
        self.security = "stopped"
        self._running.set()
        await self.task_event(
            cap, op, "completed", step_id=step_id, dispatch_id=dispatch_id, signal="security.stopped"
        )

    async def _return(self, step_id: str, dispatch_id: str | None) -> None:
        cap, op = "movement", "return_to_station"
        await self.task_event(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
        self.phase = "returning"
        await self.task_event(cap, op, "started", step_id=step_id, dispatch_id=dispatch_id)
        await self.clock.sleep(self._jitter(self.timing.dock_ms))
        self.docked, self.current_area = True, None
        await self.task_event(
            cap, op, "completed", step_id=step_id, dispatch_id=dispatch_id, signal="movement.station_charging"
        )

    async def _patrol(self, step_id: str) -> None:
        cap, op = "security_patrol", "patrol"
        await self.task_event(cap, op, "started", step_id=step_id)
        t = self.timing
        while self.route:
            await self._running.wait()
            area = self.route.popleft()
            self.leg += 1
            await self.clock.sleep(self._jitter(t.travel_ms))
            await self._running.wait()
            self.current_area = area
            requested = self.route_requests.pop(area, None)
            if requested is not None:
                await self.task_event(
                    "movement",
                    "move_to_room",
                    "completed",
                    step_id=requested[1],
                    dispatch_id=requested[0],
                    signal="movement.arrived",
                    area_id=area,
                )
            else:
                await self.task_event(
                    cap, op, "progress", step_id=step_id, signal="movement.arrived", area_id=area
                )
            ticks = t.ticks()
            anchors: dict[int, list[Anchor]] = {}
            for anchor in self.story.anchors_for(self.leg):
                anchors.setdefault(min(ticks - 1, int(anchor.fraction * ticks)), []).append(anchor)
            # ticks on an absolute schedule: the time sending takes does not slow the rate down
            due = float(self.clock.now_ms())
            for tick in range(ticks):
                if not self._running.is_set():
                    await self._running.wait()
                    due = float(self.clock.now_ms())
                for anchor in anchors.get(tick, ()):
                    self._spawn(self._play(anchor.beats))
                due += t.tick_ms()
                await self.clock.sleep(max(0.0, due - self.clock.now_ms()))
                if not self._running.is_set():
                    await self._running.wait()
                    due = float(self.clock.now_ms())
                if t.rate > 0:
                    await self._routine()
            await self.task_event(
                cap, op, "progress", step_id=step_id, signal="security.area_patrolled", area_id=area
            )
            await self.publish_context()
        await self.task_event(cap, op, "completed", step_id=step_id)

    async def _routine(self) -> None:
        """One routine observation, reflecting the device's state (state-only for the pipeline)."""
        type_ = ROUTINE_TYPES[self.rng_routine.randrange(len(ROUTINE_TYPES))]
        facts: dict[str, Any]
        if type_ == PERSON:
            if self.current_area is None:
                return
            present = self.current_area in self.person_areas
            facts = {
                "area_id": self.current_area,
                "presence": "detected" if present else "absent",
                "verification_state": "pending" if present else "none",
                "light": "low" if self.low_light else "normal",
            }
        elif type_ == LOW_LIGHT:
            facts = {"low_light": self.low_light}
        elif type_ == NETWORK:
            facts = {
                "connected": self.connected,
                "session_state": "connected" if self.connected else "disconnected",
            }
        else:
            facts = self._voice_facts()
        await self._emit_obs(self.observation(type_, facts, story=False, scoped=type_ in SCOPED_ROUTINE))

    def _voice_facts(self) -> dict[str, Any]:
        return {
            "pipeline_state": "listening" if self.voice_active else "idle",
            "voice_session_active": self.voice_active,
            "pipeline_busy": self.voice_active,
            "model_readiness": "ready",
        }

    # ------------------------------------------------------------------ the story
    def _spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._on_done)

    async def _play(self, beats: Iterable[Beat]) -> None:
        elapsed = 0
        for beat in sorted(beats, key=lambda b: b.after_ms):
            if beat.after_ms > elapsed:
                await self.clock.sleep(beat.after_ms - elapsed)
                elapsed = beat.after_ms
            await self.play_beat(beat)

    async def play_beat(self, beat: Beat) -> None:
        """Play one story beat now."""
        p = beat.params
        if beat.kind == "observe":
            type_ = str(p["type"])
            facts = dict(p.get("facts") or {})
            if p.get("person"):
                self.person_areas.add(str(facts["area_id"]))
            correlation: Mapping[str, str] | None = None
            if p.get("cross_device") and self.partner is not None:
                exp_id, wf_id = self.partner
                correlation = {"experience_id": exp_id, "workflow_id": wf_id, "step_id": "patrol_areas"}
            scoped = bool(p.get("scoped", True))
            value = self.observation(type_, facts, story=True, scoped=scoped, correlation=correlation)
            if correlation is not None:
                self.cross_event_ids.append(str(value["event_id"]))
            await self._emit_obs(value)
        elif beat.kind == "state":
            if "low_light" in p:
                self.low_light = bool(p["low_light"])
                await self._emit_obs(
                    self.observation(LOW_LIGHT, {"low_light": self.low_light}, story=True, scoped=True)
                )
            if "voice" in p:
                self.voice_active = bool(p["voice"])
                await self._emit_obs(self.observation(VOICE, self._voice_facts(), story=True, scoped=False))
        elif beat.kind == "invalid":
            await self.outbox.emit("observations", self.invalid_record(str(p["variant"])), durable=False)
        elif beat.kind == "disconnect":
            self.connected = False
            self.outbox.go_offline()
            facts = {"connected": False, "session_state": "disconnected"}
            await self._emit_obs(self.observation(NETWORK, facts, story=True, scoped=False))
        elif beat.kind == "reconnect":
            self.connected = True
            await self.outbox.go_online()
            facts = {"connected": True, "session_state": "connected"}
            await self._emit_obs(self.observation(NETWORK, facts, story=True, scoped=False))
        elif beat.kind == "restart":
            await self.restart(int(p.get("down_ms", 2000)))
        elif beat.kind == "context":
            await self.send_domains(p["domains"])
        else:
            raise ValueError(f"unknown beat kind {beat.kind!r}")

    async def restart(self, down_ms: int) -> None:
        """The bridge restarts: down for ``down_ms``, then its outbox relays its last records again
        (same event IDs), and the task manager re-reports its current task from a stale checkpoint
        (a new event ID with an old sequence), before the records buffered meanwhile go out."""
        self.n_restarts += 1
        self.outbox.go_offline()
        await self.clock.sleep(down_ms)
        await self.outbox.resend_last()
        stale = max(1, self.outbox.last_sequence_sent - 2)
        value = {
            "event_id": f"te-{self.seed}-{self.device_id}-restart{self.n_restarts}",
            "device_id": self.device_id,
            "sequence": stale,
            "occurred_at_ms": self.clock.now_ms(),
            "task_id": f"task-{self.device_id}-patrol_areas",
            "experience_id": self.experience_id,
            "workflow_id": self.workflow_id,
            "step_id": "patrol_areas",
            "dispatch_id": None,
            "capability": "security_patrol",
            "operation": "patrol",
            "status": "progress",
            "reason_code": None,
            "evidence": None,
        }
        await self.outbox.send_now("task-events", orjson.dumps(value))
        await self.outbox.go_online()

    def invalid_record(self, variant: str) -> bytes:
        """The HG-11 records: each carries the canary where it must never be copied."""
        area = self.current_area or "2"
        base = self.observation(
            PERSON,
            {"area_id": area, "presence": "absent", "verification_state": "none"},
            story=True,
            scoped=True,
        )
        if variant == "bbox":
            base["facts"]["bbox"] = {"x": 120, "y": 64, "w": 88, "h": 190, "label": self.canary}
        elif variant == "nested_pin":
            base["facts"]["verification"] = {"method": "pin", "pin": self.canary}
        elif variant == "unknown_contract":
            base["type"] = "security.door_opened"
            base["facts"] = {"area_id": area, "door": "front"}
        elif variant == "too_large":
            base["facts"]["padding"] = self.canary + "x" * (20 * 1024)
        elif variant == "not_json":
            return f"not-json {self.canary} {{".encode()
        else:
            raise ValueError(f"unknown invalid variant {variant!r}")
        return orjson.dumps(base)

    # ------------------------------------------------------------------ dispatches
    async def _obey_inbox(self) -> None:
        """Obey the dispatches in the order they came."""
        while True:
            await self.obey(await self.inbox.get())

    async def obey(self, dispatch: Mapping[str, Any]) -> None:
        """Carry out one dispatch of this device's experience; requests in ``depends_on`` order."""
        if dispatch.get("experience_id") != self.experience_id or dispatch.get("device_id") != self.device_id:
            return
        dispatch_id = str(dispatch.get("dispatch_id"))
        requests = topo_order(dispatch.get("requests") or ())
        ops = {(str(r.get("capability")), str(r.get("operation"))) for r in requests}
        if ("security_patrol", "stop") in ops or ("movement", "return_to_station") in ops:
            await self._wind_down()
        moves = [
            r for r in requests if (r.get("capability"), r.get("operation")) == ("movement", "move_to_room")
        ]
        if moves:
            await self._reroute(moves, dispatch_id)
        failed: set[str] = set()
        for req in requests:
            if req in moves:
                continue
            deps = {str(d) for d in req.get("depends_on") or ()}
            if deps & failed:
                await self.task_event(
                    str(req.get("capability")),
                    str(req.get("operation")),
                    "blocked",
                    step_id=str(req.get("step_id")),
                    dispatch_id=dispatch_id,
                    reason_code="dependency_failed",
                )
                failed.add(str(req.get("step_id")))
                continue
            if not await self._execute(req, dispatch_id):
                failed.add(str(req.get("step_id")))
        if self.winding_down and self.docked and self.security != "running":
            self._finish()

    async def _wind_down(self) -> None:
        """A stop or a return: the patrol ends here (the plan's own remaining steps are dropped)."""
        self.winding_down = True
        self.phase = "winding down"
        task = self._plan_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self.route.clear()
        self._running.set()

    async def _reroute(self, moves: list[Mapping[str, Any]], dispatch_id: str) -> None:
        """A replan: the remaining route becomes the requested rooms (in dependency order)."""
        route: list[str] = []
        for req in moves:
            area = str((req.get("args") or {}).get("area_id"))
            step_id = str(req.get("step_id"))
            if area == self.current_area and self.security == "running":
                # already there: arrived
                await self.task_event(
                    "movement",
                    "move_to_room",
                    "completed",
                    step_id=step_id,
                    dispatch_id=dispatch_id,
                    signal="movement.arrived",
                    area_id=area,
                )
                continue
            self.route_requests[area] = (dispatch_id, step_id)
            route.append(area)
        self.route = deque(route)

    async def _answer_refresh(self) -> None:
        """A ``device_context.refresh``: the story's answer (or none), else the device's own snapshot."""
        story = self.story
        if not story.answers_refresh:
            return
        if story.refresh_reply is None:
            await self.publish_context()
            return
        await self.clock.sleep(story.refresh_delay_ms)
        await self.send_domains(story.refresh_reply)

    async def _move(self, area: str, step_id: str) -> None:
        """A plan's move to a room: acknowledged, travelled, arrived (physical evidence)."""
        cap, op = "movement", "move_to_room"
        await self.task_event(cap, op, "accepted", step_id=step_id, ack=True)
        self.docked = False
        await self.clock.sleep(self._jitter(self.timing.travel_ms))
        self.current_area = area
        await self.task_event(cap, op, "completed", step_id=step_id, signal="movement.arrived", area_id=area)

    async def _invalid_transition(self, cap: str, op: str, step_id: str, dispatch_id: str | None) -> bool:
        """Refuse a request the security session's state does not allow (always False)."""
        await self.task_event(
            cap, op, "blocked", step_id=step_id, dispatch_id=dispatch_id, reason_code="invalid_transition"
        )
        return False

    async def _execute(self, req: Mapping[str, Any], dispatch_id: str | None) -> bool:
        """One request; whether it succeeded."""
        cap, op, step_id = str(req.get("capability")), str(req.get("operation")), str(req.get("step_id"))
        t = self.timing
        if (cap, op) == ("security_patrol", "pause"):
            if self.security != "running":
                return await self._invalid_transition(cap, op, step_id, dispatch_id)
            await self.task_event(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
            self._running.clear()
            self.phase = "paused"
            await self.clock.sleep(self._jitter(t.pause_ms))
            self.security = "paused"
            await self.task_event(
                cap, op, "paused", step_id=step_id, dispatch_id=dispatch_id, signal="security.paused"
            )
            return True
        if (cap, op) == ("security_patrol", "resume"):
            if self.security != "paused":
                return await self._invalid_transition(cap, op, step_id, dispatch_id)
            await self.task_event(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
            await self.clock.sleep(self._jitter(t.pause_ms))
            self.security = "running"
            self.phase = "running"
            await self.task_event(
                cap, op, "resumed", step_id=step_id, dispatch_id=dispatch_id, signal="security.resumed"
            )
            self._running.set()
            return True
        if (cap, op) == ("security_patrol", "stop"):
            await self._security_stop(step_id, dispatch_id)
            return True
        if (cap, op) == ("movement", "return_to_station"):
            await self._return(step_id, dispatch_id)
            return True
        if (cap, op) == ("device_context", "refresh"):
            await self._answer_refresh()
            return True
        if (cap, op) == ("movement", "move_to_room"):  # a plan's step (a replan's moves: _reroute)
            await self._move(str((req.get("args") or {}).get("area_id")), step_id)
            return True
        if cap == "air_cleaning":
            await self.task_event(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
            await self.clock.sleep(self._jitter(t.check_ms))
            signal = "cleaning.stopped" if op == "stop" else None
            await self.task_event(
                cap, op, "completed", step_id=step_id, dispatch_id=dispatch_id, signal=signal
            )
            return True
        if (cap, op) == ("voice_content", "speak"):
            await self.task_event(cap, op, "accepted", step_id=step_id, dispatch_id=dispatch_id, ack=True)
            await self.clock.sleep(self._jitter(t.speak_ms))
            await self.task_event(
                cap,
                op,
                "completed",
                step_id=step_id,
                dispatch_id=dispatch_id,
                signal="tts.playback_completed",
            )
            return True
        await self.task_event(
            cap, op, "failed", step_id=step_id, dispatch_id=dispatch_id, reason_code="unsupported"
        )
        return False

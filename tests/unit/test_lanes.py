"""Per-device decision lanes (``streams.lanes``) over the real backend and the stub: no
head-of-line blocking, trigger order per device, budgets without HTTP calls, crash re-submission,
and the bounded number of model calls in flight."""

# ruff: noqa: F811  (pytest fixtures imported from tests.gemini_stub are test arguments)

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import orjson
import pytest

from config.settings import Settings
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from streams.lanes import Lanes, LanesService, attach_lanes
from streams.outlets import Outlets
from supervisor.gemini import GeminiBackend, GeminiOptions
from supervisor.verdict import Verdict
from tables.state import ExperienceState, Trigger
from tests.gemini_stub import (
    GeminiStub,
    answer,
    error,
    gemini_stub,  # noqa: F401  (the fixture)
)
from tests.streams import Script
from topics.registry import Registry, load_registry

SETTINGS = Settings.from_env({"GUARDIAN_GEMINI_MODEL": "gemini-stub-flash"})
OPTIONS = GeminiOptions(retries=1, timeout_ms=7000, deadline_ms=9000, backoff_ms=10, apply_wait_ms=2000)


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry()


@dataclass
class FakeShell:
    """What the lanes see of the faust shell: the store, ``send_control`` and ``outlets.submit``.

    A ``verdict`` control record is applied like the agent does (``Processor.apply``), after
    ``round_trip_s`` (the Kafka round trip)."""

    processor: Processor
    store: MemoryStore = field(default_factory=MemoryStore)
    round_trip_s: float = 0.0
    outlets: Outlets = field(default_factory=Outlets)
    sent: list[tuple[float, str, dict[str, Any]]] = field(default_factory=list)
    outs: list[Any] = field(default_factory=list)

    def feed(self, script: Script, partition: int = 0) -> None:
        for r in script.records:
            done = self.processor.process(
                self.store,
                r.suffix,
                r.key,
                r.value,
                source_topic=r.topic,
                partition=partition,
                offset=r.offset,
                received_at_ms=r.ts,
            )
            self.outs.extend(done.outs)
            self._track(done.device_id, done.queued, partition)

    def _track(self, device_id: str | None, queued: list[Trigger], partition: int) -> None:
        if device_id is None or not queued:
            return
        exp = self.store.get_experience(device_id)
        submit = self.outlets.submit
        assert submit is not None and exp is not None
        for trigger in queued:
            submit(device_id, partition, trigger, exp.etag)

    def send_control(self, partition: int, key: str, cmd: dict[str, Any]) -> None:
        cmd = orjson.loads(orjson.dumps(cmd))  # exactly what goes over the wire
        self.sent.append((time.monotonic(), key, cmd))
        if self.round_trip_s:
            asyncio.get_running_loop().call_later(self.round_trip_s, self._apply, cmd, partition)
        else:
            self._apply(cmd, partition)

    def _apply(self, cmd: dict[str, Any], partition: int) -> None:
        assert cmd["op"] == "verdict"
        verdict = Verdict.from_dict(cmd["verdict"])
        device_id = cmd["device_id"]
        trigger = Trigger.from_dict(cmd["trigger"])
        done = self.processor.apply(
            self.store, device_id, trigger, verdict, int(cmd["etag"]), int(cmd["at_ms"])
        )
        self.outs.extend(done.outs)
        self._track(device_id, done.queued, partition)

    def of(self, kind: str, device_id: str | None = None) -> list[dict[str, Any]]:
        return [o.value for o in self.outs if o.kind == kind and (device_id is None or o.key == device_id)]

    def verdicts_for(self, device_id: str) -> list[dict[str, Any]]:
        return [cmd for _, key, cmd in self.sent if key == device_id]


@pytest.fixture
async def lanes_for(gemini_stub: GeminiStub, registry: Registry) -> AsyncIterator[Any]:
    made: list[Lanes] = []

    def make(shell: FakeShell, options: GeminiOptions = OPTIONS) -> Lanes:
        backend = GeminiBackend(
            SETTINGS, options=options, registry=registry, api_key="test", base_url=gemini_stub.base_url
        )
        lanes = Lanes(shell, backend, options)
        shell.outlets.submit = lanes.submit
        made.append(lanes)
        return lanes

    yield make
    for lanes in made:
        await lanes.stop()


async def eventually(cond: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``cond`` until it holds or ``timeout_s`` passed."""
    give_up = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > give_up:
            return False
        await asyncio.sleep(0.01)
    return True


def shell_of(registry: Registry, round_trip_s: float = 0.0) -> FakeShell:
    return FakeShell(Processor(registry, Pipeline(registry, language="en"), None), round_trip_s=round_trip_s)


def device_script(device_id: str, n_triggers: int, *, room: str | None = None, **start_kw: Any) -> Script:
    s = Script(device_id=device_id)
    if room is not None:
        start_kw["area_names"] = {"2": room, "3": room + "B", "6": room + "C"}
    s.start(**start_kw).wait(500).security_started()
    for i in range(n_triggers):
        s.wait(300).obs(
            "security.verification_result", {"outcome": "passed", "terminal": True, "attempt": i + 1}
        )
    return s


async def test_a_slow_device_does_not_block_another(
    gemini_stub: GeminiStub, registry: Registry, lanes_for: Any
) -> None:
    gemini_stub.when("SlowRoom", answer("continue", "slow_device", delay_s=5.0), times=1)
    gemini_stub.default = answer("continue", "fast_device")
    shell = shell_of(registry, round_trip_s=0.02)
    lanes = lanes_for(shell)
    started = time.monotonic()
    shell.feed(device_script("airbot-slow", 2, room="SlowRoom"))
    shell.feed(device_script("airbot-fast", 3))
    # the fast device's three decisions are made while the slow one's first answer is pending
    assert await eventually(lambda: len(shell.verdicts_for("airbot-fast")) == 3, 4.0)
    assert len(shell.verdicts_for("airbot-fast")) == 3
    assert shell.verdicts_for("airbot-slow") == []  # done before the slow device's 5 s answer
    assert gemini_stub.calls("SlowRoom") == 1  # the slow device's second trigger waits in its lane
    assert await lanes.drain(12.0)
    slow = shell.verdicts_for("airbot-slow")
    assert [c["verdict"]["reason_code"] for c in slow] == ["slow_device", "fast_device"]
    assert time.monotonic() - started >= 5.0
    # every decision applied, in trigger order per device, none dropped as stale
    for device in ("airbot-fast", "airbot-slow"):
        decisions = shell.of("decisions", device)
        assert [d["backend"] for d in decisions] == ["gemini"] * len(decisions)
        events = [c["trigger"]["event_id"] for c in shell.verdicts_for(device)]
        assert [d["trigger_event_id"] for d in decisions] == events == sorted(events)
    assert not [e for e in shell.of("timeline") if e["drop_reason"] == "stale_etag"]
    assert lanes.stats.lane_crashes == 0 and lanes.stats.apply_timeouts == 0


async def test_verdict_records_carry_the_etag_current_at_call_time(
    gemini_stub: GeminiStub, registry: Registry, lanes_for: Any
) -> None:
    shell = shell_of(registry, round_trip_s=0.05)
    lanes = lanes_for(shell)
    shell.feed(device_script("airbot-0001", 3))
    assert await lanes.drain(5.0)
    cmds = shell.verdicts_for("airbot-0001")
    assert [c["etag"] for c in cmds] == [1, 2, 3]
    for c in cmds:
        assert set(c) == {"op", "device_id", "trigger", "verdict", "etag", "at_ms"}
        assert set(c["verdict"]) == {
            "decision",
            "reason_code",
            "rationale",
            "backend",
            "replan_steps",
            "keep_areas",
            "fallback_reason",
        }
    assert len(shell.of("decisions")) == 3
    exp = shell.store.get_experience("airbot-0001")
    assert exp is not None and exp.pending == []


async def test_budget_exhausted_sends_rules_verdicts_without_http(
    gemini_stub: GeminiStub, registry: Registry, lanes_for: Any
) -> None:
    shell = shell_of(registry, round_trip_s=0.01)
    lanes = lanes_for(shell)
    shell.feed(device_script("airbot-0001", 4, max_decisions=1))
    assert await lanes.drain(5.0)
    assert gemini_stub.calls() == 1
    backends = [c["verdict"]["backend"] for c in shell.verdicts_for("airbot-0001")]
    assert backends == ["gemini", "rules", "rules", "rules"]
    assert len(shell.of("decisions")) == 1
    assert [e["drop_reason"] for e in shell.of("timeline") if e["stage"] == "drop"] == [
        "budget_exhausted"
    ] * 3
    exp = shell.store.get_experience("airbot-0001")
    assert exp is not None and exp.pending == []  # nothing left waiting: the experience can complete


async def test_failures_fall_back_in_the_lane_and_nothing_is_lost(
    gemini_stub: GeminiStub, registry: Registry, lanes_for: Any
) -> None:
    gemini_stub.push(error(503), error(503), error(400), answer("fly_away"))
    shell = shell_of(registry)
    lanes = lanes_for(shell)
    shell.feed(device_script("airbot-0001", 3))
    assert await lanes.drain(5.0)
    decisions = shell.of("decisions")
    assert [d["backend"] for d in decisions] == ["fallback"] * 3
    assert gemini_stub.calls() == 4  # 2 (503, retried once) + 1 (400) + 1 (bad answer)
    why = [e["summary"] for e in shell.of("timeline") if e["stage"] == "decide"]
    assert "HTTP 503" in why[0] and "HTTP 400" in why[1] and "outside the six" in why[2]


async def test_pending_triggers_are_resubmitted_once_after_a_restart(
    gemini_stub: GeminiStub, registry: Registry, lanes_for: Any
) -> None:
    # a worker queued three triggers, then died before any verdict: they are durable in the state
    crashed = shell_of(registry)
    crashed.outlets.submit = lambda *_: None
    crashed.feed(device_script("airbot-0001", 3))
    exp = crashed.store.get_experience("airbot-0001")
    assert exp is not None and len(exp.pending) == 3
    # the restarted worker recovers the table and re-submits (twice: a duplicate recovery changes nothing)
    shell = shell_of(registry)
    shell.store = crashed.store
    lanes = lanes_for(shell)
    assert lanes.resubmit([(0, exp)]) == 3
    lanes.resubmit([(0, exp)])
    assert await lanes.drain(5.0)
    assert gemini_stub.calls() == 3
    assert len(shell.of("decisions")) == 3
    assert lanes.stats.skipped == 0


async def test_model_calls_in_flight_are_bounded(
    gemini_stub: GeminiStub, registry: Registry, lanes_for: Any
) -> None:
    gemini_stub.default = answer("continue", delay_s=0.2)
    shell = shell_of(registry)
    lanes = lanes_for(
        shell, GeminiOptions(concurrency=2, timeout_ms=2000, deadline_ms=3000, apply_wait_ms=1000)
    )
    started = time.monotonic()
    for i in range(6):
        shell.feed(device_script(f"airbot-{i:04d}", 1))
    assert await lanes.drain(5.0)
    assert gemini_stub.max_in_flight == 2
    assert gemini_stub.calls() == 6
    assert time.monotonic() - started >= 0.6  # three rounds of two


async def test_stop_cancels_in_flight_calls_and_closes_the_client(
    gemini_stub: GeminiStub, registry: Registry, lanes_for: Any
) -> None:
    gemini_stub.default = answer("continue", delay_s=5.0)
    shell = shell_of(registry)
    lanes = lanes_for(shell)
    shell.feed(device_script("airbot-0001", 2))
    assert await eventually(lambda: gemini_stub.calls() == 1, 2.0)
    started = time.monotonic()
    await lanes.stop()
    assert time.monotonic() - started < 5.0  # cancelled, not waited for (the answer takes 5 s)
    assert shell.sent == []
    lanes.submit("airbot-0001", 0, Trigger("late", "security.verification_result", 1, 1, {}), 1)
    assert lanes.busy() == 0
    exp = shell.store.get_experience("airbot-0001")
    assert exp is not None and len(exp.pending) == 2  # still durable for the next worker


class _Signal:
    def __init__(self) -> None:
        self.receivers: list[Callable[..., Any]] = []

    def connect(self, fun: Callable[..., Any]) -> None:
        self.receivers.append(fun)


async def test_attach_lanes_wires_the_shell_and_the_app(gemini_stub: GeminiStub, registry: Registry) -> None:
    services: list[Any] = []
    recover: list[Callable[[], Any]] = []
    app = SimpleNamespace(service=services.append, on_partitions_revoked=_Signal())
    shell = shell_of(registry)
    shell.tables = SimpleNamespace(devices=SimpleNamespace(on_recover=recover.append))  # type: ignore[attr-defined]
    backend = GeminiBackend(SETTINGS, registry=registry, api_key="test", base_url=gemini_stub.base_url)
    lanes = attach_lanes(app, shell, SETTINGS, backend=backend, options=OPTIONS)
    try:
        assert shell.outlets.submit == lanes.submit
        [service] = services
        assert isinstance(service, LanesService) and service.lanes is lanes
        assert recover == [lanes.resubmit_recovered]
        # a revoked partition's queued jobs are forgotten (its new owner re-submits them)
        gemini_stub.default = answer("continue", delay_s=0.3)
        shell.feed(device_script("airbot-0001", 3), partition=5)
        assert await eventually(lambda: gemini_stub.calls() == 1, 2.0)
        [receiver] = app.on_partitions_revoked.receivers
        receiver(app, [SimpleNamespace(topic="x", partition=5)], signal=None)
        assert await lanes.drain(3.0)
        assert gemini_stub.calls() == 1  # only the call already in flight
    finally:
        await lanes.stop()


class _FlakyBackend:
    """Raises on its first decision (a bug), then answers continue."""

    def __init__(self) -> None:
        self.calls = 0
        self.closed = False

    async def decide(self, exp: ExperienceState, device: Any, trigger: Trigger) -> Verdict:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("a bug in the backend")
        return Verdict("continue", "fine", "Fine.", backend="gemini")

    async def aclose(self) -> None:
        self.closed = True


async def test_a_crashed_lane_restarts_for_the_queued_triggers(
    registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    shell = shell_of(registry)
    backend = _FlakyBackend()
    lanes = Lanes(shell, backend, OPTIONS)
    shell.outlets.submit = lanes.submit
    shell.feed(device_script("airbot-0001", 3))
    assert await lanes.drain(3.0)
    assert lanes.stats.lane_crashes == 1
    assert "decision lane of airbot-0001 failed" in caplog.text
    assert [d["trigger_event_id"] for d in shell.of("decisions")] == [
        c["trigger"]["event_id"] for c in shell.verdicts_for("airbot-0001")
    ]
    assert len(shell.of("decisions")) == 2
    exp = shell.store.get_experience("airbot-0001")
    assert exp is not None and len(exp.pending) == 1  # the crashed one waits for the next recovery
    assert lanes.resubmit([(0, exp)]) == 1
    assert await lanes.drain(3.0)
    assert exp.pending == [] and len(shell.of("decisions")) == 3
    await lanes.stop()
    assert backend.closed

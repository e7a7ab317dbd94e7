"""What the Gemini backend tests share: the settings and options, the ``registry`` and
``make_backend`` fixtures, the :class:`Harness` around the functional core, and patrol scripts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from config.settings import Settings
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor.gemini import GeminiBackend, GeminiOptions
from supervisor.verdict import Verdict
from tables.state import Trigger
from tests.gemini_stub import GeminiStub
from tests.streams import Script
from topics.registry import Registry, load_registry

SETTINGS = Settings.from_env({"GUARDIAN_GEMINI_MODEL": "gemini-stub-flash"})
FAST = GeminiOptions(retries=2, timeout_ms=300, deadline_ms=3000, backoff_ms=10, backoff_max_ms=40)


@pytest.fixture(scope="module")
def registry() -> Registry:
    return load_registry()


@pytest.fixture
async def make_backend(gemini_stub: GeminiStub, registry: Registry) -> AsyncIterator[Any]:
    made: list[GeminiBackend] = []

    def make(options: GeminiOptions = FAST) -> GeminiBackend:
        b = GeminiBackend(
            SETTINGS, options=options, registry=registry, api_key="test", base_url=gemini_stub.base_url
        )
        made.append(b)
        return b

    yield make
    for b in made:
        await b.aclose()


@dataclass
class Harness:
    """The functional core with an async backend (``decide=None``), as the live worker runs it."""

    registry: Registry
    store: MemoryStore = field(default_factory=MemoryStore)
    outs: list[Any] = field(default_factory=list)
    queued: list[Trigger] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.processor = Processor(self.registry, Pipeline(self.registry, language="en"), None)

    def feed(self, script: Script) -> None:
        for r in script.records:
            done = self.processor.process(
                self.store,
                r.suffix,
                r.key,
                r.value,
                source_topic=r.topic,
                partition=r.partition,
                offset=r.offset,
                received_at_ms=r.ts,
            )
            self.outs.extend(done.outs)
            self.queued.extend(done.queued)

    async def decide_next(self, backend: GeminiBackend, device_id: str = "airbot-0001") -> Verdict:
        trigger = self.queued.pop(0)
        exp = self.store.get_experience(device_id)
        assert exp is not None
        etag = exp.etag
        verdict = await backend.decide(exp, self.store.get_device(device_id), trigger)
        done = self.processor.apply(self.store, device_id, trigger, verdict, etag, trigger.received_at_ms + 5)
        self.outs.extend(done.outs)
        return verdict

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [o.value for o in self.outs if o.kind == kind]


def failed_verification(s: Script, attempt: int = 1) -> str:
    return s.obs(
        "security.verification_result",
        {"outcome": "failed", "method": "face", "terminal": True, "attempt": attempt},
    )


def patrol_with(*steps: str) -> Script:
    s = Script().start().wait(500).security_started().wait(800).patrol("2").fresh_context()
    for step in steps:
        s.wait(700)
        if step == "failed":
            failed_verification(s)
        elif step == "passed":
            s.obs("security.verification_result", {"outcome": "passed", "terminal": True})
        elif step == "battery":
            s.obs("security.condition_changed", {"battery": "low"})
        elif step == "low_light":
            s.obs("vision.low_light_changed", {"low_light": True})
            s.wait(2100).obs("vision.low_light_changed", {"low_light": True})
    return s

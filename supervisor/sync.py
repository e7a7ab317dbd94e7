"""``guardian replay --decisions model``: the async Gemini backend behind a blocking decider.

The replay drives the functional core synchronously and decides a queued trigger as a live
decision lane does, on copies of the stored experience and device (``guardian/replay_model.py``):
:class:`BlockingModelDecider` ``(experience, device, trigger) -> Verdict`` runs
:meth:`supervisor.gemini.GeminiBackend.decide` on its own event loop (an :class:`asyncio.Runner`
kept for the decider's life, so the HTTP connections are reused), with the same context (the
device's domain states and device context included), failure handling, validation and fallback as
the live worker.

The client is closed by :meth:`BlockingModelDecider.close` (or the ``with`` block), and at the
latest when the decider is garbage-collected or the process exits.
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType

from config.settings import Settings
from supervisor.gemini import GeminiBackend, GeminiOptions
from supervisor.verdict import Verdict
from tables.state import DeviceState, ExperienceState, Trigger


def _shutdown(runner: asyncio.Runner, backend: GeminiBackend) -> None:
    try:
        runner.run(backend.aclose())
    finally:
        runner.close()


class BlockingModelDecider:
    """A synchronous decider over :class:`GeminiBackend`; call it from code with no running loop."""

    def __init__(self, backend: GeminiBackend) -> None:
        self.backend = backend
        self._runner = asyncio.Runner()
        self._finalizer = weakref.finalize(self, _shutdown, self._runner, backend)

    def __call__(self, exp: ExperienceState, device: DeviceState | None, trigger: Trigger) -> Verdict:
        if not self._finalizer.alive:
            raise RuntimeError("the model decider is closed")
        return self._runner.run(self.backend.decide(exp, device, trigger))

    def close(self) -> None:
        """Close the backend's HTTP clients and the event loop (idempotent)."""
        self._finalizer()

    def __enter__(self) -> BlockingModelDecider:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def blocking_model_decider(
    settings: Settings,
    *,
    options: GeminiOptions | None = None,
    api_key: str | None = None,
    base_url: str | None = None,
) -> BlockingModelDecider:
    """The decider of ``guardian replay --decisions model`` for the configured Gemini model.

    Raises :class:`supervisor.gemini.GeminiConfigError` (a ``SettingsError``) without an API key."""
    return BlockingModelDecider(GeminiBackend(settings, options=options, api_key=api_key, base_url=base_url))

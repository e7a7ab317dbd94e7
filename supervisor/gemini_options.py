"""The Gemini backend's failure handling and concurrency, read from the environment
(:class:`GeminiOptions`), and the error of a backend that cannot be configured
(:class:`GeminiConfigError`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from config.settings import SettingsError


class GeminiConfigError(SettingsError):
    """The Gemini backend cannot be configured (no API key, a bad GUARDIAN_GEMINI_* value). Set
    ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``), or run with ``GUARDIAN_SUPERVISOR=rules``."""


@dataclass(frozen=True, slots=True)
class GeminiOptions:
    """Failure handling and concurrency of the Gemini backend (times in milliseconds)."""

    retries: int = 2
    timeout_ms: int = 8000
    deadline_ms: int = 20000
    backoff_ms: int = 500
    backoff_max_ms: int = 4000
    #: model calls in flight at once, over all devices (``streams.lanes``)
    concurrency: int = 32
    #: how long a lane waits for its verdict to be applied before the device's next decision
    apply_wait_ms: int = 10000

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> GeminiOptions:
        env = os.environ if env is None else env
        d = cls()

        def read(name: str, default: int, minimum: int) -> int:
            raw = env.get(name)
            if raw is None or raw.strip() == "":
                return default
            try:
                value = int(raw)
            except ValueError as exc:
                raise GeminiConfigError(f"{name} must be a whole number, not {raw!r}") from exc
            if value < minimum:
                raise GeminiConfigError(f"{name} must be at least {minimum}, not {value}")
            return value

        return cls(
            retries=read("GUARDIAN_GEMINI_RETRIES", d.retries, 0),
            timeout_ms=read("GUARDIAN_GEMINI_TIMEOUT_MS", d.timeout_ms, 100),
            deadline_ms=read("GUARDIAN_GEMINI_DEADLINE_MS", d.deadline_ms, 100),
            backoff_ms=read("GUARDIAN_GEMINI_BACKOFF_MS", d.backoff_ms, 0),
            backoff_max_ms=read("GUARDIAN_GEMINI_BACKOFF_MAX_MS", d.backoff_max_ms, 0),
            concurrency=read("GUARDIAN_GEMINI_CONCURRENCY", d.concurrency, 1),
            apply_wait_ms=read("GUARDIAN_GEMINI_APPLY_WAIT_MS", d.apply_wait_ms, 0),
        )

"""The Gemini backend: one decision per trigger from a Gemini model, through ``google-genai``.

The model sees the context of docs/CONTRACTS.md §6.1 (:func:`supervisor.context.build_context`) and must
answer one JSON object (:class:`ModelAnswer`). Whatever it answers is checked twice: as JSON
against :class:`ModelAnswer` (``response.text`` is validated here; the SDK's ``parsed`` is silently
None on bad JSON), then against the state (:func:`verdict_from_answer`: ``ask_user`` needs a user
question left, ``replan`` a cloud replan, ``complete`` every success condition; replan steps are
validated like a plan). Anything wrong — an HTTP error, a timeout, the deadline, a malformed or
out-of-contract answer — ends in the rules' decision (:func:`supervisor.rules.decide`) with
``backend="fallback"`` and a ``fallback_reason`` that the timeline shows.

This module owns :class:`GeminiBackend` and its HTTP loop (:meth:`GeminiBackend.ask`); the answer's
schema and parsing are in :mod:`supervisor.gemini_answer`, the check against the state and the
fallback in :mod:`supervisor.gemini_verdict`, the system instruction in :mod:`supervisor.gemini_prompt`
and the options in :mod:`supervisor.gemini_options` (all re-exported here).

Failure handling is this module's own loop, with the SDK's retries off (``HttpRetryOptions
(attempts=1)``), so the number of HTTP calls is exactly what is configured
(:class:`GeminiOptions`, from the environment):

- ``GUARDIAN_GEMINI_RETRIES`` (default 2): retries after the first call, on HTTP 429, 5xx, a
  timeout or a connection error; any other 4xx is not retried;
- ``GUARDIAN_GEMINI_TIMEOUT_MS`` (default 8000): the timeout of one HTTP call;
- ``GUARDIAN_GEMINI_DEADLINE_MS`` (default 20000): the bound of one whole decision, retries and
  backoff included (a call never runs past it);
- ``GUARDIAN_GEMINI_BACKOFF_MS`` (default 500): the first backoff, doubled per retry.

The SDK's own settings stay the SDK's: the API key from ``GEMINI_API_KEY`` / ``GOOGLE_API_KEY`` and
the endpoint from ``GOOGLE_GEMINI_BASE_URL``. The API version is pinned to ``v1beta``. The HTTP
transport is pinned to ``httpx2`` (the SDK's required HTTP library): with ``aiohttp`` importable —
faust installs it — the SDK would otherwise pick aiohttp, whose connection-error path retries once
by itself after sleeping 1–10 s.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

import httpx2
import orjson
from google import genai
from google.genai import errors, types
from pydantic import ValidationError

from config.settings import Settings
from supervisor import rules
from supervisor.context import build_context
from supervisor.gemini_answer import (
    FALLBACK_REASON_MAX,
    MAX_REPLAN_STEPS,
    ModelAnswer,
    ProposedStep,
    parse_answer,
)
from supervisor.gemini_options import GeminiConfigError, GeminiOptions
from supervisor.gemini_prompt import system_instruction
from supervisor.gemini_verdict import fallback, replan_requests, verdict_from_answer
from supervisor.verdict import Verdict
from tables.state import DeviceState, ExperienceState, Trigger
from topics.registry import Registry, load_registry

__all__ = [
    "API_VERSION",
    "CALL_GRACE_S",
    "FALLBACK_REASON_MAX",
    "MAX_REPLAN_STEPS",
    "MIN_ATTEMPT_S",
    "CallOutcome",
    "GeminiBackend",
    "GeminiConfigError",
    "GeminiOptions",
    "ModelAnswer",
    "ProposedStep",
    "fallback",
    "parse_answer",
    "replan_requests",
    "system_instruction",
    "verdict_from_answer",
]

logger = logging.getLogger(__name__)

API_VERSION = "v1beta"
#: A per-call timeout shorter than this is not worth an HTTP call (the deadline is too close).
MIN_ATTEMPT_S = 0.05
#: How long past its HTTP timeout one call may run before it is cancelled (belt and braces).
CALL_GRACE_S = 0.25


# --------------------------------------------------------------------------------------------
# the backend
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class CallOutcome:
    """One decision's HTTP conversation: the model text, or why there is none."""

    text: str | None
    failure: str | None
    attempts: int


class GeminiBackend:
    """Decides with a Gemini model through ``genai.Client`` (async); validated, with fallback.

    ``api_key`` and ``base_url`` are for tests: by default the SDK reads ``GEMINI_API_KEY`` /
    ``GOOGLE_API_KEY`` and ``GOOGLE_GEMINI_BASE_URL`` itself. Close with :meth:`aclose`."""

    def __init__(
        self,
        settings: Settings,
        *,
        options: GeminiOptions | None = None,
        registry: Registry | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
    ) -> None:
        self.model = settings.gemini_model
        self.options = options if options is not None else GeminiOptions.from_env()
        # the configured catalog (GUARDIAN_CONTRACTS_FILE / GUARDIAN_CAPABILITIES_FILE), as the core's
        self.registry = (
            registry
            if registry is not None
            else load_registry(settings.contracts_file, settings.capabilities_file)
        )
        http_options = types.HttpOptions(
            api_version=API_VERSION,
            timeout=self.options.timeout_ms,
            retry_options=types.HttpRetryOptions(attempts=1),
            async_client_args={"transport": httpx2.AsyncHTTPTransport()},
        )
        if base_url is not None:
            http_options.base_url = base_url
        try:
            self._client = genai.Client(api_key=api_key, http_options=http_options)
        except ValueError as exc:
            raise GeminiConfigError(
                f"the Gemini backend cannot start: {exc} Set GEMINI_API_KEY (or GOOGLE_API_KEY), "
                "or use GUARDIAN_SUPERVISOR=rules."
            ) from exc
        #: HTTP calls made so far (every attempt counts)
        self.http_calls = 0
        self.fallbacks = 0
        #: hooks a caller may set (the worker's metrics): ``on_call(outcome, seconds, attempt)``
        #: after every HTTP call, ``on_fallback(reason)`` when the rules decide instead
        self.on_call: Callable[[str, float, int], None] | None = None
        self.on_fallback: Callable[[str], None] | None = None

    def _told(self, outcome: str, seconds: float, attempt: int) -> None:
        if self.on_call is not None:
            self.on_call(outcome, seconds, attempt)

    def _fell_back(self, reason: str) -> None:
        self.fallbacks += 1
        if self.on_fallback is not None:
            self.on_fallback(reason)

    async def aclose(self) -> None:
        """Close the SDK's async and sync HTTP clients."""
        await self._client.aio.aclose()
        self._client.close()

    async def decide(self, exp: ExperienceState, device: DeviceState | None, trigger: Trigger) -> Verdict:
        """One verdict for ``trigger``; never raises for a model or network failure.

        With the decision budget spent, or the experience no longer active, the rules answer and
        no HTTP call is made (the core then drops the verdict with ``budget_exhausted`` or
        ``winding_down``)."""
        b = exp.budgets
        if exp.phase != "active" or b.decisions >= b.max_decisions:
            return rules.decide(exp, trigger)
        context = build_context(exp, device, trigger, registry=self.registry)
        outcome = await self.ask(system_instruction(exp), orjson.dumps(context).decode())
        if outcome.failure is not None:
            self._fell_back("call_failed")
            return fallback(exp, trigger, outcome.failure)
        answer = parse_answer(outcome.text)
        if isinstance(answer, str):
            self._fell_back("bad_answer")
            return fallback(exp, trigger, answer)
        verdict = verdict_from_answer(answer, exp, trigger, self.registry)
        if isinstance(verdict, str):
            self._fell_back("invalid_decision")
            return fallback(exp, trigger, verdict)
        return verdict

    def _config(self, system: str, timeout_s: float) -> types.GenerateContentConfig:
        return types.GenerateContentConfig(
            system_instruction=system,
            response_mime_type="application/json",
            response_schema=ModelAnswer,
            temperature=0,
            automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
            http_options=types.HttpOptions(timeout=max(1, int(timeout_s * 1000))),
        )

    async def ask(self, system: str, contents: str) -> CallOutcome:
        """Call the model with bounded retries (429, 5xx, timeouts, connection errors) and backoff,
        every call with a timeout, the whole within the decision deadline."""
        opts = self.options
        loop = asyncio.get_running_loop()
        deadline = loop.time() + opts.deadline_ms / 1000
        last = "no call made"
        attempts = 0
        for attempt in range(opts.retries + 1):
            remaining = deadline - loop.time()
            if remaining < MIN_ATTEMPT_S:
                return CallOutcome(
                    None, f"{last}; decision deadline of {opts.deadline_ms} ms reached", attempts
                )
            timeout_s = min(opts.timeout_ms / 1000, remaining)
            attempts += 1
            self.http_calls += 1
            began = loop.time()
            try:
                async with asyncio.timeout(timeout_s + CALL_GRACE_S):
                    response = await self._client.aio.models.generate_content(
                        model=self.model, contents=contents, config=self._config(system, timeout_s)
                    )
            except errors.ClientError as exc:
                if exc.code != 429:
                    self._told("http_4xx", loop.time() - began, attempts)
                    return CallOutcome(None, f"HTTP {exc.code} {exc.status or ''}".strip(), attempts)
                last = "HTTP 429"
                self._told("http_429", loop.time() - began, attempts)
            except errors.ServerError as exc:
                last = f"HTTP {exc.code} {exc.status or ''}".strip()
                self._told("http_5xx", loop.time() - began, attempts)
            except errors.APIError as exc:
                self._told("bad_response", loop.time() - began, attempts)
                return CallOutcome(None, f"HTTP {exc.code}", attempts)
            except (errors.UnknownApiResponseError, json.JSONDecodeError):
                self._told("bad_response", loop.time() - began, attempts)
                return CallOutcome(None, "response body is not JSON", attempts)
            except ValidationError:
                self._told("bad_response", loop.time() - began, attempts)
                return CallOutcome(None, "response body is not a generateContent response", attempts)
            except (httpx2.TimeoutException, TimeoutError):
                last = f"timeout after {round(timeout_s * 1000)} ms"
                self._told("timeout", loop.time() - began, attempts)
            except httpx2.TransportError as exc:
                last = f"connection error ({type(exc).__name__})"
                self._told("connection", loop.time() - began, attempts)
            else:
                self._told("ok", loop.time() - began, attempts)
                return CallOutcome(response.text, None, attempts)
            logger.info("gemini call %d failed: %s", attempts, last)
            if attempt < opts.retries:
                backoff = min(opts.backoff_ms * 2**attempt, opts.backoff_max_ms) / 1000
                await asyncio.sleep(max(0.0, min(backoff, deadline - loop.time() - MIN_ATTEMPT_S)))
        return CallOutcome(None, f"{last} after {attempts} call(s)", attempts)

"""The Gemini backend: one decision per trigger from a Gemini model, through ``google-genai``.

The model sees the context of docs/CONTRACTS.md §6.1 (:func:`supervisor.context.build_context`) and must
answer one JSON object (:class:`ModelAnswer`). Whatever it answers is checked twice: as JSON
against :class:`ModelAnswer` (``response.text`` is validated here; the SDK's ``parsed`` is silently
None on bad JSON), then against the state (:func:`verdict_from_answer`: ``ask_user`` needs a user
question left, ``replan`` a cloud replan, ``complete`` every success condition; replan steps are
validated like a plan). Anything wrong — an HTTP error, a timeout, the deadline, a malformed or
out-of-contract answer — ends in the rules' decision (:func:`supervisor.rules.decide`) with
``backend="fallback"`` and a ``fallback_reason`` that the timeline shows.

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
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import httpx2
import orjson
from google import genai
from google.genai import errors, types
from pydantic import BaseModel, Field, ValidationError

from config.settings import Settings, SettingsError
from supervisor import rules
from supervisor.checks import rationale_problem
from supervisor.context import build_context
from supervisor.verdict import RATIONALE_MAX, Verdict
from tables.state import DeviceState, ExperienceState, Trigger
from topics.records import ID_PATTERN, DecisionKind
from topics.registry import Registry, load_registry
from topics.steps import MODEL_EXPOSURES, exclusive_conflict, safety_actions, step_problem

logger = logging.getLogger(__name__)

API_VERSION = "v1beta"
#: The most steps a model replan may propose.
MAX_REPLAN_STEPS = 12
#: A per-call timeout shorter than this is not worth an HTTP call (the deadline is too close).
MIN_ATTEMPT_S = 0.05
#: How long past its HTTP timeout one call may run before it is cancelled (belt and braces).
CALL_GRACE_S = 0.25
FALLBACK_REASON_MAX = 160

_ID_RE = re.compile(ID_PATTERN)
_REASON_RE = r"^[a-z][a-z0-9_]{0,47}$"


class GeminiConfigError(SettingsError):
    """The Gemini backend cannot be configured (no API key, a bad GUARDIAN_GEMINI_* value). Set
    ``GEMINI_API_KEY`` (or ``GOOGLE_API_KEY``), or run with ``GUARDIAN_SUPERVISOR=rules``."""


# --------------------------------------------------------------------------------------------
# options
# --------------------------------------------------------------------------------------------


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


# --------------------------------------------------------------------------------------------
# the answer
# --------------------------------------------------------------------------------------------


class ProposedStep(BaseModel):
    """One step of a model replan (args: only ``area_id``, which ``movement.move_to_room`` needs)."""

    step_id: str = Field(max_length=64)
    capability: str = Field(max_length=64)
    operation: str = Field(max_length=64)
    area_id: str | None = Field(default=None, max_length=64)
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_REPLAN_STEPS)


class ModelAnswer(BaseModel):
    """What the model must answer (also its ``response_schema``)."""

    decision: DecisionKind
    reason_code: str = Field(pattern=_REASON_RE)
    rationale: str = Field(max_length=1000)
    replan_steps: list[ProposedStep] = Field(default_factory=list, max_length=MAX_REPLAN_STEPS)
    keep_areas: list[str] | None = Field(default=None, max_length=64)


def parse_answer(text: str | None) -> ModelAnswer | str:
    """The answer in ``text``, or why it is not one (no model text is quoted in the reason)."""
    if text is None or not text.strip():
        return "model answer is empty"
    try:
        return ModelAnswer.model_validate_json(text)
    except ValidationError as exc:
        err = exc.errors(include_url=False, include_input=False, include_context=False)[0]
        where = ".".join(str(p) for p in err["loc"])
        kind = err["type"]
        if kind == "json_invalid":
            return "model answer is not valid JSON"
        if where == "decision":
            return "model answer is outside the six decisions"
        return f"model answer invalid: {kind} at {where or 'top level'}"[:FALLBACK_REASON_MAX]


# --------------------------------------------------------------------------------------------
# validation against the state
# --------------------------------------------------------------------------------------------


def replan_requests(
    exp: ExperienceState, steps: list[ProposedStep], keep: set[str], registry: Registry
) -> list[dict[str, Any]] | str:
    """The dispatch requests of proposed replan steps, or why they cannot run.

    Like a plan (§3, §7): catalog capability and operation exposed to a planner (``GO``), in the
    plan's ``allowed_action_contracts`` (or a safety action), required args present and no
    others, areas among the remaining (and kept) areas only, unique step IDs that do not clash
    with the plan's, ``depends_on`` naming earlier steps, an exclusive resource (the camera) held
    at most once. The catalog part is :func:`topics.steps.step_problem`, as for plans and
    dispatches."""
    allowed = set(exp.plan.get("allowed_action_contracts") or ())
    safety = safety_actions(registry, exp.started_steps, exp.security_started)
    plan_steps = {s.get("step_id") for s in exp.plan.get("steps") or ()}
    remaining = set(exp.remaining_areas())
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for i, step in enumerate(steps):
        where = f"replan step {i + 1}"
        if not _ID_RE.fullmatch(step.step_id) or step.step_id in seen or step.step_id in plan_steps:
            return f"{where}: step_id is not a fresh ID"
        name = f"{step.capability}.{step.operation}"
        found = step_problem(
            registry,
            step.capability,
            step.operation,
            None,
            exposures=MODEL_EXPOSURES,
            allowed=allowed,
            safety=safety,
        )
        if found is not None:
            if found.kind == "catalog":
                return f"{where}: {name} is not in the capability catalog"[:FALLBACK_REASON_MAX]
            if found.kind == "exposure":
                return f"{where}: {name} is not exposed to a planner"
            return f"{where}: {found.problem}"[:FALLBACK_REASON_MAX]
        required = registry.capabilities[step.capability].operations[step.operation]
        args: dict[str, Any] = {}
        for arg in required:
            if arg != "area_id" or step.area_id is None:
                return f"{where}: {name} needs {arg}, which a model replan cannot give"
            args["area_id"] = step.area_id
        if step.area_id is not None:
            if "area_id" not in required:
                return f"{where}: {name} takes no area"
            if step.area_id not in remaining:
                return f"{where}: area is not a remaining area of the plan"
            if step.area_id not in keep:
                return f"{where}: area is not among keep_areas"
        for dep in step.depends_on:
            if dep not in seen:
                return f"{where}: depends_on names no earlier step"
        request: dict[str, Any] = {
            "step_id": step.step_id,
            "capability": step.capability,
            "operation": step.operation,
            "args": args,
        }
        if step.depends_on:
            request["depends_on"] = list(dict.fromkeys(step.depends_on))
        out.append(request)
        seen.add(step.step_id)
    held = exclusive_conflict(registry, [(step.capability, step.operation) for step in steps])
    if held is not None:
        return f"replan: resource_conflict, the {held} would be held twice"
    return out


def verdict_from_answer(
    answer: ModelAnswer, exp: ExperienceState, trigger: Trigger, registry: Registry
) -> Verdict | str:
    """The model's verdict, or why the state does not allow it."""
    decision = answer.decision
    budgets = exp.budgets
    steps: tuple[dict[str, Any], ...] = ()
    keep_areas: tuple[str, ...] | None = None
    if decision == "ask_user" and budgets.user_question <= 0:
        return "ask_user with no user question left"
    if decision == "complete" and not exp.success_met(deciding=trigger.event_id):
        return "complete before every success condition has physical evidence"
    # JSON mode often sends every optional list, empty: empty means none, only a non-empty one conflicts
    if decision != "replan" and (answer.replan_steps or answer.keep_areas):
        return f"replan steps or keep_areas with decision {decision}"
    if decision == "replan":
        if budgets.cloud_replan <= 0:
            return "replan with no cloud replan left"
        remaining = exp.remaining_areas()
        if not remaining:
            return "replan with no remaining area"
        keep = set(remaining)
        if answer.keep_areas:
            kept = list(dict.fromkeys(answer.keep_areas))
            if not set(kept) <= keep:
                return "keep_areas names an area that is not a remaining area"
            keep = set(kept)
            keep_areas = tuple(kept)
        requests = replan_requests(exp, answer.replan_steps, keep, registry)
        if isinstance(requests, str):
            return requests
        steps = tuple(requests)
    rationale = " ".join(answer.rationale.split())[:RATIONALE_MAX] or f"{decision} (model)"
    problem = rationale_problem(rationale)
    if problem is not None:
        return problem
    return Verdict(
        decision,
        answer.reason_code,
        rationale,
        backend="gemini",
        replan_steps=steps,
        keep_areas=keep_areas,
    )


def fallback(exp: ExperienceState, trigger: Trigger, reason: str) -> Verdict:
    """The rules' verdict, marked as a fallback with its reason (timeline text)."""
    return replace(
        rules.decide(exp, trigger),
        backend="fallback",
        fallback_reason=f"model fallback: {reason}"[:FALLBACK_REASON_MAX],
    )


# --------------------------------------------------------------------------------------------
# the prompt
# --------------------------------------------------------------------------------------------

_DECISIONS_TEXT = """\
Decisions (answer exactly one):
- continue: nothing to change; the patrol goes on.
- ask_user: ask the household one question (the pipeline words it from the room name); only while \
budgets.user_question > 0.
- replan: new steps for the remaining areas only; only while budgets.cloud_replan > 0. Give \
replan_steps (at most 12) using only allowed_actions, each area by its area_id from \
areas.remaining, depends_on naming earlier steps; optionally keep_areas, the remaining area_ids \
still to patrol. Leave replan_steps empty to let the pipeline move through the remaining areas.
- abort: stop everything started, then return to the station.
- return_to_station: stop the security session, then return to the station.
- complete: only when every area is patrolled, the security session is stopped and the robot \
is docked."""

_CONSTRAINTS_TEXT = """\
Constraints:
- The user's cancel always wins; it is handled before you and you are never asked about it.
- The device's own policy is authoritative: never propose an action outside allowed_actions.
- Bounded replan only: steps for the remaining areas, nothing else.
- Raw vision frames and personal data never enter this context; never ask for them or guess them.
- Stale domains are unknown, not false. device_context holds the device's own semantic state per \
domain with its freshness: a "stale" or "unavailable" domain is unknown, never current and never false.
Answer with one JSON object: decision, reason_code (short snake_case), rationale (at most 200 \
characters, room names in words, no IDs), and for replan only replan_steps / keep_areas."""


def system_instruction(exp: ExperienceState) -> str:
    """The system instruction: the goal, the six decisions, the constraints and the budgets."""
    goal = exp.plan.get("goal_summary")
    goal_text = " ".join(goal.split())[:200] if isinstance(goal, str) else "supervise the patrol"
    b = exp.budgets
    return (
        "You are the decision maker of Adaptive Home Guardian, supervising one home robot's "
        "security patrol while the household is away. You get one JSON context: the goal, phase, "
        "areas, domain states, the device context, budgets, allowed actions, the trigger to decide "
        f"and recent observations.\nGoal: {goal_text}\n\n{_DECISIONS_TEXT}\n\n{_CONSTRAINTS_TEXT}\n\n"
        f"Budgets now: {max(0, b.max_decisions - b.decisions)} decision(s) left, "
        f"{b.user_question} user question(s), {b.cloud_replan} cloud replan(s), "
        f"{b.local_retry} local retry(ies)."
    )


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

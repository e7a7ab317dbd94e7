"""One step of the core: what it is handed (the device, the decider) and what it makes (a
:class:`Result`), with the two things every step module does through it: drop a record with a
reason, and write a timeline entry (docs/CONTRACTS.md §8).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from supervisor.presenter import Language
from supervisor.verdict import Verdict
from tables.state import DeviceState, ExperienceState, Trigger
from topics.envelope import Out
from topics.hostile import Redactor
from topics.registry import Registry

#: Decider: rules (synchronous) for inline decisions; None queues triggers for an async backend.
Decider = Callable[[ExperienceState, Trigger], Verdict]
OwnerOf = Callable[[str], str | None]
#: (experience_id, device_id, received_at_ms) -> may the device's plan take the free experience ID
#: (False: the device's claim rate refuses it, docs/CONTRACTS.md §2 rule 12)
ClaimOf = Callable[[str, str, int], bool]


@dataclass(slots=True)
class RawRef:
    """Where an input record came from (for dead letters the core writes itself)."""

    source_topic: str
    partition: int
    offset: int
    value: bytes


@dataclass(slots=True)
class Result:
    """What one step of the core did."""

    outs: list[Out] = field(default_factory=list)
    #: the experience state to store for the device (None: unchanged / none)
    experience: ExperienceState | None = None
    #: remember this event ID as seen (dedup memory)
    mark_seen: bool = False
    #: a plan was accepted: (experience_id, device_id) for the cross-device index
    owner: tuple[str, str] | None = None
    #: triggers promoted but not decided yet (async backend)
    queued: list[Trigger] = field(default_factory=list)
    #: after the step: when something of the device falls due on the receive-time clock (a pending
    #: debounce change or a precondition deadline), or None
    next_due_ms: int | None = None
    #: after the step: the experience's etag (0: no experience), the version a queued trigger is
    #: decided on
    etag: int = 0


class Core(Protocol):
    """What a step reads of the pipeline's fixed parts (:class:`pipeline.core.Pipeline` is one)."""

    registry: Registry
    language: Language
    redactor: Redactor
    dedup_window_ms: int

    def is_duplicate(self, seen_at: int | None, received_at_ms: int) -> bool: ...


@dataclass(slots=True)
class Step:
    """The context of one call of the core: the pipeline's fixed parts, the device, the result
    being built and the decider (None: promoted triggers wait for an asynchronous backend)."""

    core: Core
    dev: DeviceState
    res: Result
    decide: Decider | None = None
    #: the experience→device index (§2 rule 9), for the cross-device checks
    owner_of: OwnerOf | None = None
    #: the claim of a free experience ID (§2 rule 12); None: every claim is allowed
    claim_of: ClaimOf | None = None

    def owner(self, experience_id: str) -> str | None:
        """The device whose plan first used ``experience_id`` (§2 rule 9), if it is known."""
        return self.owner_of(experience_id) if self.owner_of is not None else None

    def timeline(
        self,
        *,
        experience_id: str | None,
        at_ms: int,
        stage: str,
        ref_id: str,
        summary: str,
        drop_reason: str | None = None,
        status: str | None = None,
    ) -> None:
        """A timeline entry of the device (its sequence number is the device's next)."""
        dev = self.dev
        dev.timeline_seq += 1
        entry: dict[str, Any] = {
            "device_id": dev.device_id,
            "experience_id": experience_id,
            "seq": dev.timeline_seq,
            "at_ms": at_ms,
            "stage": stage,
            "ref_id": ref_id,
            "summary": summary[:300],
            "drop_reason": drop_reason,
        }
        if stage == "end":
            entry["status"] = status
        self.res.outs.append(Out("timeline", dev.device_id, entry))

    def drop(
        self, reason: str, ref_id: str, at_ms: int, summary: str, experience_id: str | None = None
    ) -> None:
        """A record (or a decision, a dispatch) stops here: a ``drop`` entry with its reason, under
        the device's active experience unless another is named."""
        self.timeline(
            experience_id=self.dev.active_experience_id if experience_id is None else experience_id,
            at_ms=at_ms,
            stage="drop",
            ref_id=ref_id,
            summary=summary,
            drop_reason=reason,
        )

    def end(self, exp: ExperienceState, status: str, at_ms: int, why: str) -> None:
        """End ``exp`` with ``status``: its ``end`` entry, and the device forgets it as active."""
        exp.phase, exp.status = "ended", status
        exp.etag += 1
        self.timeline(
            experience_id=exp.experience_id,
            at_ms=at_ms,
            stage="end",
            ref_id=exp.experience_id,
            summary=f"end: {status} ({why})",
            status=status,
        )
        dev = self.dev
        if dev.active_experience_id == exp.experience_id:
            dev.active_experience_id = None
            dev.precondition_due_ms = None
        dev.remember_ended(exp.experience_id, status)

    def done(self) -> Result:
        """The result, with what the shell needs after the step (next due time, etag)."""
        res = self.res
        res.next_due_ms = self.dev.next_due_ms()
        res.etag = res.experience.etag if res.experience is not None else 0
        return res


def active(dev: DeviceState, exp: ExperienceState | None) -> ExperienceState | None:
    """The device's running experience (not ended, not waiting for its preconditions)."""
    if exp is None or exp.phase in ("ended", "pending") or dev.active_experience_id != exp.experience_id:
        return None
    return exp


def summary_facts(facts: dict[str, Any]) -> str:
    return " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in sorted(facts.items()))

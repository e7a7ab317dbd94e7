"""A decision from outside the rules, checked like a model answer (docs/CONTRACTS.md §6, §12).

``guardian replay --decisions recorded`` reuses the decisions of an export; an export is input like
any other, so a recorded decision is trusted only as far as a model's answer is: one of the six
decisions, allowed by the budgets and the state (``ask_user`` needs a user question left,
``replan`` a cloud replan and a remaining area, ``complete`` every success condition evidenced),
a ``reason_code`` that is an ID, and a rationale of at most 200 printable characters that names
no key outside the allowlist. Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from supervisor.verdict import RATIONALE_MAX, Verdict
from tables.state import ExperienceState, Trigger
from topics.gate import printable
from topics.hostile import is_forbidden_key
from topics.records import BACKENDS, DECISIONS, ID_PATTERN, Backend, DecisionKind

_ID_RE = re.compile(ID_PATTERN)
_WORD_RE = re.compile(r"\w+")


def state_problem(decision: str, exp: ExperienceState, trigger: Trigger) -> str | None:
    """Why the state does not allow ``decision`` for ``trigger`` (budgets, evidence), or None."""
    budgets = exp.budgets
    if decision == "ask_user" and budgets.user_question <= 0:
        return "ask_user with no user question left"
    if decision == "replan":
        if budgets.cloud_replan <= 0:
            return "replan with no cloud replan left"
        if not exp.remaining_areas():
            return "replan with no remaining area"
    if decision == "complete" and not exp.success_met(deciding=trigger.event_id):
        return "complete before every success condition has physical evidence"
    return None


def rationale_problem(rationale: object) -> str | None:
    """Why ``rationale`` breaks §6's rules (at most 200 visible characters, §2 rule 10, no key
    outside the allowlist quoted), or None."""
    if not isinstance(rationale, str):
        return "rationale is not text"
    if len(rationale) > RATIONALE_MAX:
        return f"rationale longer than {RATIONALE_MAX} characters"
    if not printable(rationale):
        return "rationale holds an invisible, control or bidirectional character"
    if any(is_forbidden_key(word) for word in _WORD_RE.findall(rationale)):
        return "rationale names a key outside the allowlist"
    return None


def recorded_verdict(recorded: Mapping[str, Any], exp: ExperienceState, trigger: Trigger) -> Verdict | str:
    """The verdict of a recorded decision, or why it is not one the contract allows here."""
    decision = recorded.get("decision")
    if decision not in DECISIONS:
        return "decision is not one of the six"
    reason_code = recorded.get("reason_code")
    if not isinstance(reason_code, str) or _ID_RE.fullmatch(reason_code) is None:
        return "reason_code is not an ID"
    rationale = recorded.get("rationale")
    problem = rationale_problem(rationale) or state_problem(str(decision), exp, trigger)
    if problem is not None:
        return problem
    backend = recorded.get("backend")
    return Verdict(
        decision=cast(DecisionKind, decision),
        reason_code=reason_code,
        rationale=str(rationale),
        backend=cast(Backend, backend) if backend in BACKENDS else "rules",
    )


__all__ = ["rationale_problem", "recorded_verdict", "state_problem"]

"""The deterministic rules of docs/CONTRACTS.md §6.2 (backend ``rules``, the default)."""

from __future__ import annotations

from supervisor.verdict import Verdict
from tables.state import ExperienceState, Trigger


def _where(exp: ExperienceState, trigger: Trigger) -> str:
    area = trigger.facts.get("area_id")
    if isinstance(area, str):
        return exp.area_name(area) or "one area"
    return "the home"


def _failed_verification(exp: ExperienceState, trigger: Trigger, what: str, reason: str) -> Verdict:
    where = _where(exp, trigger)
    if exp.budgets.user_question > 0:
        return Verdict(
            "ask_user",
            reason,
            f"{what} in {where}; asking the user ({exp.budgets.user_question} question left).",
        )
    return Verdict(
        "return_to_station",
        "user_question_budget_spent",
        f"{what} in {where} and no user question left; returning to the station.",
    )


def decide(exp: ExperienceState, trigger: Trigger) -> Verdict:
    """The §6.2 table, top to bottom; the first matching row decides."""
    facts = trigger.facts
    kind = trigger.type
    if kind == "security.condition_changed":
        battery = facts.get("battery")
        if battery in ("low", "critical"):
            return Verdict(
                "return_to_station", f"battery_{battery}", f"Battery {battery}; stopping and returning."
            )
    if kind == "security.session_state_changed" and (
        facts.get("session_state") == "error" or facts.get("result") == "failed"
    ):
        return Verdict(
            "return_to_station", "security_session_error", "Security session failed; returning to station."
        )
    if kind == "security.verification_result":
        outcome = facts.get("outcome")
        if outcome == "passed":
            return Verdict("continue", "verification_passed", "Verification passed; patrol continues.")
        if outcome == "failed" and facts.get("terminal", True) is not False:
            return _failed_verification(exp, trigger, "Verification failed", "verification_failed")
    if kind == "security.verification_timed_out":
        return _failed_verification(exp, trigger, "Verification timed out", "verification_timed_out")
    if kind == "security.person_detected" and facts.get("presence") == "detected":
        state = facts.get("verification_state", "none")
        if state in ("pending", "none"):
            return Verdict(
                "continue",
                "person_pending_verification",
                f"Person in {_where(exp, trigger)}; the device verifies locally.",
            )
        if state == "failed":
            return _failed_verification(exp, trigger, "Unverified person", "verification_failed")
    if kind == "vision.low_light_changed" and facts.get("low_light") is True:
        remaining = exp.remaining_areas()
        if exp.budgets.cloud_replan > 0 and remaining:
            return Verdict(
                "replan",
                "low_light",
                f"Low light; replanning the {len(remaining)} remaining area(s).",
            )
        return Verdict("continue", "low_light_no_replan", "Low light; no replan left, patrol continues.")
    return Verdict("continue", "routine", f"{kind}: nothing to change; patrol continues.")

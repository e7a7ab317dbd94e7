"""What the Gemini model must answer (:class:`ModelAnswer`, also its ``response_schema``) and
:func:`parse_answer`, which checks a model's text against it."""

from __future__ import annotations

from pydantic import BaseModel, Field, ValidationError

from topics.records import DecisionKind

#: The most steps a model replan may propose.
MAX_REPLAN_STEPS = 12
FALLBACK_REASON_MAX = 160

_REASON_RE = r"^[a-z][a-z0-9_]{0,47}$"


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

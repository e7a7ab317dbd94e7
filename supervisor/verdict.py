"""What a backend answers: one of the six decisions, with its reason and (for a replan) steps."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from topics.records import Backend, DecisionKind

RATIONALE_MAX = 200


@dataclass(frozen=True, slots=True)
class Verdict:
    decision: DecisionKind
    reason_code: str
    rationale: str
    backend: Backend = "rules"
    #: for ``replan``: requests proposed by a model (validated like a plan before use)
    replan_steps: tuple[dict[str, Any], ...] = ()
    #: for ``replan``: the areas the model keeps (a replan may drop areas); None keeps them all
    keep_areas: tuple[str, ...] | None = None
    #: why the rules decided instead of the model (timeline text), for ``fallback``
    fallback_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The JSON form a verdict travels in (the ``verdict`` control record)."""
        return {
            "decision": self.decision,
            "reason_code": self.reason_code,
            "rationale": self.clipped_rationale(),
            "backend": self.backend,
            "replan_steps": [dict(s) for s in self.replan_steps],
            "keep_areas": list(self.keep_areas) if self.keep_areas is not None else None,
            "fallback_reason": self.fallback_reason,
        }

    @classmethod
    def from_dict(cls, v: dict[str, Any]) -> Verdict:
        return cls(
            decision=v["decision"],
            reason_code=v["reason_code"],
            rationale=v["rationale"],
            backend=v["backend"],
            replan_steps=tuple(v.get("replan_steps") or ()),
            keep_areas=tuple(v["keep_areas"]) if v.get("keep_areas") is not None else None,
            fallback_reason=v.get("fallback_reason"),
        )

    def clipped_rationale(self) -> str:
        text = " ".join(self.rationale.split())
        return text if len(text) <= RATIONALE_MAX else text[: RATIONALE_MAX - 1] + "…"

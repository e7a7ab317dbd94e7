"""A replay's summary (docs/CONTRACTS.md §12, ``summary.json``): :class:`SummaryCounts`, the outputs
counted as they stream by (per output, drop reason, dead-letter reason, decision kind and backend)
with each experience's status; the counts of ``--jobs N``'s jobs merge into one."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

#: the outputs, in the order of their files
OUT_KINDS = ("decisions", "dispatch", "timeline", "deadletter")


@dataclass
class SummaryCounts:
    """Counts per output and per drop reason, and each experience's status (§12); mergeable."""

    counts: Counter[str] = field(default_factory=Counter)
    drops: Counter[str] = field(default_factory=Counter)
    deadletters: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    backends: Counter[str] = field(default_factory=Counter)
    experiences: dict[str, str] = field(default_factory=dict)
    divergences: int = 0

    def add(self, kind: str, value: dict[str, Any]) -> None:
        self.counts[kind] += 1
        if kind == "timeline":
            exp_id = value.get("experience_id")
            stage = value.get("stage")
            if stage == "drop":
                self.drops[value["drop_reason"]] += 1
            if not exp_id:
                return
            if stage == "end":
                self.experiences[exp_id] = str(value.get("status"))
            else:  # a goal, or a plan waiting for its preconditions (its refresh dispatch)
                self.experiences.setdefault(exp_id, "active")
        elif kind == "deadletter":
            self.deadletters[value["reason_code"]] += 1
        elif kind == "decisions":
            self.kinds[value["decision"]] += 1
            self.backends[value["backend"]] += 1

    def merge(self, other: SummaryCounts) -> None:
        for mine, theirs in (
            (self.counts, other.counts),
            (self.drops, other.drops),
            (self.deadletters, other.deadletters),
            (self.kinds, other.kinds),
            (self.backends, other.backends),
        ):
            mine.update(theirs)
        for exp_id, status in other.experiences.items():
            if exp_id not in self.experiences or status != "active":
                self.experiences[exp_id] = status
        self.divergences += other.divergences

    def summary(self, mode: str) -> dict[str, Any]:
        return {
            "decisions_mode": mode,
            "counts": {k: self.counts.get(k, 0) for k in OUT_KINDS},
            "drop_reasons": dict(sorted(self.drops.items())),
            "deadletter_reasons": dict(sorted(self.deadletters.items())),
            "decisions_by_kind": dict(sorted(self.kinds.items())),
            "decisions_by_backend": dict(sorted(self.backends.items())),
            "experiences": dict(sorted(self.experiences.items())),
            "divergences": self.divergences,
        }

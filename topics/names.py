"""Topic names of docs/CONTRACTS.md §1 under a configurable prefix."""

from __future__ import annotations

from dataclasses import dataclass

#: The suffixes of §1, in the tie-break order replay uses for inputs (§12) followed by the outputs.
INPUT_SUFFIXES = ("plans", "device-context", "task-events", "observations")
OUTPUT_SUFFIXES = ("decisions", "dispatch", "timeline", "deadletter")
#: Guardian's own internal topic (timer ticks and asynchronous verdicts), co-partitioned with the rest.
INTERNAL_SUFFIXES = ("control",)
CONTRACT_SUFFIXES = INPUT_SUFFIXES + OUTPUT_SUFFIXES
ALL_SUFFIXES = CONTRACT_SUFFIXES + INTERNAL_SUFFIXES
#: Guardian's experience claims (one partition, never compacted nor expired; ``tables.claims``)
CLAIMS_SUFFIX = "claims"


@dataclass(frozen=True)
class TopicNames:
    """The full topic names for one prefix (default ``guardian.``)."""

    prefix: str = "guardian."

    @property
    def plans(self) -> str:
        return self.prefix + "plans"

    @property
    def observations(self) -> str:
        return self.prefix + "observations"

    @property
    def task_events(self) -> str:
        return self.prefix + "task-events"

    @property
    def device_context(self) -> str:
        return self.prefix + "device-context"

    @property
    def decisions(self) -> str:
        return self.prefix + "decisions"

    @property
    def dispatch(self) -> str:
        return self.prefix + "dispatch"

    @property
    def timeline(self) -> str:
        return self.prefix + "timeline"

    @property
    def deadletter(self) -> str:
        return self.prefix + "deadletter"

    @property
    def control(self) -> str:
        return self.prefix + "control"

    @property
    def claims(self) -> str:
        return self.prefix + CLAIMS_SUFFIX

    def all(self) -> list[str]:
        """Every topic of §1, plus the internal control topic."""
        return [self.prefix + s for s in ALL_SUFFIXES]

    def contract_topics(self) -> list[str]:
        """The topics of §1 only."""
        return [self.prefix + s for s in CONTRACT_SUFFIXES]

    def suffix_of(self, topic: str) -> str | None:
        """The §1 suffix of a full topic name, or None when it is not one of ours."""
        if topic.startswith(self.prefix):
            rest = topic[len(self.prefix) :]
            if rest in ALL_SUFFIXES:
                return rest
        return None

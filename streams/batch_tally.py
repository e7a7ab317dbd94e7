"""What one batch read and produced (:class:`BatchTally`), counted by the shell from what the core
returns and added to the worker's metrics (:mod:`streams.metrics`) once the batch is delivered."""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from topics.envelope import Out


@dataclass
class BatchTally:
    """What one batch read and produced, added to the counters once the batch is delivered."""

    inputs: Tally[str] = field(default_factory=Tally)
    outputs: Tally[str] = field(default_factory=Tally)
    dead_letters: Tally[str] = field(default_factory=Tally)
    drops: Tally[str] = field(default_factory=Tally)
    decisions: Tally[tuple[str, str]] = field(default_factory=Tally)
    #: receive time (ms) of the trigger of each dispatch
    dispatch_triggers: list[int] = field(default_factory=list)
    #: the batch's dispatches in the latency trace (``LatencyTrace``; empty when it is off)
    traced: list[dict[str, Any]] = field(default_factory=list)
    #: wall-clock times the batch's flush started and handed everything to the producer
    sent_at: tuple[float, float] = (0.0, 0.0)

    def trace(self, entry: dict[str, Any] | None) -> None:
        if entry is not None:
            self.traced.append(entry)

    def outs(self, outs: Iterable[Out], trigger_received_ms: int | None) -> None:
        for out in outs:
            self.outputs[out.kind] += 1
            value = out.value
            if out.kind == "deadletter":
                self.dead_letters[str(value.get("reason_code"))] += 1
            elif out.kind == "timeline":
                if value.get("stage") == "drop":
                    self.drops[str(value.get("drop_reason"))] += 1
            elif out.kind == "decisions":
                self.decisions[(str(value.get("decision")), str(value.get("backend")))] += 1
            elif out.kind == "dispatch" and trigger_received_ms is not None:
                self.dispatch_triggers.append(trigger_received_ms)

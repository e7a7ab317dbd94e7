"""Where what the core gives back leaves the shell (:class:`Outlets`): each output kind's topic, the
``control`` topic, and the asynchronous decider that takes the triggers the core queues."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from tables.state import Trigger

#: an asynchronous decider: (device_id, partition, trigger, etag) -> None
VerdictSink = Callable[[str, int, Trigger, int], None]


@dataclass
class Outlets:
    """The shell's ways out: the output topics by kind, the ``control`` topic (faust's, sent to with
    ``send_soon``) and the asynchronous decider (``streams.lanes``; None: triggers are not decided
    asynchronously, e.g. the rules backend or unit tests)."""

    #: output kind ("decisions", "dispatch", "timeline", "deadletter") -> topic name
    topics: dict[str, str] = field(default_factory=dict)
    control: Any = None
    submit: VerdictSink | None = None

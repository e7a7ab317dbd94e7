"""A scenario as a device plays it: pure data (:class:`Story`), built from a seeded RNG.

A story is beats anchored to a point of the patrol (the n-th area the device patrols, a fraction of
the way through it), each beat a small device action (an observation, an invalid record, a
disconnect, a bridge restart, a device-context snapshot, ...) at an offset after its anchor; and,
for the device-context stories, what the device says about itself before its plan and how it
answers a ``device_context.refresh``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: Beat kinds a device knows how to play.
BEAT_KINDS = (
    "observe",  # params: type, facts, scoped (bool), cross_device (bool), person (bool)
    "state",  # params: fact changes of the device's own state (low_light, voice, person)
    "invalid",  # params: variant (bbox, nested_pin, unknown_contract, too_large, not_json)
    "disconnect",  # the AWS IoT session drops: the outbox buffers
    "reconnect",  # the session returns: the buffer is relayed (late)
    "restart",  # the device bridge restarts: its outbox relays the last 50 records again
    "context",  # params: domains (a device_context.v2 snapshot, see simulator.context_snapshot)
)

#: Domain specs of a device_context.v2 snapshot: name -> {"data": ..., envelope fields}.
Domains = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True)
class Beat:
    """One device action ``after_ms`` (simulated) after its anchor."""

    after_ms: int
    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Anchor:
    """Beats that start when the device is ``fraction`` of the way through its ``leg``-th area (0-based)."""

    leg: int
    fraction: float
    beats: tuple[Beat, ...]


@dataclass(frozen=True)
class Story:
    """A scenario as the device plays it."""

    scenario: str
    anchors: tuple[Anchor, ...] = ()
    #: the device pairs with another device's experience (HG-12)
    needs_partner: bool = False
    #: the plan the planner sends: "patrol" (the guardian plan) or "air_care" (HG-13..HG-16)
    plan: str = "patrol"
    #: the plan's ``on_unknown`` (air care)
    on_unknown: str | None = None
    #: action contracts the patrol plan allows besides its own (HG-15)
    extra_allowed: tuple[str, ...] = ()
    #: a snapshot the device sends just before its plan (None: none)
    context_first: Domains | None = None
    #: how the device answers a ``device_context.refresh``: after ``refresh_delay_ms``, with these
    #: domains (None: its own snapshot); never when ``answers_refresh`` is False
    refresh_reply: Domains | None = None
    refresh_delay_ms: int = 0
    answers_refresh: bool = True
    #: the device sends its own snapshots (battery, map, movement) while it runs (HG-04-B: never)
    sends_context: bool = True

    def anchors_for(self, leg: int) -> list[Anchor]:
        return [a for a in self.anchors if a.leg == leg]

"""Device context v2 (docs/CONTRACTS.md §9.1): the domain table, data validation and the kept envelope.

The table says, per domain, its default TTL and the data keys it may carry with their type; a key
marked *grounding* or *evidence* is accepted but never projected to a planner (§9.3). The gate
checks every admitted snapshot's ``data`` against it (:func:`data_problems`: an unlisted key or a
bad value is ``fact_invalid``; forbidden keys were already refused as ``privacy_violation``), then
its times (:func:`skewed_paths`: one more than 5 s after the receive time is ``clock_skew``).

:class:`KeptEnvelope` is what the pipeline keeps per device and domain: the newest envelope
(greatest ``freshness.observed_at_ms``, ties: greater ``provenance.sequence``), its TTL the
device's within the domain's default. Its freshness is never stored: :meth:`KeptEnvelope.age_ms`
and :meth:`KeptEnvelope.is_fresh` compute it at the moment of evaluation on the receive-time
clock, so a replay agrees with the live run.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from topics.hostile import safe_path
from topics.records import ID_PATTERN, MAX_FACT_STR_LEN, DeviceContext, DomainEnvelope
from topics.text import visible

KeyType = Literal["enum", "str", "id", "bool", "int", "number", "area_list"]
KeyRole = Literal["state", "grounding", "evidence"]

#: The most areas a ``map.areas`` list may hold.
MAX_MAP_AREAS = 64
#: A snapshot observed more than this after its receive time is refused (``clock_skew``), and an
#: envelope observed more than this after the evaluation time is never current (the same bound as
#: an observation's, §4.3 step 6).
MAX_CLOCK_SKEW_MS = 5_000
_ID_RE = re.compile(ID_PATTERN)


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One data key of a domain: its type (and values), and whether a planner may see it."""

    type: KeyType
    values: tuple[str, ...] = ()
    min: int | None = None
    max: int | None = None
    role: KeyRole = "state"

    @property
    def projected(self) -> bool:
        """A *grounding* or *evidence* key is kept for admission and evidence, never projected."""
        return self.role == "state"

    def allows(self, value: object) -> bool:
        """True when ``value`` (parsed JSON) is a valid value of this key."""
        if self.type == "bool":
            return type(value) is bool
        if self.type == "enum":
            return type(value) is str and value in self.values
        if self.type == "id":
            return isinstance(value, str) and type(value) is str and _ID_RE.fullmatch(value) is not None
        if self.type == "str":
            return isinstance(value, str) and type(value) is str and _printable(value)
        if self.type == "int":
            return (
                isinstance(value, int)
                and type(value) is int
                and (self.min is None or value >= self.min)
                and (self.max is None or value <= self.max)
            )
        if self.type == "number":
            return isinstance(value, int | float) and type(value) is not bool and math.isfinite(value)
        return _area_list(value)


@dataclass(frozen=True, slots=True)
class DomainSpec:
    name: str
    default_ttl_ms: int
    keys: Mapping[str, KeySpec]


def _printable(text: str) -> bool:
    """A short visible text (:func:`topics.text.visible`: no control, format or invisible character)."""
    return 0 < len(text) <= MAX_FACT_STR_LEN and visible(text)


def _area_list(value: object) -> bool:
    if type(value) is not list or len(value) > MAX_MAP_AREAS:
        return False
    seen: set[str] = set()
    for item in value:
        if type(item) is not dict or item.keys() != {"area_id", "area_name"}:
            return False
        area_id, area_name = item["area_id"], item["area_name"]
        if type(area_id) is not str or _ID_RE.fullmatch(area_id) is None or area_id in seen:
            return False
        if type(area_name) is not str or not _printable(area_name):
            return False
        seen.add(area_id)
    return True


def _enum(*values: str) -> KeySpec:
    return KeySpec("enum", values)


_BOOL = KeySpec("bool")
_ID = KeySpec("id")
_SHORT_ENUM = KeySpec("id")  # the voice pipeline's short enum strings (§4.1: an ID-like string)
_GROUNDING = KeySpec("number", role="grounding")
_EVIDENCE_NUMBER = KeySpec("number", role="evidence")
_LEVEL = KeySpec("int", min=0, max=100, role="evidence")
_NON_NEG_INT = KeySpec("int", min=0)
_SESSION_STATES = ("starting", "running", "paused", "stopping", "stopped", "error")
_LOAD = _enum("ok", "high", "critical")


def _domain(name: str, ttl: int, **keys: KeySpec) -> DomainSpec:
    return DomainSpec(name, ttl, MappingProxyType(keys))


#: §9.1's table: domain -> default TTL and data keys.
DOMAIN_TABLE: Mapping[str, DomainSpec] = MappingProxyType(
    {
        d.name: d
        for d in (
            _domain(
                "movement",
                5000,
                state=_enum("idle", "moving", "paused", "arrived", "returning", "docked"),
                current_area_id=_ID,
                x=_GROUNDING,
                y=_GROUNDING,
                theta=_GROUNDING,
            ),
            _domain("map", 600_000, areas=KeySpec("area_list"), map_edit_active=_BOOL),
            _domain(
                "battery",
                60_000,
                level_pct=_LEVEL,
                charging=_BOOL,
                estimated_work_budget=_enum("low", "medium", "high"),
            ),
            _domain(
                "air_quality",
                300_000,
                grade=_enum("good", "moderate", "bad", "very_bad"),
                trend=_enum("improving", "steady", "worsening"),
                main_cause=_enum("pm", "co2", "voc", "unknown"),
                pm25=_EVIDENCE_NUMBER,
                pm10=_EVIDENCE_NUMBER,
                co2_ppm=_EVIDENCE_NUMBER,
            ),
            _domain("vision", 2000, person_present=_BOOL, low_light=_BOOL),
            _domain(
                "security",
                5000,
                session_state=_enum(*_SESSION_STATES),
                stage=_enum("idle", "patrolling", "verifying", "paused"),
                current_area_id=_ID,
                low_battery_pause=_BOOL,
            ),
            _domain("streaming", 5000, live_view_active=_BOOL),
            _domain(
                "voice_llm",
                10_000,
                pipeline_state=_SHORT_ENUM,
                output_state=_SHORT_ENUM,
                reasoning_backend=_SHORT_ENUM,
                pipeline_busy=_BOOL,
                voice_session_active=_BOOL,
                model_readiness=_enum("unknown", "ready", "not_ready"),
                tts_playing=_BOOL,
            ),
            _domain(
                "network",
                10_000,
                aws_iot_connected_cached=_BOOL,
                last_success_ms=_NON_NEG_INT,
                last_error=_enum("none", "timeout", "auth", "dns", "unknown"),
            ),
            _domain("schedule", 60_000, busy=_BOOL, next_run_ms=_NON_NEG_INT, missed_run=_BOOL),
            _domain("vital_sign", 5000, session_active=_BOOL),
            _domain("resource", 10_000, cpu=_LOAD, ram=_LOAD, thermal=_LOAD),
        )
    }
)

#: Domains never projected to a planner (``live_view`` is NO_GO).
NEVER_PROJECTED: frozenset[str] = frozenset({"streaming"})


def data_problems(domain: str, data: Mapping[str, Any]) -> list[str]:
    """The paths (``domains.<d>.data.<key>``) of unlisted keys and bad values in ``data``; a key
    that is not an identifier is named by its hash (§10)."""
    spec = DOMAIN_TABLE.get(domain)
    if spec is None:
        return [safe_path(("domains", domain))]
    bad: list[str] = []
    for key, value in data.items():
        kspec = spec.keys.get(key)
        if kspec is None or not kspec.allows(value):
            bad.append(safe_path(("domains", domain, "data", key)))
    return bad


def skewed_paths(ctx: DeviceContext, received_at_ms: int) -> list[str]:
    """The paths of the snapshot's times observed more than :data:`MAX_CLOCK_SKEW_MS` after its
    receive time (the record's Kafka timestamp, as for an observation's ``clock_skew``, §4.3 step
    6): the snapshot's ``observed_at_ms`` and each domain's ``freshness.observed_at_ms``. A
    snapshot with one is refused (§9.1): kept, a future time would stay the newest for years."""
    limit = received_at_ms + MAX_CLOCK_SKEW_MS
    bad = ["observed_at_ms"] if ctx.observed_at_ms > limit else []
    for name, env in ctx.domains.items():
        observed = env.freshness.observed_at_ms
        if observed is not None and observed > limit:
            bad.append(f"domains.{name}.freshness.observed_at_ms")
    return bad


@dataclass(frozen=True, slots=True)
class KeptEnvelope:
    """The envelope the pipeline keeps for one domain of one device (its newest)."""

    observed_at_ms: int
    sequence: int | None
    ttl_ms: int
    available: bool
    exposure: str
    sensitivity: str
    data: Mapping[str, Any]

    @classmethod
    def of(cls, domain: str, env: DomainEnvelope, snapshot_observed_at_ms: int) -> KeptEnvelope:
        """The envelope as kept: its TTL is the device's ``ttl_ms`` within the domain's default
        (the smaller of the two, as for an observation's, §4.1), so no envelope stays fresh for
        longer than its domain allows."""
        fr = env.freshness
        default_ttl = DOMAIN_TABLE[domain].default_ttl_ms
        ttl = default_ttl if fr.ttl_ms is None else min(fr.ttl_ms, default_ttl)
        return cls(
            observed_at_ms=fr.observed_at_ms if fr.observed_at_ms is not None else snapshot_observed_at_ms,
            sequence=env.provenance.sequence if env.provenance is not None else None,
            ttl_ms=ttl,
            available=env.available,
            exposure=env.planner_exposure,
            sensitivity=env.sensitivity,
            data=MappingProxyType(dict(env.data)),
        )

    def newer_than(self, other: KeptEnvelope | None) -> bool:
        """§9.1 ordering: greater ``observed_at_ms``; ties: greater ``provenance.sequence``."""
        if other is None:
            return True
        if self.observed_at_ms != other.observed_at_ms:
            return self.observed_at_ms > other.observed_at_ms
        mine = self.sequence if self.sequence is not None else -1
        theirs = other.sequence if other.sequence is not None else -1
        return mine > theirs

    def age_ms(self, now_ms: int) -> int:
        """Age on the receive-time clock (never negative)."""
        return max(0, now_ms - self.observed_at_ms)

    def is_fresh(self, now_ms: int) -> bool:
        return not self.skewed(now_ms) and self.age_ms(now_ms) <= self.ttl_ms

    def skewed(self, now_ms: int) -> bool:
        """Observed more than 5 s after ``now_ms``: the device's clock is ahead; never current."""
        return self.observed_at_ms > now_ms + MAX_CLOCK_SKEW_MS

    def to_list(self) -> list[Any]:
        return [
            self.observed_at_ms,
            self.sequence,
            self.ttl_ms,
            self.available,
            self.exposure,
            self.sensitivity,
            dict(self.data),
        ]

    @classmethod
    def from_list(cls, v: list[Any]) -> KeptEnvelope:
        return cls(v[0], v[1], v[2], v[3], v[4], v[5], MappingProxyType(dict(v[6])))


#: Device context as the evaluator and the projector read it: domain -> kept envelope.
ContextView = Mapping[str, KeptEnvelope]

__all__ = [
    "DOMAIN_TABLE",
    "MAX_CLOCK_SKEW_MS",
    "MAX_MAP_AREAS",
    "NEVER_PROJECTED",
    "ContextView",
    "DomainSpec",
    "KeptEnvelope",
    "KeySpec",
    "data_problems",
    "skewed_paths",
]

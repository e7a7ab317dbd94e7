"""The typed, frozen objects of the observation contract registry (docs/CONTRACTS.md §4.1) and the
capability catalog (§11): ``FactSpec``, ``DebounceSpec``, ``ContractSpec``, ``CapabilitySpec``,
``Registry``, their value sets, and ``RegistryError``."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, get_args

from topics.records import MAX_FACT_STR_LEN

FactType = Literal["bool", "str", "int"]
Scope = Literal["unscoped", "scoped", "device"]
Exposure = Literal["GO", "GO_USER_CHECKPOINT", "NO_GO"]
ArgType = Literal["str", "str_list"]
Scalar = bool | int | str

FACT_TYPES: tuple[str, ...] = get_args(FactType)
SCOPES: tuple[str, ...] = get_args(Scope)
EXPOSURES: tuple[str, ...] = get_args(Exposure)
ARG_TYPES: tuple[str, ...] = get_args(ArgType)


class RegistryError(ValueError):
    """A registry file is missing, is not JSON, or has a broken entry. The message names the file
    and the entry (``contracts.json: <contract>.facts.<fact>: <problem>``): fix that entry."""


@dataclass(frozen=True, slots=True)
class FactSpec:
    """One allowlisted fact: its type and its allowed values."""

    name: str
    type: FactType
    enum: frozenset[str] | None = None
    min: int | None = None
    max: int | None = None
    pattern: re.Pattern[str] | None = None

    def allows(self, value: object) -> bool:
        """True when ``value`` (a parsed JSON value) is a valid value of this fact."""
        t = type(value)
        if self.type == "str":
            if t is not str:
                return False
            assert isinstance(value, str)
            if len(value) > MAX_FACT_STR_LEN:
                return False
            if self.enum is not None and value not in self.enum:
                return False
            return self.pattern is None or self.pattern.fullmatch(value) is not None
        if self.type == "bool":
            return t is bool
        if t is not int:
            return False
        assert isinstance(value, int)
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


@dataclass(frozen=True, slots=True)
class DebounceSpec:
    """The debounced state of a contract (§4.3 step 7): ``fact`` starts at ``resting`` (None:
    unknown); only a confirmed change to ``alert`` is promoted. ``per_fact`` names the fact whose
    values key separate states (``area_id`` for person_detected), or is None for one state."""

    fact: str
    resting: Scalar | None
    alert: Scalar
    per_fact: str | None


@dataclass(frozen=True, slots=True)
class ContractSpec:
    """One observation contract of §4.1.

    ``required`` is a tuple of groups: each group needs at least one of its facts present (a
    one-fact group is a plain required fact)."""

    contract_id: str
    facts: Mapping[str, FactSpec]
    required: tuple[tuple[str, ...], ...]
    scope: Scope
    default_ttl_ms: int
    debounce_ms: int
    debounce: DebounceSpec | None

    def effective_ttl_ms(self, ttl_ms: int | None) -> int:
        """The TTL of a record: the default, or the smaller of the default and the record's."""
        return self.default_ttl_ms if ttl_ms is None else min(ttl_ms, self.default_ttl_ms)


@dataclass(frozen=True, slots=True)
class CapabilitySpec:
    """One capability of the §11 catalog."""

    name: str
    operations: Mapping[str, tuple[str, ...]]
    compensation: Mapping[str, str]
    evidence: Mapping[str, tuple[str, ...]]
    resources: tuple[str, ...]
    exposure: Exposure
    #: the device-context domains its planning needs (§9.3, §11)
    context_reads: tuple[str, ...] = ()
    #: operation -> the condition (§9.2) a request for it must pass before it is published
    requires: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))


#: Safety actions (§7) never take a ``requires``: they always go.
SAFETY_OPERATIONS: frozenset[str] = frozenset({"movement.return_to_station"})


@dataclass(frozen=True, slots=True)
class Registry:
    """Both registries, loaded and validated."""

    contracts: Mapping[str, ContractSpec]
    capabilities: Mapping[str, CapabilitySpec]
    max_ttl_ms: int
    plan_exclusive_resources: frozenset[str]
    arg_types: Mapping[str, ArgType]

""":class:`ContractCheck`: a registry contract's fact checks, precomputed for the gate's
observation fast path."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from topics.hostile import is_forbidden_key
from topics.registry import ContractSpec, FactSpec


@dataclass(frozen=True, slots=True)
class ContractCheck:
    """A contract's checks, precomputed for the fast path."""

    facts: Mapping[str, FactSpec]
    allowed: frozenset[str]
    #: The allowed fact names that are not forbidden keys (all of them, in a sane registry).
    safe_allowed: frozenset[str]
    required: tuple[tuple[str, ...], ...]
    required_all: frozenset[str]
    any_of: tuple[frozenset[str], ...]
    #: String values known to be valid, by fact: a string fact's enum, or (no enum) the values its
    #: :meth:`FactSpec.allows` accepted so far (they repeat record after record; the gate's own
    #: memory, emptied when it holds
    #: ``topics.gate_observations.KNOWN_VALUES_MAX``); empty for a bool or int fact
    known_str: Mapping[str, frozenset[str] | set[str]]

    @classmethod
    def of(cls, spec: ContractSpec) -> ContractCheck:
        known_str: dict[str, frozenset[str] | set[str]] = {}
        for name, fact in spec.facts.items():
            if fact.type != "str":
                known_str[name] = frozenset()
            elif fact.enum is not None:
                known_str[name] = fact.enum
            else:
                known_str[name] = set()
        return cls(
            facts=spec.facts,
            allowed=frozenset(spec.facts),
            safe_allowed=frozenset(k for k in spec.facts if not is_forbidden_key(k)),
            required=spec.required,
            required_all=frozenset(g[0] for g in spec.required if len(g) == 1),
            any_of=tuple(frozenset(g) for g in spec.required if len(g) > 1),
            known_str=known_str,
        )

"""The observation contract registry (docs/CONTRACTS.md §4.1) and the capability catalog (§11), kept as
JSON data next to this module and loaded into typed, frozen objects.

Nothing is cached here: call :func:`load_registry` once and keep the :class:`Registry`.

This module is the entry point: the objects live in :mod:`topics.registry.specs`, reading a file
in :mod:`topics.registry.source`, the entries' parsing in :mod:`topics.registry.contract_entries`
and :mod:`topics.registry.capability_entries`, and :func:`load_registry` in
:mod:`topics.registry.loading`.
"""

from __future__ import annotations

from topics.registry.loading import load_registry
from topics.registry.specs import (
    ARG_TYPES,
    EXPOSURES,
    FACT_TYPES,
    SAFETY_OPERATIONS,
    SCOPES,
    ArgType,
    CapabilitySpec,
    ContractSpec,
    DebounceSpec,
    Exposure,
    FactSpec,
    FactType,
    Registry,
    RegistryError,
    Scalar,
    Scope,
)

__all__ = [
    "ARG_TYPES",
    "EXPOSURES",
    "FACT_TYPES",
    "SAFETY_OPERATIONS",
    "SCOPES",
    "ArgType",
    "CapabilitySpec",
    "ContractSpec",
    "DebounceSpec",
    "Exposure",
    "FactSpec",
    "FactType",
    "Registry",
    "RegistryError",
    "Scalar",
    "Scope",
    "load_registry",
]

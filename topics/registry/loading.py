"""``load_registry``: loads both registry files (the packaged ones by default), checks them
whole, and builds the :class:`Registry`."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

from topics.registry.capability_entries import capability_entry
from topics.registry.contract_entries import contract_entry
from topics.registry.source import EntryContext, read_registry_file
from topics.registry.specs import ARG_TYPES, ArgType, Registry


def load_registry(
    contracts_path: Path | str | None = None, capabilities_path: Path | str | None = None
) -> Registry:
    """Load and validate both registries (the packaged files by default).

    Raises :class:`RegistryError` naming the file and the broken entry."""
    label, data = read_registry_file(contracts_path, "contracts.json")
    ctx = EntryContext(label)
    ctx.keys(data, "(top level)", {"contracts"}, {"registry", "version", "notes"})
    craw = ctx.obj(data["contracts"], "contracts")
    if not craw:
        raise ctx.fail("contracts", "must list at least one contract")
    contracts = {cid: contract_entry(ctx, cid, raw) for cid, raw in craw.items()}

    label, data = read_registry_file(capabilities_path, "capabilities.json")
    ctx = EntryContext(label)
    ctx.keys(
        data,
        "(top level)",
        {"capabilities", "arg_types", "plan_exclusive_resources"},
        {"registry", "version", "notes"},
    )
    at_raw = ctx.obj(data["arg_types"], "arg_types")
    arg_types: dict[str, ArgType] = {}
    for arg, atype in at_raw.items():
        if atype not in ARG_TYPES:
            raise ctx.fail(f"arg_types.{arg}", f"must be one of {', '.join(ARG_TYPES)}")
        arg_types[arg] = atype
    kraw = ctx.obj(data["capabilities"], "capabilities")
    if not kraw:
        raise ctx.fail("capabilities", "must list at least one capability")
    capabilities = {name: capability_entry(ctx, name, raw, arg_types) for name, raw in kraw.items()}
    exclusive = ctx.str_list(data["plan_exclusive_resources"], "plan_exclusive_resources")
    used = {r for cap in capabilities.values() for r in cap.resources}
    for res in exclusive:
        if res not in used:
            raise ctx.fail("plan_exclusive_resources", f"{res!r} is not a resource of any capability")

    return Registry(
        contracts=MappingProxyType(contracts),
        capabilities=MappingProxyType(capabilities),
        max_ttl_ms=max(c.default_ttl_ms for c in contracts.values()),
        plan_exclusive_resources=frozenset(exclusive),
        arg_types=MappingProxyType(arg_types),
    )

"""Parsing one entry of capabilities.json (docs/CONTRACTS.md §11) into a :class:`CapabilitySpec`:
its operations, compensations, evidence, resources, exposure, context reads and ``requires``
conditions, each checked."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from topics.conditions import condition_problems
from topics.context import DOMAIN_TABLE
from topics.registry.source import EntryContext
from topics.registry.specs import EXPOSURES, SAFETY_OPERATIONS, ArgType, CapabilitySpec


def capability_entry(
    ctx: EntryContext, name: str, raw: object, arg_types: Mapping[str, ArgType]
) -> CapabilitySpec:
    where = name
    ctx.ident(name, where)
    spec = ctx.obj(raw, where)
    fields = {"operations", "compensation", "evidence", "resources", "exposure"}
    ctx.keys(spec, where, fields, {"description", "context_reads", "requires"})
    ops_raw = ctx.obj(spec["operations"], f"{where}.operations")
    if not ops_raw:
        raise ctx.fail(f"{where}.operations", "must list at least one operation")
    operations: dict[str, tuple[str, ...]] = {}
    for op, args in ops_raw.items():
        ctx.ident(op, f"{where}.operations.{op}")
        operations[op] = ctx.str_list(args, f"{where}.operations.{op}")
        for arg in operations[op]:
            if arg not in arg_types:
                raise ctx.fail(f"{where}.operations.{op}", f"argument {arg!r} has no entry in arg_types")
    comp_raw = ctx.obj(spec["compensation"], f"{where}.compensation")
    compensation: dict[str, str] = {}
    for op, undo in comp_raw.items():
        if op not in operations:
            raise ctx.fail(f"{where}.compensation.{op}", "is not an operation of this capability")
        if not isinstance(undo, str) or undo not in operations:
            raise ctx.fail(f"{where}.compensation.{op}", "must name an operation of this capability")
        if operations[undo]:
            raise ctx.fail(f"{where}.compensation.{op}", f"{undo!r} needs args; a compensation cannot")
        compensation[op] = undo
    ev_raw = ctx.obj(spec["evidence"], f"{where}.evidence")
    evidence: dict[str, tuple[str, ...]] = {}
    for op, signals in ev_raw.items():
        if op not in operations:
            raise ctx.fail(f"{where}.evidence.{op}", "is not an operation of this capability")
        evidence[op] = ctx.str_list(signals, f"{where}.evidence.{op}", non_empty=True)
    resources_ = ctx.str_list(spec["resources"], f"{where}.resources")
    exposure = spec["exposure"]
    if exposure not in EXPOSURES:
        raise ctx.fail(f"{where}.exposure", f"must be one of {', '.join(EXPOSURES)}")
    reads = ctx.str_list(spec.get("context_reads", []), f"{where}.context_reads")
    for domain in reads:
        if domain not in DOMAIN_TABLE:
            raise ctx.fail(f"{where}.context_reads", f"{domain!r} is not a device-context domain")
    req_raw = ctx.obj(spec.get("requires", {}), f"{where}.requires")
    requires: dict[str, Mapping[str, Any]] = {}
    for op, cond in req_raw.items():
        rwhere = f"{where}.requires.{op}"
        if op not in operations:
            raise ctx.fail(rwhere, "is not an operation of this capability")
        if f"{name}.{op}" in SAFETY_OPERATIONS or op in compensation.values():
            raise ctx.fail(rwhere, "a safety action (return to station, a compensation) always goes")
        problems = condition_problems(cond, args=operations[op])
        if problems:
            raise ctx.fail(rwhere, problems[0])
        requires[op] = MappingProxyType(cond)
    return CapabilitySpec(
        name=name,
        operations=MappingProxyType(operations),
        compensation=MappingProxyType(compensation),
        evidence=MappingProxyType(evidence),
        resources=resources_,
        exposure=exposure,
        context_reads=reads,
        requires=MappingProxyType(requires),
    )

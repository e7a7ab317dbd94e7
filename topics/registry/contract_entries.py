"""Parsing one entry of contracts.json (docs/CONTRACTS.md §4.1) into a :class:`ContractSpec`: its
facts, required groups, scope, TTL and debounce state, each checked."""

from __future__ import annotations

import re
from types import MappingProxyType

from topics.records import MAX_FACT_STR_LEN
from topics.registry.source import EntryContext
from topics.registry.specs import FACT_TYPES, SCOPES, ContractSpec, DebounceSpec, FactSpec


def _fact(ctx: EntryContext, name: str, raw: object, where: str) -> FactSpec:
    spec = ctx.obj(raw, where)
    ctx.keys(spec, where, {"type"}, {"enum", "min", "max", "pattern"})
    ftype = spec["type"]
    if ftype not in FACT_TYPES:
        raise ctx.fail(f"{where}.type", f"must be one of {', '.join(FACT_TYPES)}")
    enum: frozenset[str] | None = None
    pattern: re.Pattern[str] | None = None
    lo: int | None = None
    hi: int | None = None
    if "enum" in spec:
        if ftype != "str":
            raise ctx.fail(where, "only str facts take an enum")
        values = spec["enum"]
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, str) and 0 < len(v) <= MAX_FACT_STR_LEN for v in values)
        ):
            raise ctx.fail(where, "enum must be a non-empty list")
        enum = frozenset(values)
    if "pattern" in spec:
        if enum is not None:
            raise ctx.fail(where, "a fact takes an enum or a pattern, not both")
        if ftype != "str":
            raise ctx.fail(f"{where}.pattern", "only str facts take a pattern")
        if not isinstance(spec["pattern"], str):
            raise ctx.fail(f"{where}.pattern", "must be a string")
        try:
            pattern = re.compile(spec["pattern"])
        except re.error as exc:
            raise ctx.fail(f"{where}.pattern", f"not a valid regular expression: {exc}") from exc
    for bound in ("min", "max"):
        if bound in spec:
            if ftype != "int":
                raise ctx.fail(f"{where}.{bound}", "only int facts take min/max")
            if type(spec[bound]) is not int:
                raise ctx.fail(f"{where}.{bound}", "must be an integer")
    lo, hi = spec.get("min"), spec.get("max")
    if lo is not None and hi is not None and lo > hi:
        raise ctx.fail(where, "min is greater than max")
    return FactSpec(name=name, type=ftype, enum=enum, min=lo, max=hi, pattern=pattern)


def contract_entry(ctx: EntryContext, cid: str, raw: object) -> ContractSpec:
    where = cid
    ctx.ident(cid, where)
    spec = ctx.obj(raw, where)
    ctx.keys(
        spec,
        where,
        {"facts", "required", "scope", "default_ttl_ms", "debounce_ms"},
        {"debounce", "description"},
    )
    facts_raw = ctx.obj(spec["facts"], f"{where}.facts")
    if not facts_raw:
        raise ctx.fail(f"{where}.facts", "must list at least one fact")
    facts: dict[str, FactSpec] = {}
    for fname, fraw in facts_raw.items():
        if not fname or len(fname) > 64:
            raise ctx.fail(f"{where}.facts", f"bad fact name {fname!r}")
        facts[fname] = _fact(ctx, fname, fraw, f"{where}.facts.{fname}")

    req_raw = spec["required"]
    if not isinstance(req_raw, list):
        raise ctx.fail(f"{where}.required", "must be a list of fact names or lists of fact names")
    required: list[tuple[str, ...]] = []
    for i, entry in enumerate(req_raw):
        group = (entry,) if isinstance(entry, str) else ctx.str_list(entry, f"{where}.required.{i}")
        if not group:
            raise ctx.fail(f"{where}.required.{i}", "an any-of group must not be empty")
        for fname in group:
            if fname not in facts:
                raise ctx.fail(f"{where}.required.{i}", f"names {fname!r}, which is not in facts")
        required.append(group)

    scope = spec["scope"]
    if scope not in SCOPES:
        raise ctx.fail(f"{where}.scope", f"must be one of {', '.join(SCOPES)}")
    ttl = ctx.non_neg_int(spec["default_ttl_ms"], f"{where}.default_ttl_ms")
    if ttl == 0:
        raise ctx.fail(f"{where}.default_ttl_ms", "must be positive")
    window = ctx.non_neg_int(spec["debounce_ms"], f"{where}.debounce_ms")

    debounce: DebounceSpec | None = None
    draw = spec.get("debounce")
    if window > 0 and draw is None:
        raise ctx.fail(f"{where}.debounce", "a contract with debounce_ms > 0 needs a debounce state")
    if window == 0 and draw is not None:
        raise ctx.fail(f"{where}.debounce", "a debounce state needs debounce_ms > 0")
    if draw is not None:
        dwhere = f"{where}.debounce"
        d = ctx.obj(draw, dwhere)
        ctx.keys(d, dwhere, {"fact", "resting", "alert"}, {"per_fact"})
        dfact = d["fact"]
        if not isinstance(dfact, str) or dfact not in facts:
            raise ctx.fail(f"{dwhere}.fact", "must name one of the contract's facts")
        if (dfact,) not in required:
            raise ctx.fail(f"{dwhere}.fact", f"{dfact!r} must be a required fact")
        fspec = facts[dfact]
        if d["resting"] is not None and not fspec.allows(d["resting"]):
            raise ctx.fail(f"{dwhere}.resting", f"not a valid value of {dfact!r} (or null)")
        if not fspec.allows(d["alert"]):
            raise ctx.fail(f"{dwhere}.alert", f"not a valid value of {dfact!r}")
        if d["alert"] == d["resting"]:
            raise ctx.fail(f"{dwhere}.alert", "must differ from the resting value")
        per = d.get("per_fact")
        if per is not None and (not isinstance(per, str) or (per,) not in required or per == dfact):
            raise ctx.fail(f"{dwhere}.per_fact", "must be null or another required fact")
        debounce = DebounceSpec(fact=dfact, resting=d["resting"], alert=d["alert"], per_fact=per)

    return ContractSpec(
        contract_id=cid,
        facts=MappingProxyType(facts),
        required=tuple(required),
        scope=scope,
        default_ttl_ms=ttl,
        debounce_ms=window,
        debounce=debounce,
    )

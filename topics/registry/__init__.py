"""The observation contract registry (docs/CONTRACTS.md §4.1) and the capability catalog (§11), kept as
JSON data next to this module and loaded into typed, frozen objects.

Nothing is cached here: call :func:`load_registry` once and keep the :class:`Registry`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args

import orjson

from topics.conditions import condition_problems
from topics.context import DOMAIN_TABLE
from topics.records import ID_PATTERN, MAX_FACT_STR_LEN

FactType = Literal["bool", "str", "int"]
Scope = Literal["unscoped", "scoped", "device"]
Exposure = Literal["GO", "GO_USER_CHECKPOINT", "NO_GO"]
ArgType = Literal["str", "str_list"]
Scalar = bool | int | str

FACT_TYPES: tuple[str, ...] = get_args(FactType)
SCOPES: tuple[str, ...] = get_args(Scope)
EXPOSURES: tuple[str, ...] = get_args(Exposure)
ARG_TYPES: tuple[str, ...] = get_args(ArgType)

_ID_RE = re.compile(ID_PATTERN)


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


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def _read(path: Path | str | None, default_name: str) -> tuple[str, Any]:
    if path is None:
        label = default_name
        try:
            raw = resources.files(__name__).joinpath(default_name).read_bytes()
        except OSError as exc:
            raise RegistryError(f"{label}: cannot read the packaged file: {exc}") from exc
    else:
        label = Path(path).name
        try:
            raw = Path(path).read_bytes()
        except OSError as exc:
            raise RegistryError(f"{label}: cannot read {path}: {exc.strerror or exc}") from exc
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RegistryError(f"{label}: not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RegistryError(f"{label}: the top level must be a JSON object")
    return label, data


class _Ctx:
    """Builds error messages naming the file and the entry."""

    def __init__(self, label: str) -> None:
        self.label = label

    def fail(self, where: str, problem: str) -> RegistryError:
        return RegistryError(f"{self.label}: {where}: {problem}")

    def obj(self, value: object, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(where, "must be a JSON object")
        return value

    def keys(self, value: dict[str, Any], where: str, required: set[str], optional: set[str]) -> None:
        missing = sorted(required - value.keys())
        if missing:
            raise self.fail(where, f"missing field {missing[0]!r}")
        unknown = sorted(value.keys() - required - optional)
        if unknown:
            raise self.fail(where, f"unknown field {unknown[0]!r}")

    def str_list(self, value: object, where: str, *, non_empty: bool = False) -> tuple[str, ...]:
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise self.fail(where, "must be a list of non-empty strings")
        if non_empty and not value:
            raise self.fail(where, "must be a non-empty list")
        if len(set(value)) != len(value):
            raise self.fail(where, "has duplicate entries")
        return tuple(value)

    def non_neg_int(self, value: object, where: str) -> int:
        if type(value) is not int or value < 0:
            raise self.fail(where, "must be a non-negative integer")
        return value

    def ident(self, value: object, where: str) -> str:
        if not isinstance(value, str) or _ID_RE.fullmatch(value) is None:
            raise self.fail(where, "must be an ID ([A-Za-z0-9_.:-], 1-128 characters)")
        return value


def _fact(ctx: _Ctx, name: str, raw: object, where: str) -> FactSpec:
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


def _contract(ctx: _Ctx, cid: str, raw: object) -> ContractSpec:
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


def _capability(ctx: _Ctx, name: str, raw: object, arg_types: Mapping[str, ArgType]) -> CapabilitySpec:
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


def load_registry(
    contracts_path: Path | str | None = None, capabilities_path: Path | str | None = None
) -> Registry:
    """Load and validate both registries (the packaged files by default).

    Raises :class:`RegistryError` naming the file and the broken entry."""
    label, data = _read(contracts_path, "contracts.json")
    ctx = _Ctx(label)
    ctx.keys(data, "(top level)", {"contracts"}, {"registry", "version", "notes"})
    craw = ctx.obj(data["contracts"], "contracts")
    if not craw:
        raise ctx.fail("contracts", "must list at least one contract")
    contracts = {cid: _contract(ctx, cid, raw) for cid, raw in craw.items()}

    label, data = _read(capabilities_path, "capabilities.json")
    ctx = _Ctx(label)
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
    capabilities = {name: _capability(ctx, name, raw, arg_types) for name, raw in kraw.items()}
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

"""The gate's observation path (docs/CONTRACTS.md §4.3 steps 2–4): :class:`ObservationChecks`,
the one-pass fast path and the ordered checked path that finds a rejection's reason and paths, and
the observation field lists both judge by."""

from __future__ import annotations

from typing import Any

from topics.gate_checks import (
    ID_FULLMATCH,
    Reject,
    check_hostile,
    forbidden_key_paths,
    is_id,
    key_matches,
    paths_text,
)
from topics.gate_construct import build_model, build_observation
from topics.gate_contract_check import ContractCheck
from topics.hostile import INT64_MAX, INT64_MIN, exact_scan, needs_exact_scan, safe_key
from topics.records import Correlation, Observation

#: the most IDs the gate remembers as valid (:meth:`Gate._is_known_id`)
_KNOWN_IDS_MAX = 65_536
#: the most correlations the gate keeps built (:meth:`Gate._fast_observation`)
CORRELATIONS_MAX = 16_384
#: the most valid values the gate remembers per string fact without an enum
KNOWN_VALUES_MAX = 4_096

# the observation's fields come from its model; tests/unit/test_observation_schema.py checks that
# the fast path, the checked path and the schema paths judge every field as the model does
_OBS_REQUIRED = tuple(name for name, f in Observation.model_fields.items() if f.is_required())
OBS_FIELDS = frozenset(Observation.model_fields)
_CORRELATION_FIELDS = tuple(Correlation.model_fields)
CORRELATION_SET = frozenset(_CORRELATION_FIELDS)


class ObservationChecks:
    """The observation checks of :class:`topics.gate.Gate`, which sets the state they use."""

    _checks: dict[str, ContractCheck]
    _safe_keys: frozenset[str]
    _known_ids: set[str]
    _correlations: dict[tuple[str, str, str], Correlation]

    def _observation(self, obj: dict[str, Any], key: Any, raw: bytes) -> Observation:
        fast = self._fast_observation(obj, key)
        if fast is None:
            return self._checked_observation(obj, key, check_hostile(obj, raw, self._safe_keys))
        # flat by construction: the top level, the facts and the correlation hold every key
        keys = len(obj) + len(fast.facts) + (3 if fast.correlation is not None else 0)
        if raw.count(b":") != keys:
            # IDs may hold colons: count them too (the keys of the fast path hold none)
            corr = obj.get("correlation")
            strings = [*obj.values(), *fast.facts.values(), *(corr.values() if corr else ())]
            colons = sum(v.count(":") for v in strings if type(v) is str)
            if needs_exact_scan(raw, keys, colons) and exact_scan(raw) == "duplicate_key":
                raise Reject("not_json", "a key is repeated within one object")
        return fast

    def _is_known_id(self, value: str) -> bool:
        """``value`` (a str) matches the ID pattern; remembered in ``_known_ids`` if so."""
        if ID_FULLMATCH(value) is None:
            return False
        known = self._known_ids
        if len(known) >= _KNOWN_IDS_MAX:
            known.clear()
        known.add(value)
        return True

    def _fast_observation(self, obj: dict[str, Any], key: Any) -> Observation | None:
        """The common case in one pass: an observation whose every top-level field is known and
        well typed, whose correlation is three IDs and whose facts are allowlisted scalars has no
        forbidden key anywhere and passes steps 2–4. Returns None on the first doubt; the ordered
        checks of :meth:`_checked_observation` then find the reason."""
        if not obj.keys() <= OBS_FIELDS:
            return None
        get = obj.get
        fullmatch = ID_FULLMATCH
        known = self._known_ids
        event_id: Any = get("event_id")
        device_id: Any = get("device_id")
        ctype: Any = get("type")
        source: Any = get("source")
        observed_at_ms: Any = get("observed_at_ms")
        freshness_ms: Any = get("freshness_ms")
        facts: Any = get("facts")
        ttl: Any = get("ttl_ms")
        rcd: Any = get("requires_cloud_decision", False)
        if not (
            get("privacy_class") == "semantic_only"
            and type(event_id) is str
            and fullmatch(event_id) is not None
            and type(device_id) is str
            and (device_id in known or self._is_known_id(device_id))
            and type(ctype) is str
            and type(source) is str
            and 0 < len(source) <= 256
            and type(observed_at_ms) is int
            and 0 <= observed_at_ms <= INT64_MAX
            and type(freshness_ms) is int
            and 0 <= freshness_ms <= INT64_MAX
            and type(facts) is dict
            and (ttl is None or (type(ttl) is int and 0 <= ttl <= INT64_MAX))
            and type(rcd) is bool
        ):
            return None
        check = self._checks.get(ctype)
        if check is None or not facts.keys() <= check.safe_allowed:
            return None
        if not (key == device_id if type(key) is str else key == device_id.encode()):
            return None
        conf: Any = get("confidence")
        if conf is not None:
            tc = type(conf)
            if (tc is float or tc is int) and 0.0 <= conf <= 1.0:
                conf = float(conf)
            else:
                return None
        corr: Any = get("correlation")
        correlation: Correlation | None = None
        if corr is not None:
            if not (
                type(corr) is dict
                and len(corr) == 3
                and type(ce := corr.get("experience_id")) is str
                and type(cw := corr.get("workflow_id")) is str
                and type(cs := corr.get("step_id")) is str
            ):
                return None
            ids = (ce, cw, cs)
            correlation = self._correlations.get(ids)
            if correlation is None:
                if not (
                    (ce in known or self._is_known_id(ce))
                    and (cw in known or self._is_known_id(cw))
                    and (cs in known or self._is_known_id(cs))
                ):
                    return None
                correlation = build_model(
                    Correlation,
                    {"experience_id": ce, "workflow_id": cw, "step_id": cs},
                    {"experience_id", "workflow_id", "step_id"},
                )
                if len(self._correlations) >= CORRELATIONS_MAX:
                    self._correlations.clear()
                self._correlations[ids] = correlation
        if not check.required_all <= facts.keys():
            return None
        for any_of in check.any_of:
            if facts.keys().isdisjoint(any_of):
                return None
        known_str = check.known_str
        for k, v in facts.items():
            if type(v) is str:
                if v in known_str[k]:
                    continue
                spec = check.facts[k]
                if spec.enum is not None or not spec.allows(v):
                    return None  # (an enum's values are all known)
                learned = known_str[k]
                assert type(learned) is set  # a str fact without an enum: values learned
                if len(learned) >= KNOWN_VALUES_MAX:
                    learned.clear()
                learned.add(v)
            elif not check.facts[k].allows(v) or (type(v) is int and not INT64_MIN <= v <= INT64_MAX):
                return None
        return build_observation(
            obj, event_id, device_id, ctype, source, observed_at_ms, freshness_ms, ttl, conf, rcd,
            correlation, facts,
        )  # fmt: skip

    def _checked_observation(self, obj: dict[str, Any], key: Any, clean: bool) -> Observation:
        """§4.3 steps 2–4 in order, finding the reason and the paths of a rejection. ``clean``: no
        forbidden key is in ``obj`` (from :func:`~topics.gate_checks.check_hostile`'s walk)."""
        # Step 2: privacy. The quick check only proves cleanliness; paths are found when needed.
        get = obj.get
        ctype: Any = get("type")
        facts: Any = get("facts")
        privacy_class: Any = get("privacy_class", "semantic_only")
        check = self._checks.get(ctype) if type(ctype) is str else None
        if (
            not clean
            or privacy_class != "semantic_only"
            or (check is not None and type(facts) is dict and not facts.keys() <= check.allowed)
        ):
            raise self._privacy_reject(obj, ctype, facts, privacy_class, check, self._safe_keys)

        # Step 3: schema, then key, then contract.
        event_id: Any = get("event_id")
        device_id: Any = get("device_id")
        source: Any = get("source")
        observed_at_ms = get("observed_at_ms")
        freshness_ms = get("freshness_ms")
        ttl = get("ttl_ms")
        conf = get("confidence")
        rcd = get("requires_cloud_decision", False)
        corr = get("correlation")
        fullmatch = ID_FULLMATCH
        ok = (
            type(event_id) is str
            and fullmatch(event_id) is not None
            and type(device_id) is str
            and fullmatch(device_id) is not None
            and type(ctype) is str
            and fullmatch(ctype) is not None
            and type(source) is str
            and 0 < len(source) <= 256
            and type(observed_at_ms) is int
            and observed_at_ms >= 0
            and type(freshness_ms) is int
            and freshness_ms >= 0
            and type(facts) is dict
            and "privacy_class" in obj
            and obj.keys() <= OBS_FIELDS
            and (ttl is None or (type(ttl) is int and ttl >= 0))
            and type(rcd) is bool
        )
        if ok and conf is not None:
            tc = type(conf)
            if (tc is float or tc is int) and 0.0 <= conf <= 1.0:
                conf = float(conf)
            else:
                ok = False
        correlation: Correlation | None = None
        if ok and corr is not None:
            if (
                type(corr) is dict
                and len(corr) == 3
                and type(ce := corr.get("experience_id")) is str
                and fullmatch(ce) is not None
                and type(cw := corr.get("workflow_id")) is str
                and fullmatch(cw) is not None
                and type(cs := corr.get("step_id")) is str
                and fullmatch(cs) is not None
            ):
                correlation = build_model(
                    Correlation,
                    {"experience_id": ce, "workflow_id": cw, "step_id": cs},
                    set(_CORRELATION_FIELDS),
                )
            else:
                ok = False
        if not ok:
            bad = observation_schema_paths(obj)
            raise Reject("schema_invalid", "schema: missing, mistyped or unknown " + paths_text(bad), bad)
        if not key_matches(key, device_id):
            raise Reject("key_mismatch", "device_id differs from the record key", ["device_id"])
        if check is None:
            raise Reject("unknown_contract", "type is not a registry contract", ["type"])

        # Step 4: fact values and required facts.
        specs = check.facts
        valid = check.required_all <= facts.keys()
        if valid:
            for any_of in check.any_of:
                if facts.keys().isdisjoint(any_of):
                    valid = False
        if valid:
            for k, v in facts.items():
                spec = specs[k]
                enum = spec.enum
                if enum is not None and type(v) is str:
                    if v not in enum:
                        valid = False
                        break
                elif not spec.allows(v):
                    valid = False
                    break
        if not valid:
            invalid = [f"facts.{safe_key(k)}" for k, v in facts.items() if not specs[k].allows(v)]
            for group in check.required:
                if not any(name in facts for name in group):
                    invalid.extend(f"facts.{name}" for name in group)
            raise Reject(
                "fact_invalid",
                "fact value of wrong type, enum, range or length, or a missing required fact, at "
                + paths_text(invalid),
                invalid,
            )
        return build_observation(
            obj, event_id, device_id, ctype, source, observed_at_ms, freshness_ms, ttl, conf, rcd,
            correlation, facts,
        )  # fmt: skip

    @staticmethod
    def _privacy_reject(
        obj: dict[str, Any],
        ctype: Any,
        facts: Any,
        privacy_class: Any,
        check: ContractCheck | None,
        safe: frozenset[str],
    ) -> Reject:
        paths = forbidden_key_paths(obj, safe)
        parts = []
        if paths:
            parts.append("forbidden key at " + paths_text(paths))
        if privacy_class != "semantic_only":
            parts.append("privacy_class is not semantic_only")
            paths.append("privacy_class")
        if check is not None and type(facts) is dict:
            outside = [
                f"facts.{safe_key(k)}"
                for k in facts
                if k not in check.allowed and f"facts.{safe_key(k)}" not in paths
            ]
            if outside:
                parts.append(f"fact not in the {ctype} allowlist at " + paths_text(outside))
                paths.extend(outside)
        return Reject("privacy_violation", "; ".join(parts), paths)


def observation_schema_paths(obj: dict[str, Any]) -> list[str]:
    """The paths of every schema problem of an observation (the slow path of the gate)."""
    bad = sorted(safe_key(k) for k in obj if k not in OBS_FIELDS)
    bad.extend(name for name in _OBS_REQUIRED if name not in obj)

    def check(name: str, ok: bool) -> None:
        if name in obj and not ok:
            bad.append(name)

    get = obj.get
    source, oam, fresh, ttl = get("source"), get("observed_at_ms"), get("freshness_ms"), get("ttl_ms")
    conf, corr = get("confidence"), get("correlation")
    check("event_id", is_id(get("event_id")))
    check("device_id", is_id(get("device_id")))
    check("type", is_id(get("type")))
    check("source", type(source) is str and 0 < len(source) <= 256)
    check("observed_at_ms", type(oam) is int and oam >= 0)
    check("freshness_ms", type(fresh) is int and fresh >= 0)
    check("ttl_ms", ttl is None or (type(ttl) is int and ttl >= 0))
    check(
        "confidence",
        conf is None or (type(conf) in (int, float) and 0.0 <= conf <= 1.0),
    )
    check("requires_cloud_decision", type(get("requires_cloud_decision")) is bool)
    check("facts", type(get("facts")) is dict)
    if type(corr) is dict:
        bad.extend(f"correlation.{k}" for k in _CORRELATION_FIELDS if not is_id(corr.get(k)))
        bad.extend(f"correlation.{safe_key(k)}" for k in corr if k not in CORRELATION_SET)
    else:
        check("correlation", corr is None)
    return bad or ["(record)"]

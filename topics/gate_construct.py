"""Building an admitted model from values the gate has checked, without validating them again:
:func:`build_model` (what ``model_construct`` does) and :func:`build_observation`."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from topics.records import Observation

_object_new = object.__new__
# the slots every pydantic model instance has (BaseModel.__slots__), set as model_construct does
_set_dict = BaseModel.__dict__["__dict__"].__set__
_set_fields_set = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_set_extra = BaseModel.__dict__["__pydantic_extra__"].__set__
_set_private = BaseModel.__dict__["__pydantic_private__"].__set__

_M = TypeVar("_M", bound=BaseModel)


def build_observation(
    obj: dict[str, Any],
    event_id: str,
    device_id: str,
    ctype: str,
    source: str,
    observed_at_ms: Any,
    freshness_ms: Any,
    ttl: Any,
    conf: Any,
    rcd: bool,
    correlation: Any,
    facts: dict[str, Any],
) -> Observation:
    """The admitted observation from its checked fields (``obj``: the record as read)."""
    return build_model(
        Observation,
        {
            "event_id": event_id,
            "device_id": device_id,
            "type": ctype,
            "source": source,
            "observed_at_ms": observed_at_ms,
            "freshness_ms": freshness_ms,
            "ttl_ms": ttl,
            "confidence": conf,
            "privacy_class": "semantic_only",
            "requires_cloud_decision": rcd,
            "correlation": correlation,
            "facts": facts,
        },
        set(obj),
    )


def build_model(cls: type[_M], values: dict[str, Any], fields_set: set[str]) -> _M:
    """What ``cls.model_construct`` does for a model without aliases, extras or private
    attributes, given every field in declaration order: the caller has validated the values
    exactly as ``model_validate`` would (tests compare the two). The four slots of a pydantic model
    are set through their descriptors (what ``object.__setattr__`` finds, without looking)."""
    m = _object_new(cls)
    _set_dict(m, values)
    _set_fields_set(m, fields_set)
    _set_extra(m, None)
    _set_private(m, None)
    return m

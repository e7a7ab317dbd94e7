"""The base classes of the record models: ``InputRecord`` and ``OutputRecord`` (frozen, unknown
fields rejected, optional fields left out of the JSON when None, fast JSON bytes), and the
capability step shared by a plan step and a dispatch request (§3, §7)."""

from __future__ import annotations

from typing import Any, ClassVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, JsonValue, SerializerFunctionWrapHandler, model_serializer

from topics.record_scalars import Id


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    #: the contract's optional fields that the JSON leaves out when they are None
    omit_if_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_none(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name in self.omit_if_none:
            if data.get(name) is None:
                data.pop(name, None)
        return data

    def to_json_dict(self) -> dict[str, Any]:
        """The record as the JSON object of the contract."""
        return self.model_dump(mode="json")

    def to_json_bytes(self) -> bytes:
        """The record as compact UTF-8 JSON bytes (orjson), ready for Kafka."""
        return orjson.dumps(self.model_dump(mode="json"))


class InputRecord(_Record):
    """A record read from Kafka: unknown fields are rejected."""


class OutputRecord(_Record):
    """A record the pipeline writes."""


class CapabilityStep(_Record):
    """A capability operation of a plan step or of a dispatch request (§3, §7)."""

    step_id: Id
    capability: Id
    operation: Id
    args: dict[str, JsonValue] = Field(default_factory=dict)
    depends_on: tuple[Id, ...] | None = None

    omit_if_none = ("depends_on",)

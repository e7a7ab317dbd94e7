"""Reading one registry JSON file (the packaged one or a given path), and ``EntryContext``, the checks of
its entries' shapes whose :class:`RegistryError` messages name the file and the entry."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path
from typing import Any

import orjson

from topics.records import ID_PATTERN
from topics.registry.specs import RegistryError

_ID_RE = re.compile(ID_PATTERN)


def read_registry_file(path: Path | str | None, default_name: str) -> tuple[str, Any]:
    if path is None:
        label = default_name
        try:
            raw = resources.files("topics.registry").joinpath(default_name).read_bytes()
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


class EntryContext:
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

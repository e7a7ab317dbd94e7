"""What the report may print of a value taken from a refused or recorded record.

A dead letter's ``key`` and ``event_id`` and a recorded decision's IDs come from input that the
pipeline did not admit: the report shows such a value as itself only when it is an ID (the
contract's ID pattern), else as the project's hashed name for free text (``<key:`` + the first 8
hex digits of its SHA-256 + ``>``, as dead letters name keys, docs/CONTRACTS.md §10), so free text
hidden in it never reaches the page.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from html import escape
from typing import Final

from topics.hostile import safe_key
from topics.records import ID_PATTERN

_ID: Final = re.compile(ID_PATTERN)


def shown_id(value: object) -> str:
    """``value`` as the report prints it: "" for None, itself for an ID, else its hashed name."""
    text = "" if value is None else str(value)
    if not text:
        return ""
    return text if _ID.fullmatch(text) is not None else safe_key(text)


def shown_value(value: object, depth: int = 0) -> object:
    """A recorded value as the report prints it (a divergence's ``recorded``): every string in it,
    keys included, as :func:`shown_id` shows it; numbers, booleans and null as they are."""
    if isinstance(value, str):
        return shown_id(value)
    if depth >= 32:
        return None
    if isinstance(value, dict):
        return {shown_id(k): shown_value(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [shown_value(v, depth + 1) for v in value]
    return value


def esc(value: object) -> str:
    """Escape any record value for HTML text or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def css_known(value: str, known: Iterable[str]) -> str:
    """A CSS-safe class suffix: the value itself when it is one of the known enum values."""
    return value if value in known else "other"

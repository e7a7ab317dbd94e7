"""The ``kcat -C -J`` line format both ways, byte for byte (docs/CONTRACTS.md §12).

A Kafka key or value is bytes; the line holds it as a JSON string. Valid UTF-8 is that string as
it is. Bytes that are not valid UTF-8 cannot be a JSON string as such, and the two writers differ:

- ``kcat`` writes the bytes as they are inside the string (its JSON generator does not check
  UTF-8), so the line itself is not valid UTF-8;
- ``guardian export`` writes each such byte as the escape ``\\udc80`` … ``\\udcff`` (the lone
  surrogate Python's ``surrogateescape`` gives it), so the file stays valid UTF-8.

A reader gets the original bytes back from either: the line is decoded with ``surrogateescape``
(a raw byte that is not UTF-8 becomes that same lone surrogate), and the string field is encoded
back with ``surrogateescape``. A valid UTF-8 value never holds such a surrogate (UTF-8 cannot
encode one), so nothing else maps to them. Any other lone surrogate in a field names no bytes:
:func:`field_bytes` refuses it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

#: the lone surrogates ``surrogateescape`` gives the bytes 0x80–0xFF that are not valid UTF-8
_ESCAPED_BYTE = re.compile("[\udc80-\udcff]")


def field_text(raw: bytes) -> tuple[str, bool]:
    """``raw`` as the JSON string of a line, and whether it was valid UTF-8 (False: the bytes that
    are not are lone surrogates, see the module docstring)."""
    try:
        return raw.decode("utf-8"), True
    except UnicodeDecodeError:
        return raw.decode("utf-8", "surrogateescape"), False


def field_bytes(text: str) -> bytes:
    """The bytes a line's key or payload string stands for: its UTF-8, the escaped bytes restored.

    Raises UnicodeEncodeError for a lone surrogate that stands for no byte (outside U+DC80–U+DCFF)."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def loads_escaped(line: bytes) -> Any:
    """A line orjson refused, parsed with its bytes that are not UTF-8 kept as lone surrogates and
    lone-surrogate escapes allowed (see the module docstring). Raises ValueError when it is not
    JSON either (``NaN`` and ``Infinity`` are not)."""
    return json.loads(line.decode("utf-8", "surrogateescape"), parse_constant=_refuse_constant)


def kcat_line(
    topic: str, partition: int, offset: int, ts: int, key: bytes | None, value: bytes | None
) -> bytes:
    """One record as ``guardian export`` writes it: the ``kcat -C -J`` fields, each byte of the key
    and value that is not valid UTF-8 as a ``\\udcXX`` escape (see the module docstring)."""
    key_text, key_ok = field_text(key) if key is not None else (None, True)
    value_text, value_ok = field_text(value) if value is not None else (None, True)
    obj = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "tstype": "create",
        "ts": ts,
        "key": key_text,
        "payload": value_text,
    }
    if key_ok and value_ok:
        return orjson.dumps(obj)
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return _ESCAPED_BYTE.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")

"""A snapshot of the claims fold, as records of the claims topic (pure: bytes in, bytes out).

A snapshot holds everything :class:`tables.claims.ClaimLog` knows after reading the log up to an
offset ``at`` (the claims in their compact form, the devices, each device's claim rate state), so a
worker starting later reads the snapshot and the records after ``at`` instead of the whole history;
the records before ``at`` can then be removed from the topic. It is written as ``count`` records of
at most :data:`CHUNK_BYTES` each, every one marked by the Kafka header :data:`HEADER` whose value is
``"<at> <index> <count>"``; the chunks' values, joined in index order, are zlib-compressed bytes.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass
from typing import Any

#: the Kafka header that marks a snapshot's chunk (claims have no headers)
HEADER = "guardian-claims-snapshot"
#: at most this many bytes a chunk (far below Kafka's 1 MB message limit)
CHUNK_BYTES = 256 * 1024
VERSION = 1
_LENGTHS = struct.Struct(">IQQQ")


class SnapshotError(ValueError):
    """A snapshot that cannot be read (damaged, or written by an unknown version)."""


@dataclass(frozen=True, slots=True)
class ChunkMark:
    """Which snapshot a chunk belongs to (``at``: the offset it covers the log up to) and where."""

    at: int
    index: int
    count: int

    def header(self) -> tuple[str, bytes]:
        return HEADER, f"{self.at} {self.index} {self.count}".encode()


def chunk_mark(headers: Any) -> ChunkMark | None:
    """The chunk mark among a record's Kafka headers ((name, bytes) pairs), or None: a claim."""
    for name, value in headers or ():
        if name != HEADER:
            continue
        try:
            at, index, count = (int(part) for part in bytes(value).decode().split(" "))
        except (ValueError, UnicodeDecodeError):
            return ChunkMark(-1, 0, 0)  # a damaged mark: not a claim either
        if at < 0 or count < 1 or not 0 <= index < count:
            return ChunkMark(-1, 0, 0)
        return ChunkMark(at, index, count)
    return None


def encode(fields: dict[str, Any], arrays: tuple[bytes, bytes, bytes]) -> bytes:
    """One snapshot: ``fields`` (JSON) and three arrays' bytes, compressed."""
    head = json.dumps({"version": VERSION, **fields}, sort_keys=True, separators=(",", ":")).encode()
    body = _LENGTHS.pack(len(head), *(len(a) for a in arrays)) + head + b"".join(arrays)
    return zlib.compress(body, 1)


def decode(data: bytes) -> tuple[dict[str, Any], tuple[bytes, bytes, bytes]]:
    """What :func:`encode` wrote. Raises :class:`SnapshotError`."""
    try:
        body = zlib.decompress(data)
        n_head, *sizes = _LENGTHS.unpack_from(body)
        at = _LENGTHS.size
        fields = json.loads(body[at : at + n_head])
    except (zlib.error, struct.error, ValueError) as exc:
        raise SnapshotError(f"a claims snapshot cannot be read: {exc}") from exc
    if not isinstance(fields, dict) or fields.get("version") != VERSION:
        raise SnapshotError("a claims snapshot of an unknown version")
    at += n_head
    arrays = []
    for size in sizes:
        arrays.append(body[at : at + size])
        at += size
    if at != len(body):
        raise SnapshotError("a claims snapshot's arrays do not match its length")
    return fields, (arrays[0], arrays[1], arrays[2])


def chunks(data: bytes, at: int) -> list[tuple[ChunkMark, bytes]]:
    """``data`` cut into the records of the snapshot covering the log up to ``at``."""
    pieces = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    return [(ChunkMark(at, i, len(pieces)), piece) for i, piece in enumerate(pieces)]

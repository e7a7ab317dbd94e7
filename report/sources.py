"""Where the report reads each kind of output record from: a list, or a JSONL output file.

A record is named by a handle (its index in a list, or its byte offset in a JSONL file), so the
report holds per lane only handles and aggregates (:mod:`report.lanes`), never every record at
once. Every file is read with the standard library's parser; a document nested too deeply for it
is a ``ValueError`` naming the file and line, like any other unreadable line, never a
``RecursionError``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Record = Mapping[str, Any]


def loads(text: str | bytes) -> Any:
    """``json.loads``; a document nested too deeply for it is a ValueError like any bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


class Records:
    """One kind of output record: scanned once in order, then loaded back a lane at a time.

    A record is named by a handle (its index in a list, or its byte offset in a JSONL file), so
    the report holds per lane only handles and aggregates, never every record at once.
    """

    def scan(self) -> Iterator[tuple[int, Record]]:
        raise NotImplementedError

    def load(self, handles: Sequence[int]) -> list[Record]:
        raise NotImplementedError


class ListRecords(Records):
    def __init__(self, records: Sequence[Record]) -> None:
        self.records = records

    def scan(self) -> Iterator[tuple[int, Record]]:
        return enumerate(self.records)

    def load(self, handles: Sequence[int]) -> list[Record]:
        return [self.records[h] for h in handles]


class FileRecords(Records):
    """A JSONL output file; a line that is not a JSON object raises ValueError naming it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def _parse(self, line: bytes, lineno: int | None) -> dict[str, Any]:
        where = f"{self.path.name}:{lineno}" if lineno is not None else self.path.name
        try:
            value = loads(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where}: not UTF-8 ({exc.reason})") from exc
        except ValueError as exc:
            raise ValueError(f"{where}: not JSON ({getattr(exc, 'msg', exc)})") from exc
        if not isinstance(value, dict):
            raise ValueError(f"{where}: not a JSON object")
        return value

    def scan(self) -> Iterator[tuple[int, Record]]:
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            offset = 0
            for lineno, line in enumerate(fh, 1):
                start, offset = offset, offset + len(line)
                if line.strip():
                    yield start, self._parse(line, lineno)

    def load(self, handles: Sequence[int]) -> list[Record]:
        if not handles:
            return []
        out: list[Record] = []
        with self.path.open("rb") as fh:
            for h in handles:
                fh.seek(h)
                out.append(self._parse(fh.readline(), None))
        return out


@dataclass
class Sources:
    decisions: Records
    dispatches: Records
    timeline: Records
    dead_letters: Records
    divergences: Records

"""Reading ``guardian replay``'s input (docs/CONTRACTS.md §12), in bounded memory and disk.

A small public reader (other commands read replay files with it): :func:`read_kcat_lines` gives
the records of one ``kcat -C -J`` file (``-``: stdin; gzip or not), each key and value the very
bytes the Kafka record held (:mod:`guardian.kcat_json`), so the replay's gate judges what the live
gate judged.

Bounds, so that no input can exhaust the machine:

- **A line** is at most :data:`MAX_LINE_BYTES`. Lines are cut from blocks of the (decompressed)
  input, never read whole: a longer line is unreadable (naming file and line) once that many of
  its bytes have been read, so a small ``.gz`` holding one huge line costs at most the bound.
- **Temporary disk.** The sorted runs the replay spools may take at most
  :data:`SPOOL_RATIO` times the input bytes read so far (as stored: compressed for a ``.gz``)
  plus :data:`SPOOL_ALLOWANCE` (:class:`SpoolBudget`); an input inflating past that is refused
  with one line.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import sys
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

import orjson

from guardian.kcat_json import field_bytes, loads_escaped
from topics.names import CONTRACT_SUFFIXES, TopicNames

#: §12: ``ts`` is a non-negative integer below 2^53
MAX_TS = 2**53
#: Kafka's default largest record batch (``message.max.bytes``): key and value of one record fit in it
KAFKA_MAX_MESSAGE_BYTES = 1_048_588
#: The longest readable line: a record as large as a broker takes by default, every byte of it
#: written as a six-character escape (``\\u0001``, ``\\udcff``), plus 64 KiB for the envelope
#: (topic, numbers, headers). A record this large is a dead letter (``too_large``) either way: the
#: line is read so the replay judges it as the live gate did.
MAX_LINE_BYTES = 6 * KAFKA_MAX_MESSAGE_BYTES + 64 * 1024
#: The sorted runs of a replay may take this many times the input's stored bytes …
SPOOL_RATIO = 100
#: … plus this much (so that a small input never hits the ratio).
SPOOL_ALLOWANCE = 64 * 1024 * 1024
#: decompressed bytes read at a time
_BLOCK = 1 << 20
_MAX_TOPICS_LISTED = 10


class ReplayInputError(ValueError):
    """An input file or line cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class InputRecord:
    suffix: str
    topic: str
    partition: int
    offset: int
    ts: int
    key: bytes | None
    value: bytes | None


@dataclass(slots=True)
class ReadMeter:
    """Input bytes read from storage so far (before decompression), over every file."""

    stored: int = 0


class _CountingRaw(io.RawIOBase):
    """A raw stream counting the bytes read through it into a :class:`ReadMeter`."""

    def __init__(self, inner: Any, meter: ReadMeter) -> None:
        super().__init__()
        self._inner = inner
        self._meter = meter

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        n = cast(int | None, self._inner.readinto(buffer))
        if n:
            self._meter.stored += n
        return n


@contextlib.contextmanager
def open_input(name: str | Path, meter: ReadMeter | None = None) -> Iterator[IO[bytes]]:
    """A replay input for reading: a file, or stdin for ``-``; gzip when it starts like gzip.

    ``meter`` counts the bytes read from the file itself (compressed, for a gzip file)."""
    with contextlib.ExitStack() as stack:
        raw: Any
        if str(name) == "-":
            stdin = sys.stdin.buffer
            if sys.stdin.isatty():
                # a terminal ends its input with one Ctrl-D, but reads on after it: read it up to there
                raw = io.BytesIO(stdin.read())
            else:
                raw = stdin.raw if hasattr(stdin, "raw") else stdin
        else:
            try:
                raw = stack.enter_context(Path(name).open("rb", buffering=0))
            except OSError as exc:
                raise ReplayInputError(f"{name}: cannot read: {exc.strerror or exc}") from exc
        buffered = io.BufferedReader(_CountingRaw(raw, meter if meter is not None else ReadMeter()), _BLOCK)
        if buffered.peek(2)[:2] == b"\x1f\x8b":
            unzipped = gzip.GzipFile(fileobj=buffered, mode="rb")
            stack.callback(unzipped.close)
            yield cast(IO[bytes], unzipped)
        else:
            yield cast(IO[bytes], buffered)


class LineTooLong(Exception):
    """A line longer than the bound; ``lineno`` is its number."""

    def __init__(self, lineno: int) -> None:
        super().__init__(lineno)
        self.lineno = lineno


def bounded_lines(handle: IO[bytes], limit: int = MAX_LINE_BYTES, block: int = _BLOCK) -> Iterator[bytes]:
    """The lines of ``handle`` (without their newline), read a block at a time: at most ``limit`` +
    ``block`` bytes of one line are ever held. Raises :class:`LineTooLong` for a longer line."""
    tail = b""
    lineno = 0
    while True:
        data = handle.read(block)
        if not data:
            break
        parts = data.split(b"\n")
        if tail:
            parts[0] = tail + parts[0]
        tail = parts.pop()
        for part in parts:
            lineno += 1
            if len(part) > limit:
                raise LineTooLong(lineno)
            yield part
        if len(tail) > limit:
            raise LineTooLong(lineno + 1)
    if tail:
        yield tail


def input_lines(
    name: str | Path, names: TopicNames, meter: ReadMeter | None = None
) -> Iterator[tuple[str, str, int, int, int, bytes | None, bytes | None]]:
    """(suffix, topic, partition, offset, ts, key, value) of every record of ours in one file.

    Raises ReplayInputError for a line that is not such a record (naming file and line), and at the
    end of a file that has records but none under the prefix (listing the topics seen)."""
    known: dict[str, tuple[str, str] | None] = {}
    seen_topics: list[str] = []
    ours = 0
    lineno = 0
    prefix = names.prefix
    with open_input(name, meter) as handle:
        try:
            for lineno, line in enumerate(bounded_lines(handle), start=1):
                try:
                    obj = orjson.loads(line)
                except orjson.JSONDecodeError as exc:
                    if not line.strip():  # a blank line (looked for only when a line does not parse)
                        continue
                    try:  # bytes that are not UTF-8, kept as kcat writes them (guardian.kcat_json)
                        obj = loads_escaped(line)
                    except ValueError:
                        raise ReplayInputError(f"{name}:{lineno}: not a JSON line ({exc})") from exc
                if type(obj) is not dict:
                    raise ReplayInputError(f"{name}:{lineno}: not a JSON object")
                topic = obj.get("topic")
                partition, offset, ts = obj.get("partition"), obj.get("offset"), obj.get("ts")
                if type(topic) is not str:
                    raise ReplayInputError(f"{name}:{lineno}: needs a string 'topic'")
                if type(partition) is not int or partition < 0 or type(offset) is not int or offset < 0:
                    raise ReplayInputError(
                        f"{name}:{lineno}: 'partition' and 'offset' must be non-negative integers"
                    )
                if type(ts) is not int or not 0 <= ts < MAX_TS:
                    raise ReplayInputError(f"{name}:{lineno}: 'ts' must be a non-negative integer below 2^53")
                key, payload = obj.get("key"), obj.get("payload")
                if key is not None and type(key) is not str:
                    raise ReplayInputError(f"{name}:{lineno}: 'key' must be a string or null")
                if payload is not None and type(payload) is not str:
                    raise ReplayInputError(f"{name}:{lineno}: 'payload' must be a string or null")
                hit = known.get(topic)
                if hit is None and topic not in known:
                    suffix = names.suffix_of(topic)
                    hit = (suffix, topic) if suffix is not None else None
                    if len(known) < 1000:
                        known[topic] = hit
                    if hit is None and len(seen_topics) < _MAX_TOPICS_LISTED and topic not in seen_topics:
                        seen_topics.append(topic)
                if hit is None:
                    continue
                ours += 1
                try:
                    key_b = field_bytes(key) if key is not None else None
                    value_b = field_bytes(payload) if payload is not None else None
                except UnicodeEncodeError as exc:
                    raise ReplayInputError(
                        f"{name}:{lineno}: a string names no bytes ({exc.reason}: a lone surrogate "
                        "outside the escaped bytes \\udc80-\\udcff)"
                    ) from exc
                yield hit[0], hit[1], partition, offset, ts, key_b, value_b
        except LineTooLong as exc:
            raise ReplayInputError(
                f"{name}:{exc.lineno}: line longer than {MAX_LINE_BYTES} bytes (a record of at most "
                f"{KAFKA_MAX_MESSAGE_BYTES} bytes, Kafka's default limit, as a kcat line)"
            ) from None
        except (OSError, EOFError, zlib.error) as exc:
            raise ReplayInputError(f"{name}:{lineno + 1}: cannot read: {exc}") from exc
    if ours == 0 and seen_topics:
        listed = ", ".join(seen_topics)
        raise ReplayInputError(
            f"{name}: no topic under the prefix {prefix!r} (expected {prefix}<"
            f"{'|'.join(CONTRACT_SUFFIXES)}>; topics seen: {listed}); pass --topic-prefix"
        )


def read_kcat_lines(path: Path | str, names: TopicNames) -> Iterator[InputRecord]:
    """Records of one ``kcat -C -J`` file (``-``: stdin; gzip or not) under the prefix of ``names``.

    A line that is not such a record raises ReplayInputError naming the file and line; so does a
    file whose topics are none of ours (the message lists the topics seen and the prefix)."""
    for suffix, topic, partition, offset, ts, key, value in input_lines(path, names):
        yield InputRecord(suffix, topic, partition, offset, ts, key, value)


@dataclass(slots=True)
class SpoolBudget:
    """How much temporary disk the sorted runs may take: ``ratio`` times the input's stored bytes
    read so far, plus ``allowance`` (module docstring)."""

    meter: ReadMeter
    ratio: int = SPOOL_RATIO
    allowance: int = SPOOL_ALLOWANCE
    used: int = 0

    def spend(self, nbytes: int, name: str | Path) -> None:
        """Count a run of ``nbytes`` written while reading ``name``; ReplayInputError past the bound."""
        self.used += nbytes
        bound = self.allowance + self.ratio * self.meter.stored
        if self.used > bound:
            raise ReplayInputError(
                f"{name}: refused: its records take more than {bound} bytes of temporary disk "
                f"({self.ratio} times the {self.meter.stored} bytes read, plus {self.allowance}); "
                "a compressed input that inflates this far is not an export"
            )


__all__ = [
    "MAX_LINE_BYTES",
    "InputRecord",
    "ReadMeter",
    "ReplayInputError",
    "SpoolBudget",
    "bounded_lines",
    "input_lines",
    "open_input",
    "read_kcat_lines",
]

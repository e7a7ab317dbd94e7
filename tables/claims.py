"""The experience claims log, read: who owns an ``experience_id`` (docs/CONTRACTS.md §2 rules 9, 11).

Before a worker applies a plan whose ``experience_id`` has no settled owner, it appends a claim
(key: the experience ID, value: the plan's device ID, timestamp: the plan's receive time) to the
claims topic, which has ONE partition: every worker reads the same claims in the same order. An
experience belongs to the device of its FIRST claim in that log that its device's claim rate
allows; later claims for it (another device's, or the owner's own again after a crash) never move
it. A claim is never forgotten.

The bound (rule 12): a device's claims that win an experience are limited by a rate of receive
time, :data:`CLAIM_BURST` at once and one more every :data:`CLAIM_INTERVAL_MS` (the generic cell
rate algorithm: one integer per device). A claim beyond it is void: it owns nothing, is not kept,
and its plan is refused (``experience_rate``). Only that device's plans are refused; the other
devices' claims are not delayed, not refused and not counted against them. The claims kept are
held compactly (:mod:`tables.claim_table`: 12 bytes a claim, in a table at most two thirds full).

Start-up stays bounded: the worker that wrote the first claim past every :data:`SNAPSHOT_EVERY`
records writes a snapshot of this fold (:mod:`tables.claim_snapshot`) to the log, and the records
before the snapshot before it are removed; a worker starting reads the log from its beginning: the
records from there and the snapshot (the state before them) that follows them.

This module is the pure part: :class:`ClaimLog` folds the records read so far (``streams.claims``
does the Kafka I/O)."""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass, field
from typing import Any

from tables import claim_snapshot
from tables.claim_snapshot import ChunkMark
from tables.claim_table import ClaimTable, fingerprint

#: a device may win this many new experiences at once ...
CLAIM_BURST = 20
#: ... and one more every this many milliseconds of receive time (20 an hour, sustained)
CLAIM_INTERVAL_MS = 180_000
#: a snapshot is written every this many records of the log
SNAPSHOT_EVERY = 50_000
#: chunk marks remembered for snapshots not complete yet (a writer that died leaves one)
OPEN_SNAPSHOTS = 4

_Record = tuple[int, bytes | None, bytes | None, int, ChunkMark | None]
#: how far ahead of a claim's receive time its device's rate state may be for the claim to win
_SLACK_MS = (CLAIM_BURST - 1) * CLAIM_INTERVAL_MS


@dataclass
class ClaimRate:
    """Each device's claim rate (the generic cell rate algorithm over receive time): the time the
    device's next claim is due at; a claim more than :data:`CLAIM_BURST` - 1 intervals before it
    is void. One integer per device that has claimed, in claim order."""

    devices: list[str] = field(default_factory=list)
    index: dict[str, int] = field(default_factory=dict)
    due_ms: array[int] = field(default_factory=lambda: array("q"))

    def would_refuse(self, device_id: str, received_at_ms: int) -> bool:
        """Would ``device_id``'s claim at ``received_at_ms`` be void? A claim void now stays void
        whatever is claimed later (a device's due time only moves on)."""
        n = self.index.get(device_id)
        return n is not None and max(self.due_ms[n], received_at_ms) - received_at_ms > _SLACK_MS

    def allow(self, device_id: str, received_at_ms: int) -> bool:
        """Count ``device_id``'s claim at ``received_at_ms`` if its rate allows it; False: void."""
        n = self.index.get(device_id)
        if n is None:
            self.index[device_id] = len(self.devices)
            self.devices.append(device_id)
            self.due_ms.append(received_at_ms + CLAIM_INTERVAL_MS)
            return True
        start = max(self.due_ms[n], received_at_ms)
        if start - received_at_ms > _SLACK_MS:
            return False
        self.due_ms[n] = start + CLAIM_INTERVAL_MS
        return True


@dataclass
class ClaimLog:
    """The claims read so far, in log order, folded to experience -> owner (first allowed claim)."""

    table: ClaimTable = field(default_factory=ClaimTable)
    #: the devices that won a claim (a claim's owner is its index there), with their claim rates
    rate: ClaimRate = field(default_factory=ClaimRate)
    #: the offset of the next record to read (every record below it has been applied)
    position: int = 0
    #: records that were not a usable claim (skipped: only Guardian writes claims)
    unusable: int = 0
    #: claims void for their device's rate (their plans are refused)
    refused: int = 0
    #: the offset the latest complete snapshot read covers the log up to (0: none), and the one before
    snapshot_at: int = 0
    previous_snapshot_at: int = 0
    #: a snapshot is due every this many records (``GUARDIAN_CLAIMS_SNAPSHOT_EVERY``)
    snapshot_every: int = SNAPSHOT_EVERY
    #: the first claim at or after this offset is the one whose writer writes the next snapshot
    next_boundary: int = -1
    due: int | None = None
    #: the log was found to start at this offset: nothing is known until the snapshot covering the
    #: log up to it is read (None: nothing missing)
    awaiting: int | None = None
    _held: list[_Record] = field(default_factory=list)
    _pieces: dict[int, bytes] = field(default_factory=dict)
    _marks: dict[int, set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.next_boundary < 0:
            self.next_boundary = self.snapshot_every

    # ---- reading the log -------------------------------------------------------------------
    def read(
        self, offset: int, key: bytes | None, value: bytes | None, timestamp_ms: int = 0, headers: Any = ()
    ) -> None:
        """One record of the log, read at ``offset`` (records arrive in offset order)."""
        if offset < self.position:
            return  # read again (a re-fetch): already applied
        self.position = offset + 1
        mark = claim_snapshot.chunk_mark(headers)
        if self.awaiting is None:
            self._apply(offset, key, value, timestamp_ms, mark)
            return
        self._held.append((offset, key, None if mark is not None else value, timestamp_ms, mark))
        if mark is not None and mark.at == self.awaiting:
            self._pieces[mark.index] = value or b""
            if len(self._pieces) == mark.count:
                self._load(b"".join(self._pieces[i] for i in range(mark.count)))

    def apply(self, offset: int, key: bytes | None, value: bytes | None, timestamp_ms: int = 0) -> None:
        """A claim record (no headers) read at ``offset``."""
        self.read(offset, key, value, timestamp_ms)

    def skip_to(self, offset: int) -> None:
        """Nothing readable below ``offset`` (an empty log, or the log's start)."""
        self.position = max(self.position, offset)

    def await_snapshot(self, at: int) -> None:
        """The log starts at ``at`` (> 0) and the records before it are gone (the broker removed
        them after a snapshot): hold what is read until the snapshot covering them is read."""
        self.awaiting = at
        self.position = max(self.position, at)
        self._held.clear()
        self._pieces.clear()

    @property
    def complete(self) -> bool:
        """Is nothing of the log below :attr:`position` missing?"""
        return self.awaiting is None

    def has_read(self, offset: int) -> bool:
        """Has the record at ``offset`` (and so everything before it) been applied?"""
        return self.awaiting is None and self.position > offset

    def _apply(
        self, offset: int, key: bytes | None, value: bytes | None, ts: int, mark: ChunkMark | None
    ) -> None:
        if mark is not None:
            self._chunk(mark)
            return
        if offset >= self.next_boundary:
            self.due = offset
            self.next_boundary = offset + self.snapshot_every
        try:
            experience_id = key.decode() if key is not None else ""
            device_id = value.decode() if value is not None else ""
        except UnicodeDecodeError:
            self.unusable += 1
            return
        if not experience_id or not device_id:
            self.unusable += 1
            return
        fp = fingerprint(experience_id)
        if self.table.get(fp) is not None:
            return  # claimed before: the first claim stays first
        if not self.rate.allow(device_id, ts):
            self.refused += 1
            return  # void: beyond the device's rate
        self.table.add(fp, self.rate.index[device_id])

    def _chunk(self, mark: ChunkMark) -> None:
        if mark.at < 0:
            self.unusable += 1
            return
        seen = self._marks.setdefault(mark.at, set())
        seen.add(mark.index)
        if len(seen) == mark.count:
            del self._marks[mark.at]
            if mark.at > self.snapshot_at:
                self.previous_snapshot_at, self.snapshot_at = self.snapshot_at, mark.at
        while len(self._marks) > OPEN_SNAPSHOTS:
            del self._marks[min(self._marks)]

    # ---- what the log says -----------------------------------------------------------------
    def owner(self, experience_id: str) -> str | None:
        """The settled owner (the device of the first allowed claim read), or None: none read yet."""
        n = self.table.get(fingerprint(experience_id))
        return None if n is None else self.rate.devices[n]

    def decide(self, experience_id: str, device_id: str) -> bool | None:
        """Does ``device_id`` own ``experience_id``? None while no claim for it has been read
        (the caller claims it and asks again once its own claim is read)."""
        owner = self.owner(experience_id)
        return None if owner is None else owner == device_id

    def would_refuse(self, device_id: str, received_at_ms: int) -> bool:
        """Would a claim of ``device_id`` at ``received_at_ms`` read now be void for its rate (then
        it stays void whatever is read later, so it need not be written)?"""
        return self.rate.would_refuse(device_id, received_at_ms)

    def __len__(self) -> int:
        """The number of claims held."""
        return len(self.table)

    def memory_bytes(self) -> int:
        """About the bytes the claims hold: the table's arrays, the devices' rates and names."""
        keys, owners, rate = self.table.keys, self.table.owners, self.rate
        arrays = keys.itemsize * len(keys) + owners.itemsize * len(owners) + 8 * len(rate.due_ms)
        names = sum(sys.getsizeof(d) for d in rate.devices)
        return arrays + names + sys.getsizeof(rate.devices) + sys.getsizeof(rate.index)

    # ---- snapshots -------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """Everything this fold knows, covering the log up to :attr:`position`."""
        return claim_snapshot.encode(*self.snapshot_parts())

    def snapshot_parts(self) -> tuple[dict[str, Any], tuple[bytes, bytes, bytes]]:
        """:meth:`snapshot`'s fields and arrays (copies), before they are encoded."""
        if self.awaiting is not None:
            raise RuntimeError("the claims log is not read completely: no snapshot of it")
        fields = {
            "position": self.position,
            "unusable": self.unusable,
            "refused": self.refused,
            "snapshot_at": self.snapshot_at,
            "previous_snapshot_at": self.previous_snapshot_at,
            "next_boundary": self.next_boundary,
            "due": self.due,
            "devices": list(self.rate.devices),
        }
        keys, owners = self.table.to_bytes()
        return fields, (self.rate.due_ms.tobytes(), keys, owners)

    def _load(self, data: bytes) -> None:
        fields, (due_ms, keys, owners) = claim_snapshot.decode(data)
        table = ClaimTable.from_bytes(keys, owners)
        rates = array("q")
        rates.frombytes(due_ms)
        devices = [str(d) for d in fields["devices"]]
        if len(rates) != len(devices) or int(fields["position"]) != self.awaiting:
            raise claim_snapshot.SnapshotError("a claims snapshot that does not fit the log")
        held = self._held
        self.table = table
        self.rate = ClaimRate(devices, {d: n for n, d in enumerate(devices)}, rates)
        self.unusable, self.refused = int(fields["unusable"]), int(fields["refused"])
        self.snapshot_at = int(fields["snapshot_at"])
        self.previous_snapshot_at = int(fields["previous_snapshot_at"])
        self.next_boundary = int(fields["next_boundary"])
        self.due = None if fields["due"] is None else int(fields["due"])
        self.awaiting, self._held, self._pieces = None, [], {}
        for record in held:
            self._apply(*record)

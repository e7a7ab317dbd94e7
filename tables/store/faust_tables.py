"""The RocksDB-backed faust tables and the state store the core reads and writes through them.

Every table is keyed so that a device's entries live in the partition of the device's records:
``devices`` by ``device_id`` (device state, experience state, applied offsets and the outputs of
uncommitted records in one value, so a record's effects land atomically; the experience's plan once
under its own key), ``seen`` (the dedup memory, one small key per seen event:
``device_id \x1f event_id`` -> receive time). ``owners`` (experience -> device, for
``cross_device``) is a global table every worker reads whole; its keys are written in the partition
of the plan's record. All three are written in batches (``tables.store.writes``) in the partition of the
record being processed.

The app is passed in (``define_tables(app)``): this package never imports ``streams``. So is the
access to the stores' per-partition RocksDB databases (:class:`StoreAccess`, which
``streams.seam.table_writes.RocksStores`` implements: faust keeps them below its public surface).

This module owns the store over the tables (:class:`FaustStore`, :class:`PartitionStore`); the tables
and their RocksDB options are declared in ``tables.store.guardian_tables``, a device's stored value
and the table's keys are ``tables.store.device_entry`` (all re-exported here).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from tables.claims import ClaimLog
from tables.plan_parts import PlanParts, compact
from tables.state import DeviceState, ExperienceState
from tables.store.device_entry import (
    PLAN_PREFIX,
    DeviceEntry,
    devices_changelog_rank,
    is_entry_key,
    plan_in,
    plan_key,
)
from tables.store.guardian_tables import (
    ROCKSDB_OPTIONS,
    ROCKSDB_SHARED_BLOCK_CACHE,
    ROCKSDB_SHARED_WRITE_BUFFERS,
    TABLE_NAMES,
    GuardianTables,
    define_tables,
)
from tables.store.writes import Pending, PendingWrites
from topics.envelope import Coords, Out

__all__ = [
    "CACHE_SIZE",
    "OUTPUT_LOG",
    "PLAN_PREFIX",
    "ROCKSDB_OPTIONS",
    "ROCKSDB_SHARED_BLOCK_CACHE",
    "ROCKSDB_SHARED_WRITE_BUFFERS",
    "SEP",
    "TABLE_NAMES",
    "DeviceEntry",
    "FaustStore",
    "GuardianTables",
    "PartitionStore",
    "define_tables",
    "devices_changelog_rank",
    "is_entry_key",
    "plan_key",
]

SEP = "\x1f"
#: how many records with outputs a device's state remembers the outputs of (crash re-reads)
OUTPUT_LOG = 8
#: decoded states kept in memory (write-through; about 9 KB each, plans shared); cleared on
#: every rebalance
CACHE_SIZE = 16_384


log = logging.getLogger(__name__)


class _LRU:
    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict[str, Any] = OrderedDict()

    def get(self, key: str) -> Any:
        value = self.data.get(key)
        if value is not None:
            self.data.move_to_end(key)
        return value

    def put(self, key: str, value: Any) -> None:
        self.data[key] = value
        self.data.move_to_end(key)
        if len(self.data) > self.size:
            self.data.popitem(last=False)

    def clear(self) -> None:
        self.data.clear()


@dataclass
class FaustStore:
    """``pipeline.runner.StateStore`` over the faust tables, with a write-through cache.

    A device's state, its experience, the input offsets applied to them and the outputs of its last
    records are one value of the ``devices`` table, written once per record (``commit``): after a
    crash, a re-read record that this value already reflects gives back its recorded outputs, one
    that it does not is processed from the state it was first processed from — either way the same
    outputs with the same contents. The cache only saves decoding; it is cleared when partitions
    move, since another worker may have changed a partition this one gets back.

    Writes of ``devices`` and ``seen`` go to :class:`tables.store.writes.PendingWrites` (flushed by the
    stream once per batch). Each read and write takes the partition of the record being processed
    (``partition``; None outside one: reads look in every partition, writes are refused); the
    stream hands the processor :meth:`at` its record's partition, a :class:`PartitionStore`.
    """

    tables: GuardianTables
    writes: PendingWrites
    cache: _LRU = field(default_factory=lambda: _LRU(CACHE_SIZE))
    plan_parts: PlanParts = field(default_factory=PlanParts)
    #: ``"suffix:partition"`` -> the input's committed offset (records before it are never read
    #: again, so their logged outputs can go); None: keep the last ``OUTPUT_LOG``
    committed: Callable[[str], int | None] | None = None
    #: the claims log read so far (``tables.claims``): its owner, when it has one, is the owner
    claims: ClaimLog | None = None

    #: experience -> owner device, as found in the owner index (an owner never changes: the first
    #: writer wins and is never overwritten); cleared with the cache
    owners_known: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.writes.order["devices"] = devices_changelog_rank

    def clear_cache(self) -> None:
        self.cache.clear()
        self.owners_known.clear()

    def at(self, partition: int) -> PartitionStore:
        """The store for the records of ``partition`` (``pipeline.runner.StateStore``)."""
        return PartitionStore(self, partition)

    def _read(self, table: str, key: bytes, partition: int | None) -> bytes | None:
        if partition is None:
            return self.writes.find(table, key)
        return self.writes.get(table, partition, key)

    def _write(self, table: str, key: bytes, value: Pending, partition: int | None) -> None:
        """Set (None: delete) ``key`` in the partition of the record being processed."""
        if partition is None:
            raise RuntimeError(f"a write to {table} outside a record of a known partition")
        self.writes.put(table, partition, key, value)

    def _entry(self, device_id: str, partition: int | None) -> DeviceEntry:
        entry: DeviceEntry | None = self.cache.get(device_id)
        if entry is None:
            raw = self._read("devices", device_id.encode(), partition)
            plans = self._plans_of(partition)
            entry = DeviceEntry.from_json(raw, plans) if raw is not None else DeviceEntry()
            if entry.experience is not None:
                entry.experience.plan = self.plan_parts.share(entry.experience.plan)
            self.cache.put(device_id, entry)
        return entry

    def _plans_of(self, partition: int | None) -> Callable[[str], bytes | None]:
        """Reads a plan stored under its own key, in ``partition`` (None: in any)."""

        def plan_of(experience_id: str) -> bytes | None:
            return self._read("devices", plan_key(experience_id), partition)

        return plan_of

    def get_device(self, device_id: str, partition: int | None = None) -> DeviceState | None:
        return self._entry(device_id, partition).device

    def put_device(self, state: DeviceState, partition: int | None = None) -> None:
        self._entry(state.device_id, partition).device = state

    def get_experience(self, device_id: str, partition: int | None = None) -> ExperienceState | None:
        return self._entry(device_id, partition).experience

    def put_experience(self, state: ExperienceState, partition: int | None = None) -> None:
        self._entry(state.device_id, partition).experience = state

    def applied_outputs(
        self, device_id: str, coords: Coords, partition: int | None = None
    ) -> list[Out] | None:
        entry = self._entry(device_id, partition)
        last = entry.applied.get(coords.stream)
        if last is None or coords.offset > last:
            return None
        if partition is not None:
            # a re-read after a crash: the local value (RocksDB is written before the changelog
            # is sent) may never have reached the changelog; write it again, identical
            self._write("devices", device_id.encode(), entry, partition)
            if entry.experience is not None:
                exp = entry.experience
                self._write("devices", plan_key(exp.experience_id), orjson.dumps(exp.plan), partition)
        key = str(coords)
        for logged, outs in entry.log:
            if logged == key:
                return [Out(kind, k, value) for kind, k, value in orjson.loads(outs)]
        return []

    def commit(self, device_id: str, coords: Coords, outs: list[Out], partition: int | None = None) -> None:
        entry = self._entry(device_id, partition)
        entry.applied[coords.stream] = coords.offset
        if entry.log and self.committed is not None:
            entry.log = [item for item in entry.log if not self._committed(item[0])]
        if outs:
            entry.log.append((str(coords), compact(orjson.dumps([[o.kind, o.key, o.value] for o in outs]))))
            if len(entry.log) > OUTPUT_LOG:
                del entry.log[: len(entry.log) - OUTPUT_LOG]
        exp = entry.experience
        if exp is not None and entry.plan_stored != exp.experience_id:
            if entry.plan_stored is not None:
                self._write("devices", plan_key(entry.plan_stored), None, partition)
            self._write("devices", plan_key(exp.experience_id), orjson.dumps(exp.plan), partition)
            entry.plan_stored = exp.experience_id
            exp.plan = self.plan_parts.share(exp.plan)
        # encoded once per batch, at the flush, however many of the batch's records changed it
        self._write("devices", device_id.encode(), entry, partition)

    def _committed(self, coords: str) -> bool:
        stream, _, offset = coords.rpartition(":")
        assert self.committed is not None
        done = self.committed(stream)
        return done is not None and int(offset) < done

    def pending_experiences(self) -> Iterator[tuple[int, ExperienceState]]:
        """(partition, experience) of every local experience with triggers awaiting a decision."""
        for partition, db in sorted(self.tables.access.dbs(self.tables.devices).items()):
            for key, raw in db.items():
                if not is_entry_key(bytes(key)):
                    continue
                exp = DeviceEntry.from_json(bytes(raw), plan_in(db)).experience
                if exp is not None and exp.pending:
                    yield int(partition), exp

    def device_partitions(self) -> list[int]:
        """The partitions whose device databases this worker holds, in order."""
        return sorted(int(p) for p in self.tables.access.dbs(self.tables.devices))

    def due_devices_in(
        self, partition: int, from_key: bytes | None, max_scan: int
    ) -> tuple[list[tuple[str, int]], bytes | None]:
        """A slice of the local devices with something falling due (a pending debounce change, a
        precondition deadline), the timer's work after recovery: ``(device_id, due ms)`` among at
        most ``max_scan`` keys of ``partition`` from ``from_key`` on (None: its first), and the key
        to go on from (None: through to the end). A fresh iterator per slice: none is kept across
        the event loop's turns (a rebalance may close the store meanwhile). An unreadable entry is
        logged and skipped."""
        db = self.tables.access.db(self.tables.devices, partition)
        items = db.items(from_key=from_key) if from_key is not None else db.items()
        found: list[tuple[str, int]] = []
        scanned = 0
        for key, raw in items:
            if scanned >= max_scan:
                return found, bytes(key)
            scanned += 1
            if not is_entry_key(bytes(key)):
                continue  # a plan, or faust's own bookkeeping (persisted offsets)
            try:
                device_id = bytes(key).decode()
                entry = DeviceEntry.from_json(bytes(raw))
            except (UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
                log.error("guardian: unreadable device entry %r in partition %s: %r", key, partition, exc)
                continue
            due = entry.device.next_due_ms() if entry.device is not None else None
            if due is not None:
                found.append((device_id, due))
        return found, None

    def get_seen(self, device_id: str, event_id: str, partition: int | None = None) -> tuple[int, str] | None:
        raw = self._read("seen", f"{device_id}{SEP}{event_id}".encode(), partition)
        if raw is None:
            return None
        received, _, coords = raw.decode().partition(" ")
        return int(received), coords

    def put_seen(
        self, device_id: str, event_id: str, received_at_ms: int, coords: Coords, partition: int | None = None
    ) -> None:
        key = f"{device_id}{SEP}{event_id}".encode()
        self._write("seen", key, f"{received_at_ms} {coords}".encode(), partition)

    def forget_seen(self, key: bytes, partition: int) -> None:
        """Drop one dedup key of ``partition`` (the sweep)."""
        self._write("seen", key, None, partition)

    def owner_of(self, experience_id: str, partition: int | None = None) -> str | None:
        # the claims log decides (the first claim, the same on every worker); the owner index
        # still answers for experiences the log has no claim for (e.g. from before the log)
        if self.claims is not None:
            claimed = self.claims.owner(experience_id)
            if claimed is not None:
                return claimed
        # the global table holds every partition locally; an experience's owner is written in the
        # partition of its device's records, so the current one is looked at first (faust's own
        # lookup scans the partitions in turn once its small key index has forgotten the key)
        known = self.owners_known.get(experience_id)
        if known is not None:
            return known
        found = self._owner_of(experience_id, partition)
        if found is not None:
            if len(self.owners_known) >= CACHE_SIZE:
                self.owners_known.clear()
            self.owners_known[experience_id] = found
        return found

    def _owner_of(self, experience_id: str, partition: int | None) -> str | None:
        key = experience_id.encode()
        waiting, raw_pending = self.writes.pending("owners", key)
        if waiting:
            return None if raw_pending is None else raw_pending.decode()
        dbs = self.tables.access.dbs(self.tables.owners)
        first = dbs.get(partition) if partition is not None else None
        if first is not None:
            raw = first.get(key)
            if raw is not None:
                return bytes(raw).decode()
        for db in list(dbs.values()):
            if db is not first and db.key_may_exist(key):
                raw = db.get(key)
                if raw is not None:
                    return bytes(raw).decode()
        return None

    def put_owner(self, experience_id: str, device_id: str, partition: int | None = None) -> None:
        self._write("owners", experience_id.encode(), device_id.encode(), partition)


@dataclass(frozen=True, slots=True)
class PartitionStore:
    """``pipeline.runner.StateStore`` for the records of one partition: :class:`FaustStore` with
    the partition passed to every read and write."""

    store: FaustStore
    partition: int

    def applied_outputs(self, device_id: str, coords: Coords) -> list[Out] | None:
        return self.store.applied_outputs(device_id, coords, self.partition)

    def commit(self, device_id: str, coords: Coords, outs: list[Out]) -> None:
        self.store.commit(device_id, coords, outs, self.partition)

    def get_device(self, device_id: str) -> DeviceState | None:
        return self.store.get_device(device_id, self.partition)

    def put_device(self, state: DeviceState) -> None:
        self.store.put_device(state, self.partition)

    def get_experience(self, device_id: str) -> ExperienceState | None:
        return self.store.get_experience(device_id, self.partition)

    def put_experience(self, state: ExperienceState) -> None:
        self.store.put_experience(state, self.partition)

    def get_seen(self, device_id: str, event_id: str) -> tuple[int, str] | None:
        return self.store.get_seen(device_id, event_id, self.partition)

    def put_seen(self, device_id: str, event_id: str, received_at_ms: int, coords: Coords) -> None:
        self.store.put_seen(device_id, event_id, received_at_ms, coords, self.partition)

    def forget_seen(self, key: bytes) -> None:
        self.store.forget_seen(key, self.partition)

    def owner_of(self, experience_id: str) -> str | None:
        return self.store.owner_of(experience_id, self.partition)

    def put_owner(self, experience_id: str, device_id: str) -> None:
        self.store.put_owner(experience_id, device_id, self.partition)

    def claim(self, experience_id: str, device_id: str, received_at_ms: int) -> bool:
        # the plan reaches the core only once its claim is read back or known void (the shell):
        # with a claims log, a free experience here means its claim was void (§2 rule 12)
        return self.store.claims is None

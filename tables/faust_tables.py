"""The RocksDB-backed faust tables and the state store the core reads and writes through them.

Every table is keyed so that a device's entries live in the partition of the device's records:
``devices`` by ``device_id`` (device state, experience state, applied offsets and recent outputs in
one value, so a record's effects land atomically); ``seen`` (the dedup memory, one small key per
seen event: ``device_id \\x1f event_id`` -> receive time) is written while the device's record is
the current event, so its changelog partition is the record's. ``owners`` (experience -> device,
for ``cross_device``) is a global table every worker reads whole.

The app is passed in (``define_tables(app)``): this package never imports ``streams``.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from tables.state import DeviceState, ExperienceState
from topics.envelope import Coords, Out

SEP = "\x1f"
#: how many records with outputs a device's state remembers the outputs of (crash re-reads)
OUTPUT_LOG = 8
#: decoded states kept in memory (write-through); cleared on every rebalance
CACHE_SIZE = 2_000
#: per partition database of every table
ROCKSDB_OPTIONS = {
    "write_buffer_size": 4 * 1024**2,
    "max_write_buffer_number": 2,
    "block_cache_size": 16 * 1024**2,
}


@dataclass
class GuardianTables:
    devices: Any
    seen: Any
    owners: Any

    def all(self) -> list[Any]:
        return [self.devices, self.seen, self.owners]


def define_tables(app: Any, partitions: int) -> GuardianTables:
    """Declare the tables on ``app`` (raw bytes in and out: the states serialise themselves)."""
    common: dict[str, Any] = {
        "partitions": partitions,
        "key_type": bytes,
        "value_type": bytes,
        # faust's RocksDB defaults (64 MiB memtables x3, a 2 GiB block cache) are per partition
        # database: with three tables of eight partitions that is far past a worker's memory budget
        "options": dict(ROCKSDB_OPTIONS),
    }
    return GuardianTables(
        devices=app.Table("devices", help="device + experience state, applied offsets, output log", **common),
        seen=app.Table("seen", help="dedup memory: one key per seen event", **common),
        owners=app.GlobalTable("owners", help="experience_id -> device_id", **common),
    )


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
class DeviceEntry:
    """One device's whole state: written as ONE table value, so it lands atomically."""

    device: DeviceState | None = None
    experience: ExperienceState | None = None
    #: "suffix:partition" -> the last offset applied to this state
    applied: dict[str, int] = field(default_factory=dict)
    #: outputs of the last records that had any: [coords, [[kind, key, value], ...]]
    log: list[list[Any]] = field(default_factory=list)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "d": self.device.to_obj() if self.device else None,
                "e": self.experience.to_obj() if self.experience else None,
                "applied": self.applied,
                "log": self.log,
            }
        )

    @classmethod
    def from_json(cls, raw: bytes) -> DeviceEntry:
        d = orjson.loads(raw)
        return cls(
            device=DeviceState.from_obj(d["d"]) if d.get("d") else None,
            experience=ExperienceState.from_obj(d["e"]) if d.get("e") else None,
            applied=dict(d.get("applied") or {}),
            log=list(d.get("log") or []),
        )


@dataclass
class FaustStore:
    """``pipeline.runner.StateStore`` over the faust tables, with a write-through cache.

    A device's state, its experience, the input offsets applied to them and the outputs of its last
    records are one value of the ``devices`` table, written once per record (``commit``): after a
    crash, a re-read record that this value already reflects gives back its recorded outputs, one
    that it does not is processed from the state it was first processed from — either way the same
    outputs with the same contents. The cache only saves decoding; it is cleared when partitions
    move, since another worker may have changed a partition this one gets back.
    """

    tables: GuardianTables
    cache: _LRU = field(default_factory=lambda: _LRU(CACHE_SIZE))

    def clear_cache(self) -> None:
        self.cache.clear()

    def _entry(self, device_id: str) -> DeviceEntry:
        entry: DeviceEntry | None = self.cache.get(device_id)
        if entry is None:
            raw = self.tables.devices.get(device_id.encode())
            entry = DeviceEntry.from_json(raw) if raw is not None else DeviceEntry()
            self.cache.put(device_id, entry)
        return entry

    def get_device(self, device_id: str) -> DeviceState | None:
        return self._entry(device_id).device

    def put_device(self, state: DeviceState) -> None:
        self._entry(state.device_id).device = state

    def get_experience(self, device_id: str) -> ExperienceState | None:
        return self._entry(device_id).experience

    def put_experience(self, state: ExperienceState) -> None:
        self._entry(state.device_id).experience = state

    def applied_outputs(self, device_id: str, coords: Coords) -> list[Out] | None:
        entry = self._entry(device_id)
        last = entry.applied.get(coords.stream)
        if last is None or coords.offset > last:
            return None
        key = str(coords)
        for logged, outs in entry.log:
            if logged == key:
                return [Out(kind, k, value) for kind, k, value in outs]
        return []

    def commit(self, device_id: str, coords: Coords, outs: list[Out]) -> None:
        entry = self._entry(device_id)
        entry.applied[coords.stream] = coords.offset
        if outs:
            entry.log.append([str(coords), [[o.kind, o.key, o.value] for o in outs]])
            if len(entry.log) > OUTPUT_LOG:
                del entry.log[: len(entry.log) - OUTPUT_LOG]
        self.tables.devices[device_id.encode()] = entry.to_json()

    def pending_experiences(self) -> Iterator[tuple[int, ExperienceState]]:
        """(partition, experience) of every local experience with triggers awaiting a decision."""
        for partition, db in sorted(getattr(self.tables.devices.data, "_dbs", {}).items()):
            for key, raw in db.items():
                if bytes(key).startswith(b"__faust"):
                    continue
                exp = DeviceEntry.from_json(bytes(raw)).experience
                if exp is not None and exp.pending:
                    yield int(partition), exp

    def get_seen(self, device_id: str, event_id: str) -> tuple[int, str] | None:
        raw = self.tables.seen.get(f"{device_id}{SEP}{event_id}".encode())
        if raw is None:
            return None
        received, _, coords = bytes(raw).decode().partition(" ")
        return int(received), coords

    def put_seen(self, device_id: str, event_id: str, received_at_ms: int, coords: Coords) -> None:
        self.tables.seen[f"{device_id}{SEP}{event_id}".encode()] = f"{received_at_ms} {coords}".encode()

    def owner_of(self, experience_id: str) -> str | None:
        raw = self.tables.owners.get(experience_id.encode())
        return None if raw is None else bytes(raw).decode()

    def put_owner(self, experience_id: str, device_id: str) -> None:
        self.tables.owners[experience_id.encode()] = device_id.encode()

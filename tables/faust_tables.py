"""The RocksDB-backed faust tables and the state store the core reads and writes through them.

Every table is keyed so that a device's entries live in the partition of the device's records:
``devices`` and ``experiences`` by ``device_id``; ``seen`` (the dedup memory, one small key per
seen event: ``device_id \\x1f event_id`` -> receive time) is written while the device's record is
the current event, so its changelog partition is the record's. ``owners`` (experience -> device,
for ``cross_device``) is a global table every worker reads whole.

The app is passed in (``define_tables(app)``): this package never imports ``streams``.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from tables.state import DeviceState, ExperienceState

SEP = "\x1f"
#: decoded states kept in memory (write-through); cleared on every rebalance
CACHE_SIZE = 20_000


@dataclass
class GuardianTables:
    devices: Any
    experiences: Any
    seen: Any
    owners: Any

    def all(self) -> list[Any]:
        return [self.devices, self.experiences, self.seen, self.owners]


def define_tables(app: Any, partitions: int) -> GuardianTables:
    """Declare the tables on ``app`` (raw bytes in and out: the states serialise themselves)."""
    common: dict[str, Any] = {
        "partitions": partitions,
        "key_type": bytes,
        "value_type": bytes,
    }
    return GuardianTables(
        devices=app.Table("devices", help="device snapshot, debounce, task sequence", **common),
        experiences=app.Table("experiences", help="experience.state.v1 by device", **common),
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
class FaustStore:
    """:class:`pipeline.runner.StateStore` over the faust tables, with a write-through cache.

    Writes go to the table (RocksDB + changelog) at once; only decoding is saved by the cache. It
    must be cleared when partitions move (``clear_cache``), since another worker may have changed
    a partition this one gets back.
    """

    tables: GuardianTables
    devices_cache: _LRU = field(default_factory=lambda: _LRU(CACHE_SIZE))
    experiences_cache: _LRU = field(default_factory=lambda: _LRU(CACHE_SIZE))

    def clear_cache(self) -> None:
        self.devices_cache.clear()
        self.experiences_cache.clear()

    def get_device(self, device_id: str) -> DeviceState | None:
        state: DeviceState | None = self.devices_cache.get(device_id)
        if state is None:
            raw = self.tables.devices.get(device_id.encode())
            if raw is None:
                return None
            state = DeviceState.from_json(raw)
            self.devices_cache.put(device_id, state)
        return state

    def put_device(self, state: DeviceState) -> None:
        self.tables.devices[state.device_id.encode()] = state.to_json()
        self.devices_cache.put(state.device_id, state)

    def get_experience(self, device_id: str) -> ExperienceState | None:
        state: ExperienceState | None = self.experiences_cache.get(device_id)
        if state is None:
            raw = self.tables.experiences.get(device_id.encode())
            if raw is None:
                return None
            state = ExperienceState.from_json(raw)
            self.experiences_cache.put(device_id, state)
        return state

    def put_experience(self, state: ExperienceState) -> None:
        self.tables.experiences[state.device_id.encode()] = state.to_json()
        self.experiences_cache.put(state.device_id, state)

    def get_seen(self, device_id: str, event_id: str) -> int | None:
        raw = self.tables.seen.get(f"{device_id}{SEP}{event_id}".encode())
        return None if raw is None else int(raw)

    def put_seen(self, device_id: str, event_id: str, received_at_ms: int) -> None:
        self.tables.seen[f"{device_id}{SEP}{event_id}".encode()] = str(received_at_ms).encode()

    def owner_of(self, experience_id: str) -> str | None:
        raw = self.tables.owners.get(experience_id.encode())
        return None if raw is None else bytes(raw).decode()

    def put_owner(self, experience_id: str, device_id: str) -> None:
        self.tables.owners[experience_id.encode()] = device_id.encode()

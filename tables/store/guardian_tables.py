"""The three faust tables of a worker (:class:`GuardianTables`: ``devices``, ``seen``, ``owners``),
their declaration on the app (:func:`define_tables`) and the RocksDB options they run with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tables.store.writes import StoreAccess

#: per partition database of every table
ROCKSDB_OPTIONS = {
    "write_buffer_size": 4 * 1024**2,
    "max_write_buffer_number": 2,
    # faust's own cache per database; a worker replaces it by ROCKSDB_SHARED_BLOCK_CACHE below
    "block_cache_size": 4 * 1024**2,
    # bits per key of the Bloom filters: most lookups are misses (a dedup key seen for the first
    # time, an owner looked for in another partition's database), which a filter answers without
    # reading a block; faust's default of 3 bits lets about a quarter of them read one
    "bloom_filter_size": 10,
}
#: one block cache for every partition database of every table of a worker (instead of faust's
#: one per database, ``block_cache_size`` above): a device's entry is read from RocksDB once and
#: then served from the store's own cache, so cached blocks are rarely read twice
ROCKSDB_SHARED_BLOCK_CACHE = 8 * 1024**2
#: one memtable budget for all of them (``write_buffer_size`` x ``max_write_buffer_number`` above
#: bounds one database only: 8 MB x 24 databases): past it, the database being written flushes
#: its memtable to disk sooner. At 10,000 devices the memtables held about 35 MB (the dedup keys
#: of a run are never flushed otherwise)
ROCKSDB_SHARED_WRITE_BUFFERS = 16 * 1024**2

#: the tables, by name (faust names their changelog topics ``<app id>-<name>-changelog``)
TABLE_NAMES = ("devices", "seen", "owners")


@dataclass
class GuardianTables:
    devices: Any
    seen: Any
    owners: Any
    #: how the stores' partition databases are reached (``streams.seam.table_writes.RocksStores``)
    access: StoreAccess

    def all(self) -> list[Any]:
        """Every table (all of them are written in batches)."""
        return list(self.batched().values())

    def batched(self) -> dict[str, Any]:
        """The tables written in batches (``tables.store.writes``), by name: all of them."""
        return {"devices": self.devices, "seen": self.seen, "owners": self.owners}


def define_tables(app: Any, partitions: int, access: StoreAccess) -> GuardianTables:
    """Declare the tables on ``app`` (raw bytes in and out: the states serialise themselves)."""
    common: dict[str, Any] = {
        "partitions": partitions,
        "key_type": bytes,
        "value_type": bytes,
        # faust's RocksDB defaults (64 MiB memtables x3, a 2 GiB block cache) are per partition
        # database: with three tables of eight partitions that is far past a worker's memory budget
        "options": dict(ROCKSDB_OPTIONS),
    }
    devices, seen, owners = TABLE_NAMES
    return GuardianTables(
        devices=app.Table(devices, help="device + experience state, applied offsets, output log", **common),
        seen=app.Table(seen, help="dedup memory: one key per seen event", **common),
        owners=app.GlobalTable(owners, help="experience_id -> device_id", **common),
        access=access,
    )

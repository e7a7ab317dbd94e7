"""The worker's RocksDB memory: one block cache for every partition database of every table.

A worker opens three tables of eight partitions. faust gives each database its own block cache, and
rocksdict, reopening a database that exists (every restart), replaced the cache named in the
options by a fresh 8 MB one per database. These tests open real databases through the worker's own
app, close them and open them again, as a restarted worker does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config.settings import Settings
from streams.seam.rocksdb_memory import SharedRocksOptions, share_rocksdb_memory
from tables.store.faust_tables import ROCKSDB_SHARED_BLOCK_CACHE, ROCKSDB_SHARED_WRITE_BUFFERS

PARTITIONS = 4
#: the cache's size in these tests: not rocksdict's default (8 MB), so a default cache shows
CACHE = 3 * 1024**2


@pytest.fixture(autouse=True)
def cache_size(monkeypatch: pytest.MonkeyPatch) -> None:
    import streams.worker

    assert ROCKSDB_SHARED_BLOCK_CACHE == streams.worker.ROCKSDB_SHARED_BLOCK_CACHE
    monkeypatch.setattr(streams.worker, "ROCKSDB_SHARED_BLOCK_CACHE", CACHE)


def worker_tables(data_dir: Path) -> list[Any]:
    from streams.worker import build_worker_app

    settings = Settings.from_env(
        {
            "GUARDIAN_DATA_DIR": str(data_dir),
            "GUARDIAN_TOPIC_PREFIX": "m.",
            "GUARDIAN_PARTITIONS": str(PARTITIONS),
        }
    )
    _, shell = build_worker_app(settings, bootstrap="127.0.0.1:9", worker_id="w0")
    return shell.tables.all()


def open_all(tables: list[Any]) -> list[Any]:
    return [table.data._db_for_partition(p) for table in tables for p in range(PARTITIONS)]


def close_all(dbs: list[Any]) -> None:
    for db in dbs:
        db.close()


def keys(n: int) -> int:
    """How many entries the ``n``-th database holds (each a different number)."""
    return 100 * (n + 1)


def fill(dbs: list[Any]) -> None:
    value = bytes(range(256)) * 8  # 2 KB, about a device's entry
    for n, db in enumerate(dbs):
        for i in range(keys(n)):
            db[f"dev-{i:06d}".encode()] = value
        db.flush()


def cache_usage(db: Any) -> int:
    return int(db.property_int_value("rocksdb.block-cache-usage"))


@pytest.mark.parametrize("restarted", [False, True])
def test_every_database_shares_one_bounded_block_cache(tmp_path: Path, restarted: bool) -> None:
    dbs = open_all(worker_tables(tmp_path))
    fill(dbs)
    if restarted:
        close_all(dbs)
        dbs = open_all(worker_tables(tmp_path))
    try:
        for db in dbs:
            assert db.property_int_value("rocksdb.block-cache-capacity") == CACHE
        # read every entry of every database once (0.2 to 2.4 MB each, 15 MB in all): one cache
        # holds the blocks of all of them, so every database reports the same usage, within the
        # bound (a cache of its own would hold only its own blocks)
        for n, db in enumerate(dbs):
            for i in range(keys(n)):
                assert db.get(f"dev-{i:06d}".encode()) is not None
        usages = {cache_usage(db) for db in dbs}
        assert len(usages) == 1
        assert 0 < usages.pop() <= CACHE
    finally:
        close_all(dbs)


def test_the_tables_keep_their_own_settings(tmp_path: Path) -> None:
    tables = worker_tables(tmp_path)
    for table in tables:
        options = table.data.rocksdb_options
        assert isinstance(options, SharedRocksOptions)
        assert options.bloom_filter_size == 10
        assert options.write_buffer_size == 4 * 1024**2


def test_memory_is_shared_only_before_a_database_is_opened(tmp_path: Path) -> None:
    tables = worker_tables(tmp_path)
    dbs = open_all(tables[:1])
    try:
        with pytest.raises(RuntimeError, match="after it was opened"):
            share_rocksdb_memory(tables[:1], CACHE, 0)
    finally:
        close_all(dbs)


def test_the_memtables_of_all_databases_share_one_budget(tmp_path: Path) -> None:
    """Each database's own write buffer (4 MB) would hold its 1.5 MB of writes in memory; 16
    databases x 1.5 MB pass the worker's budget, so databases flush their memtables to disk."""
    tables = worker_tables(tmp_path)
    dbs = [table.data._db_for_partition(p) for table in tables[:2] for p in range(PARTITIONS)]
    dbs += [tables[2].data._db_for_partition(p) for p in range(PARTITIONS)]
    dbs += [tables[0].data._db_for_partition(p) for p in range(PARTITIONS, 2 * PARTITIONS)]
    assert ROCKSDB_SHARED_WRITE_BUFFERS < 16 * 1.5 * 1024**2 < 16 * 4 * 1024**2
    value = bytes(range(256)) * 6
    try:
        for n, db in enumerate(dbs):
            for i in range(1_000):
                db[f"dev-{n}-{i:06d}".encode()] = value
        on_disk = sum(int(db.property_int_value("rocksdb.num-files-at-level0")) for db in dbs)
        in_memory = sum(int(db.property_int_value("rocksdb.cur-size-all-mem-tables")) for db in dbs)
        assert on_disk > 0 or in_memory < 16 * 1.5 * 1024**2
        for n, db in enumerate(dbs):  # nothing is lost on the way
            assert db.get(f"dev-{n}-{999:06d}".encode()) == value
    finally:
        close_all(dbs)

"""One block cache and one memtable budget for every RocksDB database (:class:`SharedRocksOptions`).

What faust/rocksdict does: faust builds a block cache of ``block_cache_size`` for each partition
database, and rocksdict, opening a database that already exists (a restarted worker), ignores it: it
takes the column family's options from the database's own options file, with a fresh 8 MB block
cache each.

Why we differ: a worker's three tables of eight partitions held 24 such caches, which keep every
block read: about 46 MB at 10,000 devices, up to 192 MB (faust's 4 MB setting never applied after a
restart). One cache for them all bounds that. Private part: the RocksDB store's
``rocksdb_options`` and ``_dbs``.

Upstream issue: none filed.

Proved by: ``tests/unit/test_rocksdb_memory.py``:
``test_every_database_shares_one_bounded_block_cache``,
``test_the_tables_keep_their_own_settings``, ``test_memory_is_shared_only_before_a_database_is_opened``,
``test_the_memtables_of_all_databases_share_one_budget``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import rocksdict
from faust.stores import rocksdb as faust_rocksdb

from streams.seam.parts import missing_part, part_of


class SharedRocksOptions(faust_rocksdb.RocksDBOptions):
    """faust's RocksDB options (the same settings, taken from the table's ``options``), except that
    every database opened with them uses ``cache`` as its block cache and, with ``write_buffers``,
    counts its memtables against that one budget.

    faust builds a block cache of ``block_cache_size`` for each partition database, and rocksdict,
    opening a database that already exists (a restarted worker), ignored it: it took the column
    family's options from the database's own options file, with a fresh 8 MB block cache each.
    A worker's three tables of eight partitions held 24 such caches, which keep every block read
    (a device's entry is read from RocksDB once, then served from the store's own cache): about
    46 MB at 10,000 devices, up to 192 MB. One cache for them all bounds that."""

    def __init__(self, base: Any, cache: Any, write_buffers: Any) -> None:
        super().__init__(
            max_open_files=base.max_open_files,
            write_buffer_size=base.write_buffer_size,
            max_write_buffer_number=base.max_write_buffer_number,
            target_file_size_base=base.target_file_size_base,
            block_cache_size=base.block_cache_size,
            block_cache_compressed_size=base.block_cache_compressed_size,
            bloom_filter_size=base.bloom_filter_size,
            use_rocksdict=base.use_rocksdict,
            ttl=base.ttl,
            **base.extra_options,
        )
        self.cache = cache
        self.write_buffers = write_buffers

    def open(self, path: Any, *, read_only: bool = False) -> Any:
        """faust's ``RocksDBOptions.open`` for rocksdict, with these options for the database's
        column family too: opening a database that exists, rocksdict otherwise takes the column
        family's options from the database's own options file, with a fresh 8 MB block cache
        (whatever cache the options name; ``read_only`` is ignored, as faust does for rocksdict)."""
        options = self.as_options()
        access = (
            rocksdict.AccessType.read_write() if self.ttl is None else rocksdict.AccessType.with_ttl(self.ttl)
        )
        db = rocksdict.Rdict(
            str(path), options=options, column_families={"default": options}, access_type=access
        )
        db.set_read_options(rocksdict.ReadOptions())
        return db

    def as_options(self) -> Any:
        """faust's ``RocksDBOptions.as_options`` for rocksdict, with the shared cache and budget."""
        if not self.use_rocksdict:
            raise missing_part("rocksdict as faust's RocksDB driver")
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        if self.max_open_files is not None:
            options.set_max_open_files(self.max_open_files)
        options.set_write_buffer_size(self.write_buffer_size)
        options.set_target_file_size_base(self.target_file_size_base)
        options.set_max_write_buffer_number(self.max_write_buffer_number)
        if self.write_buffers is not None:
            options.set_write_buffer_manager(self.write_buffers)
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(self.bloom_filter_size, block_based=True)
        table.set_block_cache(self.cache)
        table.set_index_type(rocksdict.BlockBasedIndexType.binary_search())
        options.set_block_based_table_factory(table)
        return options


def share_rocksdb_memory(tables: Iterable[Any], block_cache_bytes: int, write_buffer_bytes: int) -> None:
    """Give every partition database of ``tables`` one block cache of ``block_cache_bytes`` and one
    memtable budget of ``write_buffer_bytes`` (before any of them is opened)."""
    cache = rocksdict.Cache(block_cache_bytes)
    write_buffers = rocksdict.WriteBufferManager(write_buffer_bytes, False) if write_buffer_bytes else None
    for table in tables:
        store = table.data
        base = part_of(store, "rocksdb_options", "faust.stores.rocksdb.Store")
        if part_of(store, "_dbs", "faust.stores.rocksdb.Store"):
            raise RuntimeError(f"the RocksDB memory of table {table.name} is shared after it was opened")
        store.rocksdb_options = SharedRocksOptions(base, cache, write_buffers)

"""Batched table writes (:class:`RocksStores`, :func:`changelog_batches`).

What faust does: a table write (``table[key] = value``) puts one key into the partition's RocksDB
database and sends one changelog message through faust's producer buffer, per write.

Why we differ: encoding, writing and sending one entry per record took about half of a busy
worker's time. ``tables/store/writes.py`` (``PendingWrites``) keeps the last write per key of a
batch and writes one RocksDB write batch per partition database, then one Kafka record batch per
changelog partition on faust's own aiokafka producer; it reaches the partition databases through
:class:`RocksStores` (also the dedup sweep, the recovery rescan and the owner lookup). The
changelog batches are zstd-compressed (:func:`changelog_batches`): a device's entry is about
1.7 KB of JSON much like its neighbours', and the broker appends, keeps and serves to a recovering
worker 60 times fewer bytes for the bench's fleet (docs/PERFORMANCE.md); only faust's recovery
reads a changelog, and the output topics stay uncompressed. Private parts: the RocksDB store's
``_dbs`` and ``_db_for_partition``; aiokafka's ``BatchBuilder`` and its codec check.

Upstream issue: none (a cost, not a bug).

Proved by: ``tests/unit/test_pending_writes.py``:
``test_the_changelog_goes_out_zstd_compressed_and_the_outputs_uncompressed``,
``test_a_delivered_changelog_batch_advances_the_persisted_offset``,
``test_reads_see_pending_writes_and_the_last_value_of_a_key_wins``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from streams.seam.parts import missing_part, part_of


class RocksStores:
    """faust's RocksDB store internals: the open database of each partition of a table."""

    def dbs(self, table: Any) -> Mapping[int, Any]:
        """partition -> open ``Rdict`` of ``table``'s store (the partitions this worker holds)."""
        dbs = part_of(table.data, "_dbs", "faust.stores.rocksdb.Store")
        return dict(dbs)

    def db(self, table: Any, partition: int) -> Any:
        """The ``Rdict`` of ``table``'s ``partition`` (opened if needed)."""
        return part_of(table.data, "_db_for_partition", "faust.stores.rocksdb.Store")(partition)


def changelog_batches(batch_bytes: int) -> Callable[[], Any]:
    """Builds the record batches of the tables' changelogs: zstd-compressed, up to
    ``batch_bytes`` before compression (the producer's batch size).

    A device's entry is about 1.7 KB of JSON much like its neighbours', and a changelog batch
    holds hundreds of them: the broker appends, keeps and serves to a recovering worker far fewer
    bytes (60 times fewer for the bench's fleet; docs/PERFORMANCE.md). Only faust's recovery (this
    worker's own consumer) reads a changelog; the output topics stay uncompressed for whatever
    consumes them."""
    from aiokafka.codec import has_zstd
    from aiokafka.producer.message_accumulator import BatchBuilder
    from aiokafka.record.default_records import DefaultRecordBatch

    if not has_zstd():
        raise missing_part("aiokafka's zstd codec (the cramjam package)")

    def new_batch() -> Any:
        return BatchBuilder(batch_bytes, DefaultRecordBatch.CODEC_ZSTD, is_transactional=False)

    return new_batch

"""The start-up check of every private part the seam relies on, on the pinned versions."""

from __future__ import annotations

from typing import Any

import faust
from faust.transport.conductor import Conductor
from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.seam.parts import missing_part, part_of
from streams.seam.table_writes import RocksStores


def _parts_of(obj: Any, names: tuple[str, ...], where: str) -> None:
    """:func:`part_of` for each of ``names`` in turn: the first missing one raises."""
    for name in names:
        part_of(obj, name, where)


def check(app: Any, tables: list[Any]) -> None:
    """Verify, before the worker starts, every private attribute this module relies on.

    Raises :class:`SeamError` naming the installed versions and the first attribute missing."""
    from aiokafka.consumer.fetcher import Fetcher
    from faust.stores import rocksdb as faust_rocksdb
    from faust.tables.recovery import Recovery as FaustRecovery
    from faust.transport import consumer as faust_consumer
    from faust.transport import producer as faust_producer
    from faust.utils.terminal import spinners
    from mode import Service

    for cls, name in (
        (faust.App, "_new_transport"),
        (Conductor, "_build_handler"),
        (Conductor, "_compile_message_handler"),
        (Service, "wait_first"),
        (faust_consumer.Consumer, "perform_seek"),
        (faust_consumer.Consumer, "_add_gap"),
        (faust_rocksdb.Store, "_db_for_partition"),
        (faust_aiokafka.Producer, "_ensure_producer"),
        (faust_producer.ProducerBuffer, "max_messages"),
        (spinners, "SpinnerHandler"),
        (Fetcher, "_proc_fetch_request"),
    ):
        if not hasattr(cls, name):
            raise missing_part(f"{getattr(cls, '__qualname__', getattr(cls, '__name__', cls))}.{name}")
    consumer = app.consumer
    _parts_of(
        consumer,
        (
            "_committed_offset",
            "_read_offset",
            "flow_active",
            "_stopped",
            "_crashed",
            "_acked",
            "_acked_index",
            "_n_acked",
            "_waiting_for_ack",
        ),
        "faust.transport.consumer.Consumer",
    )
    _parts_of(app.topics, ("_tp_to_callback", "_tp_to_callback_lock"), "faust.transport.conductor.Conductor")
    if not isinstance(consumer, faust_consumer.Consumer):
        raise missing_part("faust.transport.consumer.Consumer as the App's consumer")
    part_of(app.producer, "_producer", "faust.transport.drivers.aiokafka.Producer")
    rec = app.tables.recovery
    _parts_of(
        rec,
        ("completed", "active_highwaters", "active_offsets", "_generation_id", "signal_recovery_start"),
        "faust.tables.recovery.Recovery",
    )
    _parts_of(app, ("consumer_generation_id", "on_rebalance_complete"), "faust.App")
    if not isinstance(rec, FaustRecovery):
        raise missing_part("faust.tables.recovery.Recovery as the table manager's recovery")
    stores = RocksStores()
    for table in tables:
        store = table.data
        if not isinstance(store, faust_rocksdb.Store):
            raise missing_part(f"a RocksDB store for table {table.name} (found {type(store).__name__})")
        stores.dbs(table)

"""The one module that touches faust's, mode's, aiokafka's and rocksdict's private parts.

Everything the worker needs below these libraries' public surface is here, and nowhere else:
:func:`check` verifies every attribute it relies on when the worker starts, and a missing one
stops the worker with the library versions and the attribute's name (never a silent fallback).
The versions verified are pinned in ``pyproject.toml``; upgrading one means running the unit and
integration tiers and this module's check.

What is used, and why:

- ``faust.App._new_transport``: the App builds :class:`EagerTransport` (below).
- ``faust.transport.conductor.Conductor._build_handler``: :class:`BatchConductor` hands chosen
  topics' messages to the pipeline's inbox instead of faust's per-message stream path; its
  ``_compile_message_handler``, ``_tp_to_callback`` and ``_tp_to_callback_lock``: the dispatch
  skips the lock nobody holds.
- the consumer's acked-offset bookkeeping (``_acked``, ``_acked_index``, ``_committed_offset``,
  ``_n_acked``, ``_waiting_for_ack``) and ``faust.types.tuples.ack_lock``: :func:`ack_all` acks a
  delivered batch at once.
- mode's ``Service.wait_first`` with ``_stopped``/``_crashed``: :class:`EagerConsumer` hands a
  fetched message over without a task per message.
- the consumer's ``perform_seek`` with ``_read_offset`` and ``_committed_offset``, and its
  ``_add_gap``: :class:`EagerConsumer` keeps the place of what was read during a seek and counts
  only missing offsets as a gap in the log.
- the RocksDB store's ``_dbs`` (partition -> open ``Rdict``) and ``_db_for_partition``: the
  batched table writes, the dedup sweep, the recovery rescan and the owner lookup read and write
  the partition databases directly (:class:`RocksStores`).
- the RocksDB store's ``rocksdb_options`` (faust's ``RocksDBOptions``, built per table from the
  table's ``options``): :func:`share_rocksdb_memory` swaps in :class:`SharedRocksOptions`, whose
  databases share one block cache (faust gives each partition database its own, and rocksdict
  replaces it by a default one when it reopens a database) and may share one memtable budget.
- ``app.producer._ensure_producer``: the running ``AIOKafkaProducer`` the batched writes go
  through (faust flushes it before every offset commit).
- ``consumer._committed_offset``: the committed offsets, to prune a device's output log.
- ``app.producer.buffer.max_messages``: the depth of faust's producer buffer.
- ``app.tables.recovery`` (``completed``, ``active_highwaters``/``active_offsets``,
  ``_generation_id``, ``signal_recovery_start``) and ``app.consumer_generation_id``: whether the
  tables are recovered for the current assignment (:class:`RecoveryWatch`; readiness, the recovery
  metrics and the quiet devices' rescan), and recovery progress.
- ``faust.utils.terminal.spinners.SpinnerHandler``: the terminal spinner's log handler, whose
  DEBUG level is undone (``restore_log_level``).
- aiokafka's ``BatchBuilder`` (the type ``create_batch`` returns, built here with a compression of
  its own) and its codec check: :func:`changelog_batches` compresses the tables' changelog
  batches with zstd while the producer leaves the output topics uncompressed.

The fetch hand-off:
faust's Kafka transport with cheaper hand-offs from the fetcher to the pipeline.

Two changes, both below faust's public surface (faust keeps the consumer group, the assignment,
fetching, flow control, acks and commits, the tables and their changelogs):

**Batches for the pipeline's own topics** (:class:`BatchConductor`). faust turns every fetched
message into an ``Event``, puts it on a channel queue and runs it through a ``Stream`` (sensors,
current event, acks), which alone bounds a faust agent that does nothing but ack. The conductor can
instead hand the messages of chosen topics straight to a sink (the pipeline's inbox, drained in
batches), after faust's flow control and with the message's reference taken as faust's own
delivery does; the same do-nothing loop then commits about twice as many messages (``guardian
bench``'s two floors; figures in docs/PERFORMANCE.md). The sink acks each message once what it
caused is delivered.

**No task per message** (:class:`EagerConsumer`).

For every fetched message faust's consumer runs ``wait_first(callback(message), suspend_flow)``:
the callback hands the message to the streams' buffers, and the race against ``suspend_flow``
lets a rebalance abandon a hand-off that is blocked (flow control suspended, a full buffer).
``mode``'s ``wait_first`` makes four tasks and an ``asyncio.wait`` per call, a large part of a
bare faust agent's cost per message (docs/PERFORMANCE.md).

:class:`EagerConsumer` runs the callback eagerly up to its first suspension: almost always it
completes right there (the buffer had room) and no task is made; if it does suspend, the started
callback joins the original race, so a blocked hand-off is abandoned exactly as before.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import (
    Awaitable,
    Callable,
    Coroutine,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    MutableSet,
)
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import faust
import rocksdict
from faust.exceptions import ConsumerNotStarted
from faust.stores import rocksdb as faust_rocksdb
from faust.transport.conductor import Conductor
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, TransportT
from faust.types.tuples import ack_lock
from mode.services import WaitResults
from mode.utils.futures import notify

#: where the batch conductor hands a message: (message) -> awaitable
Sink = Callable[[Any], Awaitable[None]]


class Started:
    """An awaitable that goes on with a coroutine already run up to its first suspension."""

    def __init__(self, coro: Coroutine[Any, Any, Any], yielded: Any) -> None:
        self.coro = coro
        self.yielded = yielded

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, value = self.coro, self.yielded
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - relayed into the coroutine, as `await` does
                try:
                    value = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    value = coro.send(sent)
                except StopIteration as stop:
                    return stop.value


async def _finish(started: Started) -> Any:
    return await started


def run_eagerly(coro: Coroutine[Any, Any, Any]) -> tuple[bool, Any]:
    """Run ``coro`` up to its first suspension: ``(True, result)`` if it finished there, else
    ``(False, awaitable)`` to wait for the rest. Its exceptions propagate."""
    try:
        yielded = coro.send(None)
    except StopIteration as stop:
        return True, stop.value
    return False, _finish(Started(coro, yielded))


#: how long the broker may hold a fetch of a worker's inputs that finds nothing new (faust fixes 1.5 s)
FETCH_MAX_WAIT_MS = 100
#: while records flow (the last fetch brought some), a fetch asks the broker to gather this much
#: before it answers (faust: any byte) ...
FETCH_GATHER_BYTES = 64 * 1024
#: ... or to answer after this long
FETCH_GATHER_MS = 10


class ShortFetchConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """faust's consumer thread, its aiokafka consumer asking the broker to hold a fetch that finds
    nothing new at most ``FETCH_MAX_WAIT_MS`` instead of faust's fixed 1.5 s, and gathering its
    fetches while records flow (:func:`gather_while_flowing`).

    The wait: aiokafka leaves a partition whose fetched records are not yet handed over out of the
    next fetch request, and sends one request at a time to a broker: a request sent while every busy
    partition was still being handed over asked only for quiet ones (plans, control at a steady load
    of observations), the broker held it the whole wait, and the next observations waited behind it
    (trigger to dispatch up to 1.6 s in ``guardian bench``'s slowest probes, all of it in the fetch
    stage)."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        part_of(consumer, "_fetch_max_wait_ms", "aiokafka.AIOKafkaConsumer")
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        start = consumer.start

        async def start_gathering() -> None:
            await start()
            gather_while_flowing(part_of(consumer, "_fetcher", "aiokafka.AIOKafkaConsumer"))

        consumer.start = start_gathering
        return consumer


def gather_while_flowing(fetcher: Any) -> None:
    """Make each fetch request of aiokafka's ``fetcher`` by what the last one brought: after records,
    ask the broker to gather ``FETCH_GATHER_BYTES`` or answer after ``FETCH_GATHER_MS``; after none,
    to answer at the first byte or after ``FETCH_MAX_WAIT_MS``.

    Answered at the first byte, a worker under a steady load fetched as fast as requests could go
    round, a record or two per fetch, each fetch costing its consumer thread and the hand-off to
    the event loop about the same whatever it carried (about a fifth of a core at a quarter of its
    maximum load in ``guardian bench``, docs/PERFORMANCE.md); gathering always would have an idle
    worker ask ten times as often as now. The first record after a quiet spell is answered at once
    as before; behind a backlog the broker has the bytes at once either way."""
    proc = part_of(fetcher, "_proc_fetch_request", "aiokafka.consumer.fetcher.Fetcher")
    part_of(fetcher, "_fetch_min_bytes", "aiokafka.consumer.fetcher.Fetcher")
    part_of(fetcher, "_fetch_max_wait_ms", "aiokafka.consumer.fetcher.Fetcher")

    async def proc_fetch_request(*args: Any) -> Any:
        brought = await proc(*args)  # True when records (or an error to raise) came for a partition
        if brought:
            fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms = FETCH_GATHER_BYTES, FETCH_GATHER_MS
        else:
            fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms = 1, FETCH_MAX_WAIT_MS
        return brought

    fetcher._proc_fetch_request = proc_fetch_request


class ReadOffsets(dict[Any, Any]):
    """faust's read offsets (topic-partition -> the last offset its fetch loop handed over), read
    as unknown for the topics handed to the pipeline (:class:`BatchConductor`).

    faust's fetch loop drops a record below its read offset and takes a jump past it for offsets
    missing from the log. Around a rebalance that offset can be ahead of what the pipeline was
    given (records fetched before the rebalance, dropped with the inbox), and the records read
    again were dropped: the pipeline checks each partition's order itself
    (``PipelineShell.in_order``: a record seen already is skipped there, a record past the next
    one makes it read the partition again), so for its topics faust hands over every record."""

    def __init__(self, batch_topics: Callable[[], frozenset[str]]) -> None:
        super().__init__()
        self.batch_topics = batch_topics

    def __missing__(self, tp: Any) -> None:
        return None

    def __getitem__(self, tp: Any) -> Any:
        if tp.topic in self.batch_topics():
            return None
        return super().__getitem__(tp)


class EagerConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer, handing each fetched message over without a task per message;
    its thread is a :class:`ShortFetchConsumerThread`; its read offsets are :class:`ReadOffsets`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)

        def batch_topics() -> frozenset[str]:
            conductor = self.app.topics
            return conductor.batch_topics if isinstance(conductor, BatchConductor) else frozenset()

        self._read_offset = ReadOffsets(batch_topics)

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return ShortFetchConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def wait_first(self, *coros: Any, timeout: Any = None) -> WaitResults:  # noqa: ASYNC109 - mode's signature
        first = coros[0] if coros else None
        if (
            timeout is not None
            or not asyncio.iscoroutine(first)
            or self._stopped.is_set()
            or self._crashed.is_set()
        ):
            return await super().wait_first(*coros, timeout=timeout)
        done, outcome = run_eagerly(first)
        if done:
            for other in coros[1:]:
                if asyncio.iscoroutine(other):
                    other.close()  # never started: nothing to cancel
            return WaitResults([first], [outcome], False)
        return await super().wait_first(outcome, *coros[1:])

    async def perform_seek(self) -> None:
        """Seek every assigned partition to its committed offset (faust's ``perform_seek``, called
        once the tables are recovered and when it fetched while its flow was stopped), without
        losing the place of what the fetch loop read while the seek was on its way.

        faust's own runs beside the fetch loop, which by then takes records of the resumed
        partitions again; it set their read offsets back to the committed ones, so the next record
        looked like a jump in the log, which faust takes for offsets that do not exist (as after
        transaction markers): it added the records read meanwhile to the acked offsets a second
        time, and every duplicate there held the commit back a turn of the commit timer (a worker
        that took over the partitions of one that left stayed about 1,000 records behind for
        minutes). Here a partition the fetch loop read meanwhile goes on after its last record
        read (a record read again from the seeked position is below it and skipped), and a
        committed offset this consumer knows is never set back below itself."""
        read = self._read_offset
        before = {tp: read.get(tp) for tp in list(read)}
        generation = self.app.consumer_generation_id
        flowing = self.flow_active
        committed = await self.seek_to_committed()
        # records read meanwhile were handed over (not dropped: the flow ran throughout, and no
        # rebalance came, whose own seek then places the partitions)
        handed_over = flowing and self.flow_active and generation == self.app.consumer_generation_id
        known = self._committed_offset
        for tp, offset in committed.items():
            now = read.get(tp)
            if now is not None and now != before.get(tp) and handed_over:
                read[tp] = now + 1  # faust's own mark after a seek: the next offset to take
            else:
                read[tp] = offset if offset is not None and offset >= 0 else None
            mark = known.get(tp)
            if offset and (mark is None or offset > mark):
                known[tp] = offset

    async def _add_gap(self, tp: TP, offset_from: int, offset_to: int) -> None:
        """Offsets missing from a partition's log (``offset_from`` to the record in hand, as faust
        calls it) count as acked; faust's own counts the record in hand too, before it has been
        processed (it is acked once its outputs are delivered).

        Not for the topics handed to the pipeline (:class:`BatchConductor`): faust's fetch loop
        takes any jump from its read offset for a gap, and around a rebalance that offset can be
        ahead of or behind what the pipeline was given (a record fetched before the rebalance and
        handed over after it), so the records in between were counted as acked and committed
        without ever being processed. The pipeline checks each partition's offsets itself
        (``PipelineShell.in_order``) and reports the gaps the log really has
        (:meth:`add_log_gap`)."""
        conductor = self.app.topics
        if isinstance(conductor, BatchConductor) and tp.topic in conductor.batch_topics:
            return
        if offset_to > offset_from:
            await super()._add_gap(tp, offset_from, offset_to - 1)

    async def broker_committed(self, tp: TP) -> int | None:
        """``tp``'s committed offset as the broker has it now (None: nothing committed); faust's
        own view of it (``_committed_offset``) is empty from a revocation until its seek after the
        tables are recovered, while its fetch loop may already hand records over."""
        thread = self._thread
        client = part_of(thread, "_ensure_consumer", "faust AIOKafkaConsumerThread")()
        offset = await thread.call_thread(client.committed, tp)
        return int(offset) if offset is not None and offset >= 0 else None

    async def add_log_gap(self, tp: TP, first: int, last: int) -> None:
        """Offsets ``first`` to ``last`` are not in the partition's log (e.g. transaction
        markers): they count as acked, so the commit can pass them."""
        if last >= first:
            await super()._add_gap(tp, first, last)

    async def seek_to_committed(self) -> Mapping[TP, int]:
        """Seek every assigned partition to its committed offset, and those of the stream's topics
        that have none (a new consumer group) to their beginning.

        faust calls this once the tables are recovered (``perform_seek``) to read again what it
        fetched and dropped while the partitions moved; aiokafka leaves a partition without a
        committed offset (or with offset 0) where its fetch position stands, so a record fetched
        and dropped during a new group's first assignment was never read again (a fresh worker
        then processed nothing)."""
        committed = await super().seek_to_committed()
        changelogs = self.app.tables.changelog_topics
        fresh = [tp for tp, offset in committed.items() if not offset and tp.topic not in changelogs]
        if fresh:
            await self._thread.seek_to_beginning(*fresh)
        return committed


class BatchConductor(Conductor):
    """faust's conductor, handing the messages of :meth:`route`'s topics to a sink.

    The sink releases what it took with :func:`ack_all` (never ``Message.ack``): the messages are
    not counted as references (``incref``) nor tracked as unacked for a graceful shutdown
    (``track_message``; the worker does not wait for them, ``stream_wait_empty=False``)."""

    batch_topics: frozenset[str] = frozenset()
    batch_sink: Sink | None = None

    def route(self, topics: set[str], sink: Sink) -> None:
        """Messages of ``topics`` go to ``sink`` (takes effect at the next assignment)."""
        self.batch_topics = frozenset(topics)
        self.batch_sink = sink

    def _compile_message_handler(self) -> Any:
        """faust's per-message dispatch, without taking the callback map's lock when nobody holds
        it (it is only held while the map is rebuilt; then a message waits as in faust)."""
        locked_dispatch = super()._compile_message_handler()
        lock = self._tp_to_callback_lock
        callbacks = self._tp_to_callback

        async def on_message(message: Any) -> None:
            if lock.locked():
                return await locked_dispatch(message)  # type: ignore[no-any-return]
            return await callbacks[message.tp](message)  # type: ignore[no-any-return]

        return on_message

    def _build_handler(self, tp: TP, channels: MutableSet[Any]) -> Any:
        sink = self.batch_sink
        if sink is None or tp.topic not in self.batch_topics:
            return super()._build_handler(tp, channels)
        flow_control = self.app.flow_control
        flowing = flow_control.is_active

        async def on_message(message: Any) -> None:
            if not flowing():
                await flow_control.acquire()  # suspended while partitions move and tables recover
            await sink(message)

        return on_message


def ack_all(consumer: Any, messages: Iterable[Any]) -> int:
    """Release ``messages`` (handed over by :class:`BatchConductor`) to faust's consumer: faust's
    final-ack bookkeeping (``faust.transport.consumer.Consumer.ack``: the offset joins the acked
    offsets its commit timer commits), once per batch instead of three lock holds and four calls
    per message. Returns how many were acked now (not before, not below the committed offset)."""
    acked_index = consumer._acked_index
    acked = consumer._acked
    committed = consumer._committed_offset
    acks_enabled_for = consumer.app.topics.acks_enabled_for
    count = 0
    with ack_lock:
        for message in messages:
            if message.acked:
                continue
            message.acked = True
            message.refcount = 0
            if not acks_enabled_for(message.topic):
                continue
            tp, offset = message.tp, message.offset
            floor = committed[tp]
            if floor is None or offset >= floor:
                index = acked_index[tp]
                if offset not in index:
                    index.add(offset)
                    acked[tp].append(offset)
                    count += 1
        consumer._n_acked += count
    notify(consumer._waiting_for_ack)
    return count


class EagerTransport(faust_aiokafka.Transport):
    """The aiokafka transport with :class:`EagerConsumer` and :class:`BatchConductor`."""

    Consumer = EagerConsumer
    Conductor = BatchConductor


class SeamApp(faust.App):
    """faust's App on :class:`EagerTransport` (a cheaper fetch hand-off)."""

    def _new_transport(self) -> TransportT:
        return EagerTransport(self.conf.broker_consumer, self)


class SeamError(RuntimeError):
    """faust (or mode, aiokafka, rocksdict) lacks something Guardian relies on: the installed
    versions differ from the ones verified (pinned in ``pyproject.toml``)."""


def library_versions() -> str:
    """``faust-streaming X, mode-streaming Y, aiokafka Z, rocksdict W`` as installed."""
    found = []
    for dist in ("faust-streaming", "mode-streaming", "aiokafka", "rocksdict"):
        try:
            found.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            found.append(f"{dist} (not installed)")
    return ", ".join(found)


def missing_part(what: str) -> SeamError:
    return SeamError(
        f"Guardian cannot run on the installed {library_versions()}: {what} is missing "
        "(install the versions pinned in pyproject.toml)"
    )


def part_of(obj: Any, name: str, where: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        raise missing_part(f"{where}.{name}") from None


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


class RocksStores:
    """faust's RocksDB store internals: the open database of each partition of a table."""

    def dbs(self, table: Any) -> Mapping[int, Any]:
        """partition -> open ``Rdict`` of ``table``'s store (the partitions this worker holds)."""
        dbs = part_of(table.data, "_dbs", "faust.stores.rocksdb.Store")
        return dict(dbs)

    def db(self, table: Any, partition: int) -> Any:
        """The ``Rdict`` of ``table``'s ``partition`` (opened if needed)."""
        return part_of(table.data, "_db_for_partition", "faust.stores.rocksdb.Store")(partition)


def aiokafka_producer(app: Any) -> Callable[[], Any]:
    """A function returning faust's running ``AIOKafkaProducer``."""
    return part_of(app.producer, "_ensure_producer", "faust.transport.drivers.aiokafka.Producer")  # type: ignore[no-any-return]


def committed_offsets(consumer: Any) -> Mapping[Any, int]:
    """TP -> committed offset, as faust's consumer keeps them (live: read it on every call)."""
    return part_of(consumer, "_committed_offset", "faust.transport.consumer.Consumer")  # type: ignore[no-any-return]


def set_producer_buffer(app: Any, max_messages: int) -> None:
    """How many messages faust's producer buffer holds before the stream waits for it."""
    buffer = part_of(app.producer, "buffer", "faust.transport.producer.Producer")
    part_of(buffer, "max_messages", "faust.transport.producer.ProducerBuffer")
    buffer.max_messages = max_messages


@dataclass(frozen=True)
class Recovery:
    """Where table recovery stands for the current assignment (:class:`RecoveryWatch`)."""

    #: the tables are recovered for the current assignment
    completed: bool
    #: changelog records still to read, per table changelog topic-partition being recovered
    remaining: dict[tuple[str, int], int]


class RecoveryWatch:
    """Are the tables recovered for the consumer group's current assignment? One per App.

    faust's own ``Recovery.completed`` is set when the first assignment's recovery ends and never
    cleared: during a later assignment's recovery it still said done. faust sends its App's
    ``on_rebalance_complete`` signal when an assignment's changelogs are read (``Recovery.
    on_recovery_completed``, or ``_resume_streams`` without tables), just before it resumes the
    streams; this watch records the consumer generation it was sent for, and the tables count as
    recovered while that is still the consumer's generation (``app.consumer_generation_id``, which
    faust's consumer sets when an assignment arrives), no partitions were revoked since, and faust's
    ``completed`` is set (the first assignment: as faust says).

    A recovery overtaken by another rebalance ("Recovery rebalancing again") sends the signal too,
    once the new generation is already set: it is taken only while faust's recovery still runs for
    the consumer's generation (``Recovery._generation_id``) and no new recovery waits to start
    (``Recovery.signal_recovery_start``); the new assignment's recovery then sends its own.

    No guess stands in for a missed signal (say, a faust that no longer sends it; the unit tests
    drive faust's own completion, ``tests/unit/test_recovery_per_assignment``): the worker would
    then stay unready, its readiness watchdog, seeing no recovery progress, saying so after
    ``GUARDIAN_READY_TIMEOUT_S`` (``/ready`` names it) until the next assignment's recovery."""

    def __init__(self, app: Any) -> None:
        self.app = app
        #: the consumer generation whose recovery faust last completed (None: none since a revoke)
        self.generation: int | None = None
        #: partitions were revoked and no new assignment has arrived yet
        self.moving = False

    @classmethod
    def attach(cls, app: Any) -> RecoveryWatch:
        """A watch connected to ``app``'s rebalance signals (before the App starts)."""
        watch = cls(app)
        app.on_partitions_revoked.connect(watch.on_revoked)
        app.on_partitions_assigned.connect(watch.on_assigned)
        app.on_rebalance_complete.connect(watch.on_rebalance_complete)
        return watch

    def _faust(self) -> Any:
        return part_of(self.app.tables, "recovery", "faust.tables.manager.TableManager")

    def on_revoked(self, *_: Any, **__: Any) -> None:
        """faust's ``on_partitions_revoked``: the assignment is gone, and its recovery with it."""
        self.moving = True
        self.generation = None

    def on_assigned(self, *_: Any, **__: Any) -> None:
        """faust's ``on_partitions_assigned``: the new assignment (its generation is set)."""
        self.moving = False

    def on_rebalance_complete(self, *_: Any, **__: Any) -> None:
        """faust's ``on_rebalance_complete``: the changelogs of its recovery's generation are read."""
        rec = self._faust()
        current = self.app.consumer_generation_id
        running_for = part_of(rec, "_generation_id", "faust.tables.recovery.Recovery")
        restarting = part_of(rec, "signal_recovery_start", "faust.tables.recovery.Recovery").is_set()
        if running_for == current and not restarting:
            self.generation = current

    def completed(self) -> bool:
        """The tables are recovered for the current assignment."""
        done = part_of(self._faust(), "completed", "faust.tables.recovery.Recovery").is_set()
        return (
            bool(done)
            and not self.moving
            and self.generation is not None
            and self.generation == self.app.consumer_generation_id
        )

    def state(self) -> Recovery:
        """:meth:`completed`, and the changelog records faust's recovery still has to read."""
        completed = self.completed()
        rec = self._faust()
        highwaters = part_of(rec, "active_highwaters", "faust.tables.recovery.Recovery")
        offsets = part_of(rec, "active_offsets", "faust.tables.recovery.Recovery")
        remaining: dict[tuple[str, int], int] = {}
        for tp, high in list(highwaters.items()):
            if high is None or high < 0:
                continue
            done = offsets.get(tp)
            left = high - (done if done is not None and done >= 0 else -1)
            remaining[(str(tp.topic), int(tp.partition))] = max(0, int(left))
        return Recovery(completed=completed, remaining=remaining)


def assigned_topics(consumer: Any) -> list[str]:
    """The topics of the partitions assigned to faust's consumer, sorted (none while it has not
    started)."""
    try:
        assignment = consumer.assignment()
    except ConsumerNotStarted:
        return []
    return sorted({str(tp.topic) for tp in assignment})


def producer_started(app: Any) -> bool:
    """faust's aiokafka producer exists and has not stopped."""
    producer = part_of(app.producer, "_producer", "faust.transport.drivers.aiokafka.Producer")
    if producer is None:
        return False
    return not bool(part_of(producer, "_closed", "aiokafka.AIOKafkaProducer"))


def new_worker(app: Any, loglevel: str) -> Any:
    """faust's Worker for ``app``; its terminal spinner (cursor escape codes) only on a terminal."""
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    if not worker.stdout.isatty():
        worker.spinner = None
    return worker


def is_spinner_handler(handler: logging.Handler) -> bool:
    from faust.utils.terminal.spinners import SpinnerHandler

    return isinstance(handler, SpinnerHandler)


def changelog_topic_names(tables: Iterator[Any] | list[Any]) -> list[str]:
    """The changelog topic of each faust table (public API: ``changelog_topic.get_topic_name``)."""
    return [str(t.changelog_topic.get_topic_name()) for t in tables]


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
    for name in (
        "_committed_offset",
        "_read_offset",
        "flow_active",
        "_stopped",
        "_crashed",
        "_acked",
        "_acked_index",
        "_n_acked",
        "_waiting_for_ack",
    ):
        part_of(consumer, name, "faust.transport.consumer.Consumer")
    for name in ("_tp_to_callback", "_tp_to_callback_lock"):
        part_of(app.topics, name, "faust.transport.conductor.Conductor")
    if not isinstance(consumer, faust_consumer.Consumer):
        raise missing_part("faust.transport.consumer.Consumer as the App's consumer")
    part_of(app.producer, "_producer", "faust.transport.drivers.aiokafka.Producer")
    rec = app.tables.recovery
    for name in (
        "completed",
        "active_highwaters",
        "active_offsets",
        "_generation_id",
        "signal_recovery_start",
    ):
        part_of(rec, name, "faust.tables.recovery.Recovery")
    for name in ("consumer_generation_id", "on_rebalance_complete"):
        part_of(app, name, "faust.App")
    if not isinstance(rec, FaustRecovery):
        raise missing_part("faust.tables.recovery.Recovery as the table manager's recovery")
    stores = RocksStores()
    for table in tables:
        store = table.data
        if not isinstance(store, faust_rocksdb.Store):
            raise missing_part(f"a RocksDB store for table {table.name} (found {type(store).__name__})")
        stores.dbs(table)


@dataclass(frozen=True)
class FetchState:
    """Where the fetch of one assigned topic-partition stands, as faust's consumer and its aiokafka
    consumer keep it (aiokafka's side lives in faust's consumer thread: read from the worker's
    event loop, it is a snapshot that may be a moment old)."""

    #: the next offset aiokafka fetches from (None: no valid position yet, e.g. awaiting a reset)
    position: int | None
    #: records aiokafka fetched that faust has not taken yet
    fetched_unread: bool
    #: faust asks aiokafka for this partition's records (one of its active partitions)
    active: bool
    #: wall-clock time (ms) of the broker's last fetch answer for it (None: none yet)
    answered_ms: int | None


def fetch_states(consumer: Any) -> dict[tuple[str, int], FetchState]:
    """(topic, partition) -> :class:`FetchState` of every partition assigned to faust's consumer
    (empty while its aiokafka consumer is not running)."""
    thread = part_of(consumer, "_thread", "faust.transport.consumer.ThreadDelegateConsumer")
    aio = part_of(thread, "_consumer", "faust.transport.drivers.aiokafka.AIOKafkaConsumerThread")
    if aio is None:
        return {}
    active = part_of(consumer, "_active_partitions", "faust.transport.consumer.Consumer") or set()
    subscription = part_of(aio, "_subscription", "aiokafka.AIOKafkaConsumer").subscription
    records = part_of(part_of(aio, "_fetcher", "aiokafka.AIOKafkaConsumer"), "_records", "aiokafka.Fetcher")
    assignment = None if subscription is None else subscription.assignment
    if assignment is None:
        return {}
    states: dict[tuple[str, int], FetchState] = {}
    for tp in list(assignment.tps):
        state = assignment.state_value(tp)
        if state is None:
            continue
        states[(str(tp.topic), int(tp.partition))] = FetchState(
            position=int(state.position) if state.has_valid_position else None,
            fetched_unread=tp in records,
            active=tp in active,
            answered_ms=None if state.timestamp is None else int(state.timestamp),
        )
    return states

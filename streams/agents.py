"""The pipeline's faust glue: it moves records between Kafka, the tables and the functional core.

faust consumes the four input topics and the internal ``control`` topic (all co-partitioned by
``device_id``) as a consumer group, and its conductor hands their messages to the shell's inbox
(``streams.seam.batch_conductor.BatchConductor``; faust keeps assignment, fetching, flow control,
acks and commits). The ``guardian.pipeline`` task (``streams.pipeline_task``) drains the inbox in
batches: each record goes through the per-device merge of the input topics
(``pipeline.order.DeviceMerge``), then :class:`pipeline.runner.Processor` over
:class:`tables.store.faust_tables.FaustStore` (the record's partition of it,
``store.at(partition)``), whose writes and the outputs collect in
:class:`tables.store.writes.PendingWrites`. When the inbox is empty (or the batch is due) the
batch is flushed: RocksDB first, then one Kafka batch per changelog and output topic-partition on
faust's own producer; the batch's messages are acked once all of it is delivered
(``streams.commit_batch``, the commit protocol), so an offset is never committed ahead of what it
caused. A crash replays records whose outputs may already be out: their IDs derive from their
causes, and the device's state remembers the outputs of its uncommitted records, so a replay
reproduces the same records.

Two timers (``streams.quiet.QuietDevices`` and the sweep) turn wall-clock time into records on
``control`` (so their effects happen in stream context, durably and in order with the device's
records):

- ``confirm``: a quiet device's pending debounce change whose window has passed
  (docs/CONTRACTS.md §4.3 step 7), or its plan's precondition deadline (§9.4);
- ``sweep``: prune dedup keys older than the dedup window, one partition at a time.

With an asynchronous decision backend (Gemini), promoted triggers go to
:class:`streams.lanes.Lanes`, which decides per device without blocking the stream and
writes each verdict back as a ``verdict`` record on ``control``.

:func:`register_agents` declares all of it on the app; the objects it wires are listed in
``streams/shell.py``, the faust behaviours replaced in ``streams/seam/__init__.py``.
"""

from __future__ import annotations

import logging
from typing import Any

from streams.gc_freeze import GC_FREEZE_EVERY_S, YoungOnlyCollector
from streams.pipeline_task import PipelineTask
from streams.quiet import CONFIRM_EVERY_S, QuietDevices
from streams.seam.reads import set_producer_buffer
from streams.seam.recovery import RecoveryWatch
from streams.seam.spinner import restore_log_level
from streams.shell import PipelineShell

PRODUCER_BUFFER_MESSAGES = 20_000
MERGE_TICK_S = 0.05
#: the timers ``register_agents`` declares
TIMERS = ("guardian.merge", "guardian.positions", "guardian.confirm", "guardian.sweep", "guardian.gc")


def register_agents(app: Any, shell: PipelineShell, recovery: RecoveryWatch) -> list[str]:
    """Declare the pipeline (fed by faust's conductor, see ``streams.seam``) and its timers on
    ``app`` (``recovery``: whether its tables are recovered for the current assignment); returns the
    names of what is registered."""
    names = shell.names
    inputs = app.topic(
        names.plans,
        names.device_context,
        names.task_events,
        names.observations,
        names.control,
        key_serializer="raw",
        value_serializer="raw",
        acks=True,
    )
    # faust subscribes, assigns, fetches, tracks acks and commits the topic; its messages go to the
    # shell's inbox in batches instead of through an agent's stream (``streams.seam``)
    app.topics.add(inputs)
    app.topics.route(set(inputs.topics), shell.inbox.receive)

    pipeline = PipelineTask(app, shell)
    quiet = QuietDevices(shell.quiet, shell.send_control, recovery)
    app.task(pipeline.loop)
    app.timer(MERGE_TICK_S, name="guardian.merge")(pipeline.release_held)
    app.timer(0.2, name="guardian.positions")(shell.positions.learn_positions)
    app.timer(CONFIRM_EVERY_S, name="guardian.confirm")(quiet.confirm)

    async def sweep_dedup_memory() -> None:
        for partition in sorted(shell.quiet.stream_time):
            shell.send_control(partition, f"sweep-{partition}", {"op": "sweep"})

    app.timer(shell.sweeper.every_s, name="guardian.sweep")(sweep_dedup_memory)

    def on_rebalance(*_: Any, **__: Any) -> None:
        quiet.scanned = False
        shell.rebalanced()

    async def on_revoked(*_: Any, **__: Any) -> None:
        quiet.scanned = False
        await shell.revoked()

    app.on_partitions_revoked.connect(on_revoked)
    app.on_partitions_assigned.connect(on_rebalance)

    async def on_stop(*_: Any, **__: Any) -> None:
        # sent once faust's consumer has left the group, before its producer stops
        await shell.batch.close()

    app.on_before_shutdown.connect(on_stop)

    async def quiet_root_logger() -> None:
        restore_log_level(logging.getLogger())
        # faust's producer buffer (what still goes through faust: owner-index writes, control
        # records) stops the stream whenever 100 messages wait, then drains them one by one: a
        # deep buffer keeps the stream flowing; faust still flushes it before every offset commit
        set_producer_buffer(app, PRODUCER_BUFFER_MESSAGES)

    app.task(quiet_root_logger)
    collector = YoungOnlyCollector()
    app.task(collector.start)
    app.timer(GC_FREEZE_EVERY_S, name="guardian.gc")(collector.collect)
    return ["guardian.pipeline", *TIMERS]

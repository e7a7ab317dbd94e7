"""The ``guardian.pipeline`` task (:class:`PipelineTask`): it drains the shell's inbox in batches,
input records through the per-device merge (a plan claimed on its way in), flushes when it has
caught up with the inbox or a batch is due, and gives the event loop its turns between; the
``guardian.merge`` timer lets out what the merge held back (:meth:`PipelineTask.release_held`).
"""

from __future__ import annotations

import asyncio
from typing import Any

from streams.seam.batch_acks import ack_all
from streams.seam.reads import aiokafka_producer, committed_offsets
from streams.shell import PipelineShell
from topics.names import INPUT_SUFFIXES

#: records the merge releases at a time, the pipeline's turns in between (slices of a whole batch,
#: 2,000 plans released after a hold, kept the event loop for over a second, docs/PERFORMANCE.md)
MERGE_SLICE = 100


class PipelineTask:
    """The ``guardian.pipeline`` task: drains the shell's inbox in batches, input records through
    the per-device merge (a plan claimed on its way in), and flushes when it has caught
    up with the inbox or a batch is due (:meth:`CommitBatch.due`), and gives the event loop its turns
    between; :meth:`release_held` (the ``guardian.merge`` timer)
    lets out what the merge held back."""

    def __init__(self, app: Any, shell: PipelineShell) -> None:
        self.app = app
        self.shell = shell
        self.merge_suffixes = set(INPUT_SUFFIXES)
        #: the task is working through what it took from the inbox (it flushes when done)
        self.busy = False

    def attach(self) -> None:
        """Take what only exists once the app runs: the consumer, its committed offsets, the
        producer, how a message is acked and what stops the worker."""
        from faust.types import TP

        app, shell, prefix = self.app, self.shell, self.shell.names.prefix
        consumer = app.consumer
        shell.positions.consumer = consumer
        shell.positions.tp_factory = TP
        shell.batch.delivery.producer = aiokafka_producer(app)
        known = committed_offsets(consumer)

        def committed(stream_key: str) -> int | None:
            suffix, _, partition = stream_key.rpartition(":")
            offset = known.get(TP(prefix + suffix, int(partition)))
            return None if offset is None else int(offset)

        def ack(messages: list[Any]) -> None:
            ack_all(consumer, messages)

        shell.store.committed = committed
        shell.batch.delivery.ack = ack
        shell.batch.delivery.on_lost = app.crash

    def run(self, message: Any) -> None:
        batch = self.shell.batch
        batch.open()
        self.shell.handle(message)
        batch.add(message)

    async def run_ready(self) -> None:
        """What the merge releases, in slices of ``MERGE_SLICE``: a merge releasing a long-held
        backlog at once is flushed as it goes, and the event loop has its turns between slices
        (each slice is popped and processed without a pause, so the merge's order holds)."""
        shell = self.shell
        while True:
            ready = shell.held.merger.pop_ready(
                shell.positions.caught_up_now,
                shell.inbox.merge_clock(),
                limit=MERGE_SLICE,
                blocked=shell.held.unsettled,
            )
            for message in ready:
                self.run(message)
            await shell.take_turns()
            if len(ready) < MERGE_SLICE:
                return

    async def loop(self) -> None:
        """The task's body."""
        self.attach()
        shell = self.shell
        if shell.reports.metrics is not None and shell.reports.metrics.trace is not None:
            shell.reports.metrics.trace.start()
        while True:
            if shell.sweeper.sweeping:
                # a slice of a dedup sweep per turn, before waiting for input (or between what
                # the pipeline takes from its inbox, when there is always more)
                shell.sweeper.continue_sweep()
                await shell.give_turn()
                if not shell.inbox.ready.is_set():
                    continue
            deferred = shell.batch.time_left() if shell.batch.deferred else None
            if not await shell.inbox.wait_for_input(deferred):
                await shell.flush()  # no input came while table writes waited: they are due
                continue
            shell.positions.new_turn()
            await self.work_through(shell.inbox.take())
            # natural batching: flush when the pipeline has caught up with what was fetched; while
            # more came meanwhile, the batch grows until it is due
            if len(shell.batch) and not shell.inbox:
                await self.flush_or_wait()

    async def flush_or_wait(self) -> None:
        """The pipeline has caught up with its inbox: flush, unless more input is on its way (the
        worker is behind the broker, e.g. working through a backlog) and the batch is not due yet;
        then it waits for that input, at most until the batch is due. (faust's fetcher hands over
        at most a hundred records per turn of the event loop: under a backlog, flushing whenever
        the inbox ran dry made batches of a few dozen records, a produce request each.)"""
        shell = self.shell
        left = shell.batch.time_left()
        behind = shell.positions.behind()
        if left > 0 and behind:
            try:
                async with asyncio.timeout(left):
                    await shell.inbox.ready.wait()
                return  # more input came: the batch grows with it
            except TimeoutError:
                behind = shell.positions.behind()  # due
        if len(shell.batch):
            await shell.flush(keep_state=behind)

    async def work_through(self, taken: list[Any]) -> None:
        """What was taken from the inbox, in order, through the merge (flushing what is due)."""
        shell = self.shell
        generation = shell.batch.generation
        read_next = shell.positions.read_next
        self.busy = True
        try:
            for message in taken:
                if shell.batch.generation != generation:
                    break  # a rebalance came during a flush: the rest is read again after it
                suffix = shell.names.suffix_of(message.topic)
                if suffix is not None:
                    key = (suffix, message.partition)
                    if read_next.get(key) == message.offset:  # the common case: the next record
                        read_next[key] = message.offset + 1
                        if shell.positions.read_again:
                            shell.positions.read_again.pop(key, None)
                    elif not await shell.positions.in_order(suffix, message):
                        continue
                    elif shell.batch.generation != generation:
                        break  # a rebalance came while the partition's start was asked for
                if suffix in self.merge_suffixes:
                    assert suffix is not None
                    self.merge(suffix, message)
                    await self.run_ready()
                else:
                    self.run(message)
                await shell.take_turns()
        finally:
            self.busy = False

    def merge(self, suffix: str, message: Any) -> None:
        """An input record into the merge (a plan claims its experience on its way in)."""
        shell = self.shell
        partition = int(message.partition)
        if shell.reports.metrics is not None and shell.reports.metrics.trace is not None:
            shell.reports.metrics.trace.pushed(message)
        shell.positions.entered(suffix, partition, int(message.offset))
        if suffix == "plans":
            shell.held.claim(message)
        ts, offset = round(message.timestamp * 1000), int(message.offset)
        late = shell.held.merger.push(
            suffix, partition, message.key, ts, offset, message, shell.inbox.merge_clock()
        )
        if late and shell.reports.metrics is not None:
            shell.reports.metrics.irregular.late_arrivals.inc()

    async def release_held(self) -> None:
        """Let out what the merge held back; flush it when the pipeline is idle (else the pipeline
        flushes it with its own batch, when that is due or caught up)."""
        shell = self.shell
        if len(shell.held.merger) and shell.batch.delivery.ack is not None:
            shell.positions.new_turn()
            await self.run_ready()
            if len(shell.batch) and (not (self.busy or shell.inbox) or shell.batch.due()):
                await shell.flush(keep_state=self.busy or bool(shell.inbox))

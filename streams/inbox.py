"""What faust's conductor hands the pipeline (:class:`Inbox`): the messages not processed yet, and
the merge's clock (the time the pipeline spent waiting for them).

It decides when faust's fetcher waits (a full inbox) and how long the merge may hold a record: the
hold counts only the time the pipeline waits for input with nothing to do
(:meth:`Inbox.merge_clock`).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from streams.metrics import GuardianMetrics

#: messages the inbox takes before faust's fetcher waits
INBOX_MAX = 10_000


@dataclass
class Inbox:
    """Messages handed over by faust's conductor, not processed yet, and the time waited for them."""

    #: the worker's Prometheus metrics (its trace of each message; None: e.g. unit tests)
    metrics: GuardianMetrics | None = None
    #: messages handed over by faust's conductor, not processed yet
    messages: list[Any] = field(default_factory=list)
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    room: asyncio.Event = field(default_factory=asyncio.Event)
    #: seconds the pipeline spent waiting for input, and since when it waits now (``merge_clock``)
    waited_s: float = 0.0
    waiting_since: float | None = None

    def __len__(self) -> int:
        return len(self.messages)

    async def receive(self, message: Any) -> None:
        """A message from faust's conductor (input topics and ``control``): into the inbox; waits
        while the inbox is full (faust's fetcher then waits too, or drops it on a rebalance)."""
        self.messages.append(message)
        self.ready.set()
        if self.metrics is not None and self.metrics.trace is not None:
            self.metrics.trace.received(message)
        if len(self.messages) >= INBOX_MAX:
            self.room.clear()
            await self.room.wait()

    def merge_clock(self) -> float:
        """The clock the merge's hold runs on: the seconds the pipeline has spent waiting for input
        with nothing to process.

        The hold bounds how long a fetch that stalls can hold back the other topics of a partition.
        A pipeline working through a backlog is no such stall: the awaited topic's records are
        behind the backlog (fetched, or on the broker while the inbox is full), and releasing by the
        wall clock then let, say, a device's ``security.started`` go before its plan on a worker
        slowed down (its evidence lost, the device's timeline other than the replay's). On this
        clock a record is held, in order, for as long as the pipeline has other work."""
        if self.waiting_since is None:
            return self.waited_s
        return self.waited_s + time.monotonic() - self.waiting_since

    async def wait_for_input(self, timeout_s: float | None = None) -> bool:
        """Wait until the inbox has messages (False: ``timeout_s`` passed first); the time waited
        runs the merge's clock."""
        if self.ready.is_set():
            return True
        self.waiting_since = time.monotonic()
        try:
            if timeout_s is None:
                await self.ready.wait()
                return True
            try:
                async with asyncio.timeout(timeout_s):
                    await self.ready.wait()
                return True
            except TimeoutError:
                return False
        finally:
            self.waited_s = self.merge_clock()
            self.waiting_since = None

    def take(self) -> list[Any]:
        """Everything handed over so far (the inbox is empty again, and has room)."""
        batch, self.messages = self.messages, []
        self.ready.clear()
        self.room.set()
        return batch

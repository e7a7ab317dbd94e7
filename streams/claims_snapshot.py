"""Writing a snapshot of the claims log, and removing the records it makes unneeded.

The worker whose claim is the one a snapshot is due at (:attr:`tables.claims.ClaimLog.due`, the
same record for every worker) writes the fold it holds, covering the log up to the offset it has
read, as chunk records on the claims topic (:mod:`tables.claim_snapshot`). Once that snapshot is
read back complete, the records before the snapshot before it are deleted (Kafka's DeleteRecords):
the log then starts with the records a worker starting needs, the previous snapshot among them,
so start-up reads at most two snapshots and about two intervals of claims. The snapshot before the
last is kept as the log's start so that a worker reading one interval behind loses nothing. A
writer that fails or stops half-way leaves an incomplete snapshot that every reader ignores; the
next one is due :data:`tables.claims.SNAPSHOT_EVERY` records later.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from aiokafka import TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete

from tables import claim_snapshot
from tables.claim_snapshot import SnapshotError
from tables.claims import ClaimLog


class ClaimsReader(Protocol):
    """What a snapshot reads of the worker's claims reader (``streams.claims.ClaimsReader``)."""

    bootstrap: str
    topic: str
    claims: ClaimLog
    #: set each time the reader has read more of the log
    progressed: asyncio.Event


__all__ = ["SnapshotError", "SnapshotWriting", "trim", "write"]

log = logging.getLogger(__name__)

#: how long a snapshot may take to be written and read back
SNAPSHOT_TIMEOUT_S = 120.0
ADMIN_TIMEOUT_MS = 30_000


@dataclass
class SnapshotWriting:
    """Whether this worker writes the snapshot due at one of its claims (off: tests of the claims),
    and the snapshot it is writing (one at a time)."""

    enabled: bool = True
    task: asyncio.Task[None] | None = None

    def start(self, reader: ClaimsReader, producer: Any) -> None:
        """This worker's claim is the one the next snapshot is due at: it writes it (unless off, or
        writing one already)."""
        if self.enabled and self.task is None:
            self.task = asyncio.ensure_future(write(reader, producer))
            self.task.add_done_callback(partial(self._done, reader.topic))

    def _done(self, topic: str, task: asyncio.Task[None]) -> None:
        self.task = None
        if not task.cancelled() and task.exception() is not None:
            log.error("guardian: writing a snapshot of the claims topic %s: %r", topic, task.exception())


async def write(reader: ClaimsReader, producer: Any) -> None:
    """Write the snapshot of ``reader``'s fold, read it back, then trim the log before the one
    before it."""
    claims = reader.claims
    at = claims.position
    previous = claims.snapshot_at
    # the fold as it is now (copied at once); compressed in a thread, the event loop going on
    fields, arrays = claims.snapshot_parts()
    data = await asyncio.to_thread(claim_snapshot.encode, fields, arrays)
    pieces = claim_snapshot.chunks(data, at)
    async with asyncio.timeout(SNAPSHOT_TIMEOUT_S):
        last = -1
        for mark, piece in pieces:
            sent = await producer.send_and_wait(
                reader.topic, piece, key=None, partition=0, headers=[mark.header()]
            )
            last = int(sent.offset)
        while not claims.has_read(last):
            await reader.progressed.wait()
    log.info(
        "guardian: snapshot of the claims topic %s up to offset %d written (%d claims, %d bytes, %d records)",
        reader.topic,
        at,
        len(claims),
        len(data),
        len(pieces),
    )
    if claims.snapshot_at >= at and previous > 0:
        await trim(reader.bootstrap, reader.topic, previous)


async def trim(bootstrap: str, topic: str, before: int) -> None:
    """Delete the claims topic's records below offset ``before`` (a snapshot's start)."""
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=ADMIN_TIMEOUT_MS)
    async with asyncio.timeout(ADMIN_TIMEOUT_MS / 1000 * 2):
        await client.start()
        try:
            await client.delete_records(
                {TopicPartition(topic, 0): RecordsToDelete(before_offset=before)}, timeout_ms=ADMIN_TIMEOUT_MS
            )
        finally:
            await client.close()
    log.info("guardian: the claims topic %s now starts at offset %d (a snapshot)", topic, before)

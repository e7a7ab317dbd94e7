"""A device's records reach the broker in the order its bridge sends them: :class:`SendOrder`.

A Kafka producer keeps the order of one partition only: a partition with a request in flight
waits while another partition's records go out, so a device's task event can reach the broker
before an observation it sent earlier. docs/CONTRACTS.md §2 rule 11 counts on a bridge whose
records reach the broker in the order it sends them (else the worker meets them as late
arrivals and its order differs from replay's). :class:`SendOrder` owns each device's last record
not known to be delivered; a record for another topic waits until that one is delivered."""

from __future__ import annotations

import asyncio
from typing import Any


class SendOrder:
    """Each device's last sent record (its topic and its delivery), until the next one."""

    def __init__(self, wait_s: float) -> None:
        #: how long a record waits at most for the previous one's delivery (then goes regardless)
        self.wait_s = wait_s
        self._last: dict[str, tuple[str, asyncio.Future[Any]]] = {}

    async def before(self, key: str, topic: str) -> None:
        """Wait, bounded, until the device's previous record is delivered (or failed) when it went
        to another topic; a failure is the sender's to count, and this record goes on."""
        last = self._last.get(key)
        if last is not None and last[0] != topic and not last[1].done():
            await asyncio.wait({last[1]}, timeout=self.wait_s)

    def sent(self, key: str, topic: str, delivery: asyncio.Future[Any]) -> None:
        self._last[key] = (topic, delivery)

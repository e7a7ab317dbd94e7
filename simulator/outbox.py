"""The device bridge's durable outbox (the transport a simulated device sends through): it re-sends
its last records with the same event IDs after a restart, and buffers while the session is down."""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

from simulator.clock import Clock

#: How many sent records the durable outbox keeps for a re-send after a restart.
OUTBOX_KEEP = 50


class Transport(Protocol):
    """Where a device's records go (Kafka, or a loopback in tests)."""

    async def send(self, suffix: str, key: str, value: bytes, timestamp_ms: int) -> None: ...


@dataclass
class Outbox:
    """The device bridge's durable outbox: transmits, remembers the last records, buffers offline."""

    transport: Transport
    key: str
    clock: Clock
    keep: int = OUTBOX_KEEP
    online: bool = True
    history: deque[tuple[str, bytes]] = field(default_factory=deque)
    buffer: list[tuple[str, bytes, int | None]] = field(default_factory=list)
    last_ts: int = 0
    last_sequence_sent: int = 0
    sent: int = 0

    def stamp(self) -> int:
        """The Kafka timestamp of the next record: the simulated clock, strictly increasing."""
        self.last_ts = max(self.clock.now_ms(), self.last_ts + 1)
        return self.last_ts

    async def _transmit(self, suffix: str, value: bytes, sequence: int | None, durable: bool) -> None:
        await self.transport.send(suffix, self.key, value, self.stamp())
        self.sent += 1
        if sequence is not None:
            self.last_sequence_sent = max(self.last_sequence_sent, sequence)
        if durable:
            self.history.append((suffix, value))
            while len(self.history) > self.keep:
                self.history.popleft()

    async def emit(
        self, suffix: str, value: bytes, *, sequence: int | None = None, durable: bool = True
    ) -> None:
        """Send one record now, or buffer it while offline (non-durable records are not kept)."""
        if not self.online:
            self.buffer.append((suffix, value, sequence))
            return
        await self._transmit(suffix, value, sequence, durable)

    async def send_now(self, suffix: str, value: bytes) -> None:
        """Send one record even while offline (the bridge itself, after a restart), not kept."""
        await self._transmit(suffix, value, None, False)

    def go_offline(self) -> None:
        self.online = False

    async def go_online(self) -> int:
        """Relay the buffered records in order (late: their receive time is now); how many.

        Records emitted meanwhile join the buffer, so nothing overtakes a buffered record."""
        n = 0
        while self.buffer:
            suffix, value, sequence = self.buffer.pop(0)
            await self._transmit(suffix, value, sequence, True)
            n += 1
        self.online = True
        return n

    async def resend_last(self) -> int:
        """Re-send the remembered records, same bytes and event IDs (after a restart); how many."""
        again = list(self.history)
        for suffix, value in again:
            await self.transport.send(suffix, self.key, value, self.stamp())
            self.sent += 1
        return len(again)


class TransportError(RuntimeError):
    """A transport could not deliver a record (the broker is gone, a timeout): the device stops."""

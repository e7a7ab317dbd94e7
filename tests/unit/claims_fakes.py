"""A fake claims topic: what a ``ClaimsReader`` claims on it is read back a moment later."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from streams.claims import ClaimsReader


@dataclass
class Sent:
    offset: int


@dataclass
class FakeLog:
    """The claims topic as the reader sees it: what is sent is read back a moment later."""

    reader: ClaimsReader
    records: list[tuple[bytes, bytes]] = field(default_factory=list)
    times: list[int] = field(default_factory=list)
    delay_s: float = 0.01
    deliver: bool = True

    async def send_and_wait(
        self, topic: str, value: bytes, *, key: bytes, partition: int, timestamp_ms: int | None = None
    ) -> Sent:
        assert partition == 0 and topic == self.reader.topic
        if not self.deliver:
            await asyncio.sleep(3600)
        self.records.append((key, value))
        self.times.append(timestamp_ms or 0)
        offset = len(self.records) - 1
        asyncio.get_running_loop().call_later(self.delay_s, self.read_back)
        return Sent(offset)

    def read_back(self) -> None:
        for offset in range(self.reader.claims.position, len(self.records)):
            key, value = self.records[offset]
            self.reader.claims.apply(offset, key, value, self.times[offset])
        self.reader._progress()

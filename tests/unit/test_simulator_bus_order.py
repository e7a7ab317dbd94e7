"""The simulated bridge keeps a device's order across topics on a real producer's terms: the
producer orders one partition only, so a record for another topic waits for the previous one."""

from __future__ import annotations

import asyncio
from typing import Any

from simulator.send_order import SendOrder


class HeldProducer:
    """A producer whose deliveries the test completes by hand, in any order, behind SendOrder."""

    def __init__(self) -> None:
        self.order = SendOrder(wait_s=5.0)
        self.sent: list[bytes] = []
        self.deliveries: list[asyncio.Future[Any]] = []

    async def send(self, topic: str, key: str, value: bytes) -> None:
        await self.order.before(key, topic)
        self.sent.append(value)
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.deliveries.append(fut)
        self.order.sent(key, topic, fut)


def test_a_record_for_another_topic_waits_until_the_previous_one_is_delivered() -> None:
    async def scenario() -> list[bytes]:
        p = HeldProducer()
        await p.send("observations", "d1", b"o1")
        await p.send("observations", "d1", b"o2")  # same topic: the producer keeps that order
        t1 = asyncio.create_task(p.send("task-events", "d1", b"t1"))
        await asyncio.sleep(0.01)
        assert p.sent == [b"o1", b"o2"], "t1 went before o2 was delivered"
        await p.send("task-events", "d2", b"x1")  # another device does not wait
        p.deliveries[1].set_result(None)
        await asyncio.wait_for(t1, 1)
        return p.sent

    assert asyncio.run(scenario()) == [b"o1", b"o2", b"x1", b"t1"]


def test_a_failed_or_slow_delivery_does_not_hold_the_device_back_for_good() -> None:
    async def scenario() -> list[bytes]:
        p = HeldProducer()
        await p.send("observations", "d1", b"o1")
        t1 = asyncio.create_task(p.send("task-events", "d1", b"t1"))
        await asyncio.sleep(0.01)
        p.deliveries[0].set_exception(RuntimeError("broker gone"))
        await asyncio.wait_for(t1, 1)
        p.order.wait_s = 0.05
        await p.send("observations", "d1", b"o2")  # t1's delivery never ends: bounded wait
        p.deliveries[0].exception()  # retrieved: no "never retrieved" warning
        return p.sent

    assert asyncio.run(scenario()) == [b"o1", b"t1", b"o2"]

"""faust's Kafka transport with cheaper hand-offs from the fetcher to the pipeline.

Two changes, both below faust's public surface (faust keeps the consumer group, the assignment,
fetching, flow control, acks and commits, the tables and their changelogs):

**Batches for the pipeline's own topics** (:class:`BatchConductor`). faust turns every fetched
message into an ``Event``, puts it on a channel queue and runs it through a ``Stream`` (sensors,
current event, acks): on our machines a faust agent that does nothing but ack handles 7,750–9,040
messages/s. The conductor can instead hand the messages of chosen topics straight to a sink (the
pipeline's inbox, drained in batches), after faust's flow control and with the message's
reference taken as faust's own delivery does; the same do-nothing loop then commits about 18,700
messages/s (``guardian bench``'s floors). The sink acks each message once what it caused is
delivered.

**No task per message** (:class:`EagerConsumer`).

For every fetched message faust's consumer runs ``wait_first(callback(message), suspend_flow)``:
the callback hands the message to the streams' buffers, and the race against ``suspend_flow``
lets a rebalance abandon a hand-off that is blocked (flow control suspended, a full buffer).
``mode``'s ``wait_first`` makes four tasks and an ``asyncio.wait`` per call, which on our
machines was about 40% of a bare faust agent's cost per message (7,500 messages/s without this
change, 12,000 with it).

:class:`EagerConsumer` runs the callback eagerly up to its first suspension: almost always it
completes right there (the buffer had room) and no task is made; if it does suspend, the started
callback joins the original race, so a blocked hand-off is abandoned exactly as before.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Generator, MutableSet
from typing import Any

from faust.transport.conductor import Conductor
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP
from mode.services import WaitResults

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


class EagerConsumer(faust_aiokafka.Consumer):
    """faust's aiokafka consumer, handing each fetched message over without a task per message."""

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


class BatchConductor(Conductor):
    """faust's conductor, handing the messages of :meth:`route`'s topics to a sink."""

    batch_topics: frozenset[str] = frozenset()
    batch_sink: Sink | None = None

    def route(self, topics: set[str], sink: Sink) -> None:
        """Messages of ``topics`` go to ``sink`` (takes effect at the next assignment)."""
        self.batch_topics = frozenset(topics)
        self.batch_sink = sink

    def _build_handler(self, tp: TP, channels: MutableSet[Any]) -> Any:
        sink = self.batch_sink
        if sink is None or tp.topic not in self.batch_topics:
            return super()._build_handler(tp, channels)
        acquire_flow_control = self.app.flow_control.acquire

        async def on_message(message: Any) -> None:
            await acquire_flow_control()  # suspended while partitions move and tables recover
            message.incref(1)  # as faust's delivery to one channel: the sink's ack releases it
            await sink(message)

        return on_message


class EagerTransport(faust_aiokafka.Transport):
    """The aiokafka transport with :class:`EagerConsumer` and :class:`BatchConductor`."""

    Consumer = EagerConsumer
    Conductor = BatchConductor

"""Batches for the pipeline's own topics (:class:`BatchConductor`).

What faust does: its conductor turns every fetched message into an ``Event``, puts it on a channel
queue and runs it through a ``Stream`` (sensors, current event, acks), and its dispatch takes the
callback map's lock for every message.

Why we differ: that per-message path alone bounds a faust agent that does nothing but ack. The
conductor hands the messages of chosen topics straight to a sink (the pipeline's inbox, drained in
batches), after faust's flow control and with the message's reference taken as faust's own
delivery does; the same do-nothing loop then commits about twice as many messages (``guardian
bench``'s two floors, docs/PERFORMANCE.md). The sink acks each message once what it caused is
delivered (:func:`streams.seam.batch_acks.ack_all`). Private parts:
``Conductor._build_handler``, ``_compile_message_handler``, ``_tp_to_callback``,
``_tp_to_callback_lock``.

Upstream issue: none (a cost, not a bug).

Proved by: ``tests/unit/test_eager_fetch.py``: ``test_the_worker_app_uses_the_eager_transport``;
``tests/unit/test_flush_acks.py`` (the inbox it feeds); ``tests/integration/test_pipeline_live.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableSet
from typing import Any

from faust.transport.conductor import Conductor
from faust.types import TP

#: where the batch conductor hands a message: (message) -> awaitable
Sink = Callable[[Any], Awaitable[None]]


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

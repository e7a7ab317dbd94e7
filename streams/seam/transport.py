"""The worker's App, transport and consumer: faust's, with the seam's replacements put together.

What faust does: ``App._new_transport`` builds faust's aiokafka transport, its consumer and
conductor. Why we differ: the App (:class:`SeamApp`) builds :class:`EagerTransport`, whose consumer
(:class:`EagerConsumer`) and conductor (:class:`streams.seam.batch_conductor.BatchConductor`)
carry the replacements listed in ``streams/seam/__init__.py``, one mixin per file.
Private part: ``faust.App._new_transport``.

Proved by: ``tests/unit/test_eager_fetch.py``: ``test_the_worker_app_uses_the_eager_transport``.
"""

from __future__ import annotations

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TransportT

from streams.seam.batch_conductor import BatchConductor
from streams.seam.eager_handoff import EagerHandoff
from streams.seam.log_gaps import LogGapsOnly
from streams.seam.read_offsets import HandsOverEveryRecord
from streams.seam.seeks import KeepsPlaceOnSeek
from streams.seam.short_fetch import ShortFetchConsumerThread


class EagerConsumer(EagerHandoff, KeepsPlaceOnSeek, LogGapsOnly, HandsOverEveryRecord):
    """faust's aiokafka consumer: no task per hand-off (:class:`EagerHandoff`), a seek that keeps
    its place (:class:`KeepsPlaceOnSeek`), gaps only where the log has them (:class:`LogGapsOnly`),
    every record of the pipeline's topics handed over (:class:`HandsOverEveryRecord`); its thread
    is a :class:`ShortFetchConsumerThread`."""

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return ShortFetchConsumerThread(self, loop=self.loop, beacon=self.beacon)


class EagerTransport(faust_aiokafka.Transport):
    """The aiokafka transport with :class:`EagerConsumer` and :class:`BatchConductor`."""

    Consumer = EagerConsumer
    Conductor = BatchConductor


class SeamApp(faust.App):
    """faust's App on :class:`EagerTransport` (a cheaper fetch hand-off)."""

    def _new_transport(self) -> TransportT:
        return EagerTransport(self.conf.broker_consumer, self)

"""Short and gathering fetches (:class:`ShortFetchConsumerThread`, :func:`gather_while_flowing`).

What faust/aiokafka does: faust's consumer thread asks the broker to hold a fetch that finds nothing
new for a fixed 1.5 s, and aiokafka asks for an answer at the first byte.

Why we differ: aiokafka leaves a partition whose fetched records are not yet handed over out of the
next fetch request, and sends one request at a time to a broker: a request sent while every busy
partition was still being handed over asked only for quiet ones, the broker held it the whole wait,
and the next observations waited behind it (``guardian bench``, 10,000 devices at 800 obs/s:
trigger-to-dispatch p99 1,471 ms, 201-367 ms once the wait is 100 ms). Answered at the first byte,
a worker under a steady load fetched a record or two at a time (about a fifth of a core at a
quarter of its maximum load); gathering while records flow took 13 % of the worker's CPU off, idle
unchanged. Private parts: aiokafka's ``_fetch_max_wait_ms``, its fetcher's
``_proc_fetch_request``, ``_fetch_min_bytes``, ``_fetch_max_wait_ms``.

Upstream issue: none (faust fixes the wait; aiokafka has no adaptive setting).

Proved by: ``tests/unit/test_eager_fetch.py``:
``test_the_worker_consumer_lets_the_broker_hold_an_empty_fetch_briefly``,
``test_fetches_gather_records_only_while_records_flow``.
"""

from __future__ import annotations

from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka

from streams.seam.parts import part_of

#: how long the broker may hold a fetch of a worker's inputs that finds nothing new (faust fixes 1.5 s)
FETCH_MAX_WAIT_MS = 100
#: while records flow (the last fetch brought some), a fetch asks the broker to gather this much
#: before it answers (faust: any byte) ...
FETCH_GATHER_BYTES = 64 * 1024
#: ... or to answer after this long
FETCH_GATHER_MS = 10


class ShortFetchConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    """faust's consumer thread, its aiokafka consumer asking the broker to hold a fetch that finds
    nothing new at most ``FETCH_MAX_WAIT_MS`` instead of faust's fixed 1.5 s, and gathering its
    fetches while records flow (:func:`gather_while_flowing`).

    The wait: aiokafka leaves a partition whose fetched records are not yet handed over out of the
    next fetch request, and sends one request at a time to a broker: a request sent while every busy
    partition was still being handed over asked only for quiet ones (plans, control at a steady load
    of observations), the broker held it the whole wait, and the next observations waited behind it
    (trigger to dispatch up to 1.6 s in ``guardian bench``'s slowest probes, all of it in the fetch
    stage)."""

    def _create_worker_consumer(self, transport: Any) -> Any:
        consumer = super()._create_worker_consumer(transport)
        part_of(consumer, "_fetch_max_wait_ms", "aiokafka.AIOKafkaConsumer")
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        start = consumer.start

        async def start_gathering() -> None:
            await start()
            gather_while_flowing(part_of(consumer, "_fetcher", "aiokafka.AIOKafkaConsumer"))

        consumer.start = start_gathering
        return consumer


def gather_while_flowing(fetcher: Any) -> None:
    """Make each fetch request of aiokafka's ``fetcher`` by what the last one brought: after records,
    ask the broker to gather ``FETCH_GATHER_BYTES`` or answer after ``FETCH_GATHER_MS``; after none,
    to answer at the first byte or after ``FETCH_MAX_WAIT_MS``.

    Answered at the first byte, a worker under a steady load fetched as fast as requests could go
    round, a record or two per fetch, each fetch costing its consumer thread and the hand-off to
    the event loop about the same whatever it carried (about a fifth of a core at a quarter of its
    maximum load in ``guardian bench``, docs/PERFORMANCE.md); gathering always would have an idle
    worker ask ten times as often as now. The first record after a quiet spell is answered at once
    as before; behind a backlog the broker has the bytes at once either way."""
    proc = part_of(fetcher, "_proc_fetch_request", "aiokafka.consumer.fetcher.Fetcher")
    part_of(fetcher, "_fetch_min_bytes", "aiokafka.consumer.fetcher.Fetcher")
    part_of(fetcher, "_fetch_max_wait_ms", "aiokafka.consumer.fetcher.Fetcher")

    async def proc_fetch_request(*args: Any) -> Any:
        brought = await proc(*args)  # True when records (or an error to raise) came for a partition
        if brought:
            fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms = FETCH_GATHER_BYTES, FETCH_GATHER_MS
        else:
            fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms = 1, FETCH_MAX_WAIT_MS
        return brought

    fetcher._proc_fetch_request = proc_fetch_request

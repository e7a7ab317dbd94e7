"""The fetch hand-off without a task per message (``streams.seam``), the transport and the fetch's waits."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.app import GuardianApp
from streams.seam.eager_handoff import run_eagerly
from streams.seam.transport import EagerConsumer, EagerTransport


def test_a_coroutine_that_does_not_suspend_finishes_without_a_task() -> None:
    async def main() -> None:
        async def quick() -> int:
            return 7

        before = len(asyncio.all_tasks())
        done, value = run_eagerly(quick())
        assert (done, value) == (True, 7)
        assert len(asyncio.all_tasks()) == before

    asyncio.run(main())


def test_a_coroutine_that_suspends_is_finished_by_awaiting_the_rest() -> None:
    async def main() -> None:
        gate = asyncio.Event()
        steps: list[str] = []

        async def blocked() -> str:
            steps.append("started")
            await gate.wait()
            steps.append("resumed")
            return "delivered"

        done, rest = run_eagerly(blocked())
        assert done is False and steps == ["started"]
        task = asyncio.ensure_future(rest)
        await asyncio.sleep(0)
        assert not task.done()
        gate.set()
        assert await task == "delivered"
        assert steps == ["started", "resumed"]

    asyncio.run(main())


def test_cancelling_the_rest_cancels_the_started_coroutine() -> None:
    async def main() -> None:
        cleaned: list[bool] = []

        async def forever() -> None:
            try:
                await asyncio.Event().wait()
            finally:
                cleaned.append(True)

        done, rest = run_eagerly(forever())
        assert done is False
        task = asyncio.ensure_future(rest)
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert cleaned == [True]

    asyncio.run(main())


def test_errors_propagate_whether_or_not_the_coroutine_suspended() -> None:
    async def main() -> None:
        async def fails_at_once() -> None:
            raise ValueError("bad record")

        with pytest.raises(ValueError, match="bad record"):
            run_eagerly(fails_at_once())

        async def fails_later() -> None:
            await asyncio.sleep(0)
            raise KeyError("later")

        done, rest = run_eagerly(fails_later())
        assert done is False
        with pytest.raises(KeyError):
            await rest

    asyncio.run(main())


def test_the_worker_app_uses_the_eager_transport() -> None:
    app = GuardianApp("eager-test", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    transport: Any = app.transport
    assert isinstance(transport, EagerTransport)
    assert transport.Consumer is EagerConsumer


def test_the_worker_consumer_lets_the_broker_hold_an_empty_fetch_briefly() -> None:
    """faust's worker consumer asks the broker to hold a fetch that finds nothing new for 1.5 s;
    a fetch of the quiet input topics then held back the next observations that long."""
    from streams.seam.short_fetch import FETCH_MAX_WAIT_MS, ShortFetchConsumerThread

    async def main() -> None:
        app = GuardianApp("fetch-test", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
        thread: Any = app.consumer._thread  # type: ignore[attr-defined]
        assert isinstance(thread, ShortFetchConsumerThread)
        try:
            consumer = thread._create_worker_consumer(app.transport)
            assert consumer._fetch_max_wait_ms == FETCH_MAX_WAIT_MS < 1500
            await consumer.stop()  # never started: closes it
        finally:
            thread.thread_loop.close()  # made for the thread, which never started

    asyncio.run(main())


def test_fetches_gather_records_only_while_records_flow() -> None:
    """After a fetch that brought records the next asks the broker to gather a batch's worth (or
    answer after a few milliseconds); after an empty one it asks to be answered at the first record
    (an idle worker does not poll faster than before, and a quiet spell's first record is not held)."""
    from aiokafka.consumer.fetcher import Fetcher

    from streams.seam.short_fetch import (
        FETCH_GATHER_BYTES,
        FETCH_GATHER_MS,
        FETCH_MAX_WAIT_MS,
        gather_while_flowing,
    )

    assert hasattr(Fetcher, "_proc_fetch_request")  # the method wrapped, on aiokafka's own class

    class FakeFetcher:
        def __init__(self, answers: list[bool]) -> None:
            self._fetch_min_bytes = 1
            self._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
            self.answers = answers
            self.asked: list[tuple[int, int]] = []

        async def _proc_fetch_request(self, assignment: Any, node_id: int, request: Any) -> bool:
            self.asked.append((self._fetch_min_bytes, self._fetch_max_wait_ms))
            return self.answers.pop(0)

    fetcher = FakeFetcher([True, True, False, True])

    async def main() -> None:
        gather_while_flowing(fetcher)
        for _ in range(4):
            await fetcher._proc_fetch_request(None, 1, None)

    asyncio.run(main())
    idle, gather = (1, FETCH_MAX_WAIT_MS), (FETCH_GATHER_BYTES, FETCH_GATHER_MS)
    assert fetcher.asked == [idle, gather, gather, idle]
    assert (fetcher._fetch_min_bytes, fetcher._fetch_max_wait_ms) == gather
    assert FETCH_GATHER_BYTES > 1 and FETCH_GATHER_MS < FETCH_MAX_WAIT_MS

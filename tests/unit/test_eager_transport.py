"""The fetch hand-off without a task per message (``streams.faust_seam``)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from streams.app import GuardianApp
from streams.faust_seam import EagerConsumer, EagerTransport, run_eagerly


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

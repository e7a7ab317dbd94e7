"""No task per fetched message (:class:`EagerHandoff`).

What faust/mode does: for every fetched message faust's consumer runs
``wait_first(callback(message), suspend_flow)``: the callback hands the message to the streams'
buffers, and the race against ``suspend_flow`` lets a rebalance abandon a hand-off that is blocked
(flow control suspended, a full buffer). mode's ``Service.wait_first`` makes four tasks and an
``asyncio.wait`` per call.

Why we differ: those tasks were a large part of a bare faust agent's cost per message
(docs/PERFORMANCE.md). :class:`EagerHandoff` runs the callback eagerly up to its first
suspension: almost always it completes right there (the buffer had room) and no task is made; if it
does suspend, the started callback joins the original race, so a blocked hand-off is abandoned
exactly as before. Private parts: mode's ``Service.wait_first`` with ``_stopped``/``_crashed``.

Upstream issue: none (a cost, not a bug).

Proved by: ``tests/unit/test_eager_fetch.py``:
``test_a_coroutine_that_does_not_suspend_finishes_without_a_task``,
``test_a_coroutine_that_suspends_is_finished_by_awaiting_the_rest``,
``test_cancelling_the_rest_cancels_the_started_coroutine``,
``test_errors_propagate_whether_or_not_the_coroutine_suspended``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator
from typing import Any

from faust.transport.drivers import aiokafka as faust_aiokafka
from mode.services import WaitResults


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


class EagerHandoff(faust_aiokafka.Consumer):
    """faust's consumer, handing each fetched message over without a task per message."""

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

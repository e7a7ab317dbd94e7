"""The tasks of one simulated device's run: :class:`TaskRunner` tracks its plan task and the story
beats it spawns, ends the run, and ends it early when one of them crashes."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from simulator.device_state import DeviceState


class TaskRunner:
    """The device's plan task and spawned tasks, whether one crashed, and the event that ends its run."""

    def __init__(self, state: DeviceState) -> None:
        self.state = state
        self.plan_task: asyncio.Task[None] | None = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.finished = asyncio.Event()
        self.crashed = False

    def on_done(self, task: asyncio.Task[None]) -> None:
        """A crashed task ends the device's run (``run`` re-raises its exception)."""
        if not task.cancelled() and task.exception() is not None:
            self.crashed = True
            self.finished.set()

    def spawn(self, coro: Any) -> None:
        task: asyncio.Task[None] = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.on_done)

    def finish(self) -> None:
        self.state.phase = "docked"
        self.finished.set()

    async def stop_plan(self) -> None:
        """Cancel the plan task (if it still runs) and wait until it has stopped."""
        task = self.plan_task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

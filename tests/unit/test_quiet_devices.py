"""The ``guardian.confirm`` timer's rescan after an assignment (``streams.agents.QuietDevices``)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from streams.agents import QuietDevices


class Shell:
    """The shell's part the timer drives: the devices its store holds with a pending change."""

    def __init__(self) -> None:
        self.store: dict[str, int] = {}  # device -> when its pending change is due
        self.tracked: dict[str, int] = {}
        self.sent: list[str] = []
        self.rescanning: dict[int, bytes | None] = {}  # this fake's rescan is done at once

    def rescan(self) -> None:
        self.tracked.update(self.store)

    def due_confirmations(self, wall_ms: int) -> list[tuple[str, int, int]]:
        due = [(device, 0, wall_ms) for device, at in self.tracked.items() if at <= wall_ms]
        for device, _, _ in due:
            del self.tracked[device]
        return due

    def send_control(self, partition: int, key: str, cmd: dict[str, Any]) -> None:
        self.sent.append(key)


def test_partitions_taken_over_are_rescanned_once_their_tables_are_recovered() -> None:
    """A worker takes over a partition whose device waits for a precondition deadline (or a
    debounce window): the timer rescans the store once the new assignment's tables are recovered,
    not at its first tick after the rebalance (faust's "recovery completed" stays set from the
    first assignment on: the store did not hold the device yet, and its deadline never came)."""
    completed = asyncio.Event()
    app: Any = SimpleNamespace(
        consumer_generation_id=1, tables=SimpleNamespace(recovery=SimpleNamespace(completed=completed))
    )
    shell = Shell()
    quiet = QuietDevices(app, shell)  # type: ignore[arg-type]

    completed.set()
    quiet.recovered()  # the first assignment's tables are recovered
    asyncio.run(quiet.confirm())
    assert quiet.scanned

    app.consumer_generation_id = 2  # another worker left: its partitions come here
    quiet.scanned = False  # (the rebalance handlers)
    asyncio.run(quiet.confirm())  # a tick before the taken-over tables are recovered
    assert not quiet.scanned
    shell.store["airbot-g"] = 0  # recovered from the changelog: its deadline has passed
    quiet.recovered()
    asyncio.run(quiet.confirm())
    assert shell.sent == ["airbot-g"]

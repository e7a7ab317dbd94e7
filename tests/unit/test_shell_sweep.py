"""The shell's dedup sweep: judged on the partition's clock, a slice at a time, up to a bound."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from streams.memory_broker import MemoryProducer
from streams.shell import PipelineShell
from tests.unit.shell_fakes import shell_over


def test_a_sweep_of_a_partition_without_a_clock_yet_forgets_no_dedup_key(tmp_path: Path) -> None:
    """A sweep record is timestamped by the wall clock of the worker that sent it (possibly the
    partition's previous owner). The new owner, before it has processed a record of the partition,
    has no receive-time clock there: judged by the wall clock, every key of a fleet's older records
    would go, and their duplicates still to come would be taken for new."""
    from topics.envelope import Coords

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        seen_at = 1_000_000
        shell.store.at(3).put_seen("dev-1", "ev-1", seen_at, Coords("observations", 3, 7))
        await shell.store.writes.flush(MemoryProducer())
        wall = seen_at + 3_600_000
        shell.control(b'{"op": "sweep"}', Coords("control", 3, 1), wall)
        assert shell.store.at(3).get_seen("dev-1", "ev-1") == (seen_at, "observations:3:7")
        # once the partition's records have moved its clock past the window, the key goes
        shell.quiet.stream_time[3] = seen_at + shell.processor.pipeline.dedup_window_ms + 1
        shell.control(b'{"op": "sweep"}', Coords("control", 3, 2), wall)
        assert shell.store.at(3).get_seen("dev-1", "ev-1") is None

    asyncio.run(main())


def test_a_sweep_goes_through_a_large_partition_a_slice_at_a_time_and_forgets_the_same_keys(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A sweep of many keys does not hold the stream up: it deletes a slice's expired keys when its
    record is handled and the rest slice by slice (the pipeline goes on between them); in the end
    exactly the keys older than the window are gone, as in one go."""
    from streams import sweep as sweep_mod
    from topics.envelope import Coords

    monkeypatch.setattr(sweep_mod, "SWEEP_SLICE_SCAN", 3)

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        window = shell.processor.pipeline.dedup_window_ms
        now = 10_000_000_000
        store = shell.store.at(3)
        old = [f"ev-{i:02d}" for i in range(0, 10, 2)]
        recent = [f"ev-{i:02d}" for i in range(1, 10, 2)]
        for i, event in enumerate(old):
            store.put_seen("dev-1", event, now - window - 1 - i, Coords("observations", 3, i))
        for i, event in enumerate(recent):
            store.put_seen("dev-1", event, now - 5, Coords("observations", 3, 100 + i))
        await shell.store.writes.flush(MemoryProducer())
        shell.quiet.stream_time[3] = now
        first = shell.sweep(3, now)
        assert first == 2  # ev-00 and ev-02 among the first three keys
        assert store.get_seen("dev-1", "ev-04") is not None  # not reached yet
        assert 3 in shell.sweeper.sweeping
        slices = 1
        while shell.sweeper.sweeping:
            shell.sweeper.continue_sweep()
            slices += 1
        assert slices == 4  # 10 keys, 3 at a time
        assert [e for e in old if store.get_seen("dev-1", e) is not None] == []
        assert [e for e in recent if store.get_seen("dev-1", e) is None] == []
        assert 3 not in shell.sweeper.sweep_cursor  # through to the end: the next sweep starts over

    asyncio.run(main())


async def expired_keys(shell: PipelineShell, n: int) -> tuple[Any, list[str], int]:
    """``n`` dedup keys of partition 3, all older than the window on the partition's clock (now):
    its store, the keys' event IDs and that clock."""
    from topics.envelope import Coords

    window = shell.processor.pipeline.dedup_window_ms
    now = 10_000_000_000
    store = shell.store.at(3)
    events = [f"ev-{i:02d}" for i in range(n)]
    for i, event in enumerate(events):
        store.put_seen("dev-1", event, now - window - 1, Coords("observations", 3, i))
    await shell.store.writes.flush(MemoryProducer())
    shell.quiet.stream_time[3] = now
    return store, events, now


def test_a_sweep_stops_at_its_bound_and_the_next_goes_on_and_a_rebalance_ends_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from streams import sweep as sweep_mod

    monkeypatch.setattr(sweep_mod, "SWEEP_SLICE_SCAN", 2)
    monkeypatch.setattr(sweep_mod, "SWEEP_MAX_SCAN", 4)

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        store, events, now = await expired_keys(shell, 6)
        shell.sweep(3, now)
        shell.sweeper.continue_sweep()
        assert not shell.sweeper.sweeping  # four keys scanned: this sweep's bound
        assert [e for e in events if store.get_seen("dev-1", e) is not None] == ["ev-04", "ev-05"]
        shell.sweep(3, now)  # the next sweep goes on from there
        assert [e for e in events if store.get_seen("dev-1", e) is not None] == []
        shell.sweep(3, now)
        assert 3 in shell.sweeper.sweeping
        shell.rebalanced()
        assert not shell.sweeper.sweeping and shell.sweeper.continue_sweep() == 0

    asyncio.run(main())


def test_an_idle_pipeline_goes_on_with_a_sweep_under_way_without_waiting_for_input(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from streams import sweep as sweep_mod
    from streams.pipeline_task import PipelineTask

    monkeypatch.setattr(sweep_mod, "SWEEP_SLICE_SCAN", 2)

    async def main() -> None:
        shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
        store, events, now = await expired_keys(shell, 7)
        shell.sweep(3, now)  # the sweep record: its first slice
        task = PipelineTask(None, shell)
        task.attach = lambda: None  # type: ignore[method-assign]
        running = asyncio.ensure_future(task.loop())
        for _ in range(100):
            if not shell.sweeper.sweeping:
                break
            await asyncio.sleep(0)
        assert not shell.sweeper.sweeping and not running.done()  # through, and waiting for input now
        assert [e for e in events if store.get_seen("dev-1", e) is not None] == []
        running.cancel()

    asyncio.run(main())

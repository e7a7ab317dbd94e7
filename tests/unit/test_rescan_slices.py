"""The confirm timer's rescan after an assignment goes through the local devices a slice at a time
(``streams.quiet.PendingConfirmations.rescan`` and ``continue_rescan``, driven by
``QuietDevices.confirm``): records processed meanwhile keep what they left, and a rebalance ends
it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from streams.quiet import RESCAN_SLICE
from streams.shell import PipelineShell
from topics.names import TopicNames


class Store:
    """The store's device table as the rescan sees it: partition -> [(key, due or None)]."""

    def __init__(self, devices: dict[int, list[tuple[str, int | None]]]) -> None:
        self.devices = devices
        self.writes = None
        self.slices = 0

    def device_partitions(self) -> list[int]:
        return sorted(self.devices)

    def due_devices_in(
        self, partition: int, from_key: bytes | None, max_scan: int
    ) -> tuple[list[tuple[str, int]], bytes | None]:
        self.slices += 1
        rows = self.devices[partition]
        start = 0 if from_key is None else [k for k, _ in rows].index(from_key.decode())
        part = rows[start : start + max_scan]
        rest = rows[start + max_scan :]
        return [(k, due) for k, due in part if due is not None], rest[0][0].encode() if rest else None


def shell(store: Store) -> PipelineShell:
    none: Any = None
    return PipelineShell(
        processor=none,
        names=TopicNames("g."),
        tables=none,
        store=store,  # type: ignore[arg-type]
        out_topics={},
        control_topic=none,
    )


def done(device_id: str, next_due_ms: int | None) -> Any:
    return SimpleNamespace(device_id=device_id, next_due_ms=next_due_ms, queued=())


def test_a_rescan_goes_slice_by_slice_and_finds_every_due_device() -> None:
    n = RESCAN_SLICE * 2 + 7
    store = Store(
        {
            0: [(f"a{i:04d}", 1_000 + i if i % 2 else None) for i in range(n)],
            5: [(f"b{i:04d}", 2_000 + i) for i in range(3)],
        }
    )
    sh = shell(store)
    sh.quiet.rescan()
    slices = 0
    while sh.quiet.rescanning:
        sh.quiet.continue_rescan()
        slices += 1
    assert slices == 3 + 1  # partition 0 in three slices, partition 5 in one
    expected = {f"a{i:04d}": (0, 1_000 + i) for i in range(n) if i % 2}
    expected |= {f"b{i:04d}": (5, 2_000 + i) for i in range(3)}
    assert sh.quiet.pending_confirm == expected
    assert sh.quiet.rescan_touched == set()


def test_a_device_processed_during_the_rescan_keeps_what_its_record_left() -> None:
    # the store still holds the entries as they were before the records below (not landed yet)
    store = Store({0: [(f"d{i:04d}", 5_000) for i in range(RESCAN_SLICE + 2)]})
    sh = shell(store)
    sh.quiet.rescan()
    sh.quiet.continue_rescan()  # the first slice
    last = f"d{RESCAN_SLICE + 1:04d}"
    sh.track(done(last, None), 0)  # its pending change resolved by a record
    sh.track(done(f"d{RESCAN_SLICE:04d}", 9_000), 0)  # its change moved by a record
    sh.track(done("d0000", None), 0)  # already found by the first slice, then resolved
    sh.quiet.continue_rescan()
    assert not sh.quiet.rescanning
    assert last not in sh.quiet.pending_confirm
    assert sh.quiet.pending_confirm[f"d{RESCAN_SLICE:04d}"] == (0, 9_000)
    assert "d0000" not in sh.quiet.pending_confirm
    assert sh.quiet.pending_confirm["d0001"] == (0, 5_000)


def test_a_rebalance_ends_the_rescan() -> None:
    store = Store({0: [(f"d{i:04d}", 5_000) for i in range(RESCAN_SLICE * 3)]})
    sh = shell(store)
    sh.quiet.rescan()
    sh.quiet.continue_rescan()
    sh.store = SimpleNamespace(clear_cache=lambda: None, writes=None)  # type: ignore[assignment]
    sh.batch = SimpleNamespace(discard=lambda: None)  # type: ignore[assignment]
    sh.rebalanced()
    assert not sh.quiet.rescanning and not sh.quiet.rescan_touched
    assert sh.quiet.continue_rescan() == 0
    assert store.slices == 1

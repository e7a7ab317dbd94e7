"""Quiet devices (:class:`PendingConfirmations`, :class:`QuietDevices`): each device's earliest
pending debounce change or precondition deadline, and each partition's receive-time clock.

:class:`PendingConfirmations` owns them and decides when a device is due (on the partition's
receive-time clock, or the wall clock once the partition is quiet: nothing held, fetched or on the
broker for it); after table recovery it rescans the local devices a slice at a time. The
``guardian.confirm`` timer (:class:`QuietDevices`) asks, through ``control``, to confirm the
devices due.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.order import DeviceMerge
from streams.positions import Positions
from streams.seam.recovery import RecoveryWatch
from tables.store.faust_tables import FaustStore
from topics.names import INPUT_SUFFIXES

CONFIRM_EVERY_S = 0.2
#: device-table keys the rescan after an assignment goes through per slice, with the event loop's
#: turns between slices (a whole rescan decoded every device entry at once: 0.5-2.7 s of stall per
#: assignment at 10,000 devices)
RESCAN_SLICE = 100


@dataclass
class PendingConfirmations:
    """Devices with a pending change, and the partitions' clocks (see the module)."""

    store: FaustStore
    #: the merge (a device with records held back is confirmed by them)
    merger: DeviceMerge[Any]
    #: the input positions (a partition behind the broker is not quiet)
    positions: Positions
    #: device -> (partition, due receive-time ms) of its earliest pending debounce change
    pending_confirm: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: partition -> latest Kafka timestamp processed (the partition's receive-time clock)
    stream_time: dict[int, int] = field(default_factory=dict)
    #: partition -> wall-clock seconds (monotonic) of the last record processed
    last_activity: dict[int, float] = field(default_factory=dict)
    #: the rescan after an assignment under way: partition -> the key it goes on from (None: the
    #: partition's first), gone through a slice at a time (:meth:`continue_rescan`)
    rescanning: dict[int, bytes | None] = field(default_factory=dict)
    #: devices whose records were processed since the rescan began: what they left in
    #: ``pending_confirm`` is newer than the store's entry the rescan may still read
    rescan_touched: set[str] = field(default_factory=set)

    def clock_in(self, partition: int, received_at_ms: int) -> None:
        """An input record of ``partition`` received at ``received_at_ms`` was processed."""
        if received_at_ms > self.stream_time.get(partition, 0):
            self.stream_time[partition] = received_at_ms
        self.last_activity[partition] = time.monotonic()

    def track(self, device_id: str, partition: int, next_due_ms: int | None) -> None:
        """A record of the device was processed: when its pending change is next due (None: none)."""
        if self.rescanning:
            self.rescan_touched.add(device_id)
        if next_due_ms is None:
            self.pending_confirm.pop(device_id, None)
        else:
            self.pending_confirm[device_id] = (partition, next_due_ms)

    def forget_rescan(self) -> None:
        """Partitions move: the rescan under way ends (the next assignment's recovery starts one)."""
        self.rescanning.clear()
        self.rescan_touched.clear()

    def rescan(self) -> None:
        """After table recovery: begin looking through the devices of this worker's partitions for
        a pending debounce change or a precondition deadline, to confirm when due; the slices are
        :meth:`continue_rescan`'s. (Triggers still waiting for an asynchronous decision are
        submitted again by ``streams.lanes`` on the same recovery.)"""
        self.rescanning = dict.fromkeys(self.store.device_partitions())
        self.rescan_touched.clear()

    def continue_rescan(self) -> int:
        """The rescan's next slice (``RESCAN_SLICE`` keys); how many due devices it found. A device
        whose record was processed since the rescan began keeps what that record left (its entry
        in the store may be older: not landed yet, or read before the record)."""
        if not self.rescanning:
            return 0
        partition, cursor = next(iter(self.rescanning.items()))
        found, next_cursor = self.store.due_devices_in(partition, cursor, RESCAN_SLICE)
        for device_id, due in found:
            if device_id not in self.rescan_touched:
                self.pending_confirm[device_id] = (partition, due)
        if next_cursor is None:
            del self.rescanning[partition]
            if not self.rescanning:
                self.rescan_touched.clear()
        else:
            self.rescanning[partition] = next_cursor
        return len(found)

    def due_confirmations(self, wall_ms: int, idle_s: float = 1.0) -> list[tuple[str, int, int]]:
        """Devices whose pending debounce change is due: (device, partition, now_ms to confirm at).

        The clock is the partition's receive-time clock (the latest Kafka timestamp processed
        there), so a worker catching up on old records confirms exactly where a replay would; a
        partition that has been idle for ``idle_s`` follows the wall clock (a quiet device)."""
        due: list[tuple[str, int, int]] = []
        mono = time.monotonic()
        for device_id, (partition, at) in self.pending_confirm.items():
            now_ms = self.stream_time.get(partition, 0)
            # a partition is quiet only when nothing of it waits: no record held back by the merge,
            # none fetched but not processed yet, none left on the broker (a worker starved of CPU
            # for a second is not a quiet device: its clock waits for those records); a device with
            # records held back is confirmed by them (the partition's clock may be past them)
            if self.merger.holds_device(partition, device_id.encode()):
                continue
            idle = (
                mono - self.last_activity.get(partition, 0.0) >= idle_s
                and not self.merger.holds(partition)
                and all(self.positions.caught_up(suffix, partition) for suffix in INPUT_SUFFIXES)
            )
            if now_ms < at and idle:
                now_ms = max(now_ms, wall_ms)
            if at <= now_ms:
                due.append((device_id, partition, now_ms))
        for device_id, _, _ in due:
            del self.pending_confirm[device_id]
        return due


class QuietDevices:
    """The ``guardian.confirm`` timer: after table recovery it rescans the local devices once (per
    assignment), then asks, through ``control``, to confirm the devices whose pending change is due."""

    def __init__(
        self,
        quiet: PendingConfirmations,
        send_control: Callable[[int, str, dict[str, Any]], None],
        recovery: RecoveryWatch,
    ) -> None:
        self.quiet = quiet
        self.send_control = send_control
        #: whether the tables are recovered for the current assignment (faust's own ``completed``
        #: stays set from the first assignment on: a rescan right after a later one read the store
        #: before the partitions taken over were in it, and their devices' pending changes and
        #: precondition deadlines were never confirmed)
        self.recovery = recovery
        #: the local devices were rescanned since the last rebalance
        self.scanned = False

    async def confirm(self) -> None:
        quiet = self.quiet
        if not self.scanned and self.recovery.completed():
            self.scanned = True
            quiet.rescan()
        while quiet.rescanning:  # a slice at a time, the event loop's turns between
            quiet.continue_rescan()
            await asyncio.sleep(0)
        for device_id, partition, now_ms in quiet.due_confirmations(int(time.time() * 1000)):
            self.send_control(
                partition, device_id, {"op": "confirm", "device_id": device_id, "now_ms": now_ms}
            )

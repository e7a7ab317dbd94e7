"""The dedup sweep (:class:`DedupSweep`): it owns the sweeps under way, one partition's dedup keys
a slice at a time, and where the next sweep of a partition goes on from; it decides which keys
are old enough to go (:func:`expired_dedup_keys`), on the partition's receive-time clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from pipeline.runner import Processor
from tables.store.faust_tables import SEP, FaustStore, GuardianTables

SWEEP_EVERY_S = 60.0
SWEEP_MAX_DELETES = 20_000
SWEEP_MAX_SCAN = 100_000
#: a sweep goes through its dedup keys this many at a time (about 1-2 ms on a free core), the
#: pipeline's records and the event loop's other work in between (a partition's whole scan at once
#: stopped the stream for up to a quarter of a second per partition, docs/PERFORMANCE.md)
SWEEP_SLICE_SCAN = 500


@dataclass
class Sweep:
    """A sweep of one partition's dedup keys under way (:meth:`DedupSweep.sweep`): the clock it
    judges by, where it goes on from (None: the beginning) and what it may still scan and delete."""

    now_ms: int
    cursor: bytes | None
    scan_left: int = SWEEP_MAX_SCAN
    deletes_left: int = SWEEP_MAX_DELETES


@dataclass
class DedupSweep:
    """The sweeps of the dedup keys under way (see the module)."""

    processor: Processor
    tables: GuardianTables
    store: FaustStore
    #: how often the ``guardian.sweep`` timer asks for a sweep of each partition
    every_s: float = SWEEP_EVERY_S
    #: partition -> the dedup key the next sweep goes on from (a sweep scans a bounded slice)
    sweep_cursor: dict[int, bytes] = field(default_factory=dict)
    #: partition -> its sweep under way, gone through a slice at a time (``continue_sweep``)
    sweeping: dict[int, Sweep] = field(default_factory=dict)

    def sweep(self, partition: int, now_ms: int, clock: int | None) -> int:
        """Delete dedup keys of this partition older than the dedup window (bounded per call), on
        the partition's receive-time clock ``clock``: the latest Kafka timestamp this worker processed
        there.

        The keys are gone through ``SWEEP_SLICE_SCAN`` at a time: the first slice now, the rest by
        :meth:`continue_sweep` (the pipeline calls it between its records), so a large partition's
        sweep never holds the stream up. Which keys go does not depend on when: a key older than
        the window on the sweep's clock can no longer make any record a duplicate.

        A partition with no record processed here yet has no clock, and is not swept: the sweep
        record's own timestamp is the wall clock of whichever worker sent it (possibly the
        partition's previous owner), and keys judged by it would go while records that find them
        duplicates are still to come (as after a rebalance, or on a replay of old records)."""
        self.tables.access.db(self.tables.seen, partition)  # no store: an error, not "nothing swept"
        if clock is None:
            return 0
        under_way = self.sweeping.pop(partition, None)
        cursor = self.sweep_cursor.pop(partition, None)
        if under_way is not None:
            cursor = under_way.cursor  # a sweep record came before the last one was through
        self.sweeping[partition] = Sweep(min(now_ms, clock), cursor, SWEEP_MAX_SCAN, SWEEP_MAX_DELETES)
        return self._sweep_slice(partition)

    def continue_sweep(self) -> int:
        """The next slice of the sweep under way longest (:meth:`sweep`); how many keys it deleted."""
        if not self.sweeping:
            return 0
        return self._sweep_slice(next(iter(self.sweeping)))

    def _sweep_slice(self, partition: int) -> int:
        job = self.sweeping[partition]
        db = self.tables.access.db(self.tables.seen, partition)
        # a fresh iterator per slice: none is kept across the event loop's turns (a rebalance may
        # close the partition's store meanwhile, and ends the sweep: ``rebalanced``)
        items = db.items(from_key=job.cursor) if job.cursor is not None else db.items()
        scan = min(SWEEP_SLICE_SCAN, job.scan_left)
        window = self.processor.pipeline.dedup_window_ms
        expired, next_cursor = expired_dedup_keys(
            items, job.now_ms, window, max_scan=scan, max_delete=job.deletes_left
        )
        for key in expired:
            self.store.forget_seen(key, partition)
        job.deletes_left -= len(expired)
        job.scan_left -= scan
        if next_cursor is None:
            del self.sweeping[partition]  # through to the end
        elif job.scan_left <= 0 or job.deletes_left <= 0:
            del self.sweeping[partition]  # this sweep's bound: the next one goes on from here
            self.sweep_cursor[partition] = next_cursor
        else:
            job.cursor = next_cursor
        return len(expired)


def expired_dedup_keys(
    items: Iterable[tuple[Any, Any]],
    now_ms: int,
    window_ms: int,
    *,
    max_scan: int = SWEEP_MAX_SCAN,
    max_delete: int = SWEEP_MAX_DELETES,
) -> tuple[list[bytes], bytes | None]:
    """The dedup keys (``device \x1f event`` -> ``"<received ms> <coords>"``) older than the window
    among at most ``max_scan`` items, and the key to go on from next time (None: the scan reached
    the end), so one sweep never stalls the stream for long."""
    expired: list[bytes] = []
    sep = SEP.encode()
    for scanned, (raw_key, value) in enumerate(items):
        key = bytes(raw_key)
        if scanned >= max_scan or len(expired) >= max_delete:
            return expired, key
        if sep not in key:
            continue  # faust's own bookkeeping shares the database
        try:
            seen_at = int(bytes(value).split(b" ", 1)[0])
        except (TypeError, ValueError):
            continue
        if now_ms - seen_at > window_ms:
            expired.append(key)
    return expired, None

"""The order in which one device's input records are processed (docs/CONTRACTS.md §2 rule 11).

The one implementation of the rule, used by the live worker (:class:`DeviceMerge`, fed by
``streams.held``) and by ``guardian replay`` (:class:`OrderClocks` and :data:`RANK` give its sort
key; :func:`in_order` for records held in memory):

- within one topic, a device's records go in offset order;
- across topics, by **order time**: the largest Kafka timestamp among the device's records of that
  topic up to and including this one, in offset order (:class:`OrderClocks`). A device's records go
  in (order time, topic rank, offset) order. That is the same as always taking, of the four topics'
  next records of the device, the one with the smallest (timestamp, topic rank), and it never
  assumes that timestamps rise with offsets: they do not (producers set them, devices share
  partitions).

A device is a Kafka key within a partition (every record about a device is keyed by it, §1). The
order of different devices' records is not part of the rule. Nothing here does I/O or reads a
clock: the live merge is told what the consumer knows and what time it is.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from topics.names import INPUT_SUFFIXES

T = TypeVar("T")

#: topic suffix -> its rank in the order (ties of order time: plans first)
RANK: dict[str, int] = {suffix: i for i, suffix in enumerate(INPUT_SUFFIXES)}

#: (suffix, partition) -> has the worker been given every record of that topic-partition up to the
#: broker's high watermark (its lag known to be zero)?
CaughtUp = Callable[[str, int], bool]
#: a device within its partition: (partition, Kafka key)
Device = tuple[int, bytes | None]
#: (order time, topic rank, offset): a device's records are processed in this key's order
OrderKey = tuple[int, int, int]


class OrderClocks:
    """Each device's order time per input topic: the largest timestamp among its records of the
    topic so far. Must be given each device's records of a topic in offset order."""

    def __init__(self) -> None:
        self._latest: dict[tuple[int, bytes | None, int], int] = {}

    def order_time(self, partition: int, key: bytes | None, rank: int, ts: int) -> int:
        """The order time of the record (the next one, in offset order, of its device and topic)."""
        k = (partition, key, rank)
        latest = self._latest.get(k)
        if latest is None or ts > latest:
            self._latest[k] = ts
            return ts
        return latest

    def clear(self) -> None:
        self._latest.clear()


class Coordinates(Protocol):
    """What the order reads of a record: where it is in Kafka, its key and its timestamp."""

    @property
    def suffix(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def ts(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...


R = TypeVar("R", bound=Coordinates)


def in_order(records: Iterable[R]) -> list[tuple[int, R]]:
    """Input records (their order does not matter) in the order of the rule, each with its order
    time; records of different devices by (order time, topic rank, partition, offset). A record
    at the same coordinates as another keeps its place after it."""
    by_stream = sorted(records, key=lambda r: (r.partition, r.key or b"", RANK[r.suffix], r.offset))
    clocks = OrderClocks()
    timed = [(clocks.order_time(r.partition, r.key, RANK[r.suffix], r.ts), r) for r in by_stream]
    timed.sort(key=lambda t: (t[0], RANK[t[1].suffix], t[1].partition, t[1].offset))
    return timed


@dataclass
class _Queue(Generic[T]):
    """One device's held records: a heap of (order key, since, suffix, item) and counts per topic."""

    heap: list[tuple[OrderKey, float, str, T]] = field(default_factory=list)
    held: dict[str, int] = field(default_factory=dict)
    #: the order key of the last record released (a record pushed below it is a late arrival)
    last: OrderKey | None = None


@dataclass
class DeviceMerge(Generic[T]):
    """The live worker's side of the rule: holds each device's records and releases them in order
    once no record of the device that comes before them can still be fetched.

    A device's next record (its smallest order key) goes when, for every other input topic, a
    record of the device from that topic is held (its order key is not smaller: order times only
    rise within a device's topic) or the topic-partition is caught up. A record not yet fetched
    is waited for even when other devices' records of its topic are held. ``max_hold_s`` bounds the
    wait on the clock the caller passes (a stalled fetch never stalls a device for good); a record
    pushed with an order key below one already released is a late arrival: it goes in arrival
    order and :meth:`push` says so. A record ``blocked`` says must wait (a plan whose claim is not
    settled) holds its device's later records however long it takes."""

    suffixes: tuple[str, ...] = INPUT_SUFFIXES
    max_hold_s: float = 10.0
    clocks: OrderClocks = field(default_factory=OrderClocks)
    _queues: dict[Device, _Queue[T]] = field(default_factory=dict)
    #: devices to look at in the next :meth:`pop_ready` (pushed to, or what they waited for came)
    _candidates: dict[Device, None] = field(default_factory=dict)
    #: (suffix, partition) not caught up -> devices whose next record waits for it
    _waiting: dict[tuple[str, int], set[Device]] = field(default_factory=dict)
    #: device -> since when its next record waits; and a heap of the same, oldest first (stale
    #: entries are skipped)
    _waiting_since: dict[Device, float] = field(default_factory=dict)
    _expiry: list[tuple[float, int, Device]] = field(default_factory=list)
    _pushed_waits: int = 0
    #: devices whose next record ``blocked`` holds
    _blocked: set[Device] = field(default_factory=set)
    _held: int = 0
    _held_in: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rank = {s: RANK.get(s, i) for i, s in enumerate(self.suffixes)}

    def __len__(self) -> int:
        return self._held

    def push(
        self, suffix: str, partition: int, key: bytes | None, ts: int, offset: int, item: T, now: float
    ) -> bool:
        """The next record of a topic-partition (in offset order). True: a late arrival (a record
        of its device that comes after it in the order has been released already)."""
        rank = self._rank[suffix]
        order_key = (self.clocks.order_time(partition, key, rank, ts), rank, offset)
        device = (partition, key)
        queue = self._queues.get(device)
        if queue is None:
            queue = self._queues[device] = _Queue()
        heapq.heappush(queue.heap, (order_key, now, suffix, item))
        queue.held[suffix] = queue.held.get(suffix, 0) + 1
        self._held += 1
        self._held_in[partition] = self._held_in.get(partition, 0) + 1
        self._candidates[device] = None
        return queue.last is not None and order_key < queue.last

    def pop_ready(
        self,
        caught_up: CaughtUp,
        now: float,
        limit: int | None = None,
        blocked: Callable[[T], bool] | None = None,
    ) -> list[T]:
        """The records that can go now (at most ``limit``), each device's in order."""
        candidates = self._candidates
        for tp in [tp for tp in self._waiting if caught_up(*tp)]:
            candidates.update(dict.fromkeys(self._waiting.pop(tp)))
        expiry = self._expiry
        while expiry and now - expiry[0][0] >= self.max_hold_s:
            since, _, device = heapq.heappop(expiry)
            if self._waiting_since.get(device) == since:
                candidates[device] = None
        if self._blocked:
            candidates.update(dict.fromkeys(self._blocked))
            self._blocked.clear()
        out: list[T] = []
        while candidates and (limit is None or len(out) < limit):
            device = next(iter(candidates))
            if self._release(device, caught_up, now, blocked, out, limit):
                del candidates[device]
        return out

    def _release(
        self,
        device: Device,
        caught_up: CaughtUp,
        now: float,
        blocked: Callable[[T], bool] | None,
        out: list[T],
        limit: int | None,
    ) -> bool:
        """Release the device's records that can go; False: stopped at ``limit`` with more to go."""
        queue = self._queues.get(device)
        partition = device[0]
        while queue is not None and queue.heap:
            if limit is not None and len(out) >= limit:
                return False
            order_key, since, suffix, item = queue.heap[0]
            if blocked is not None and blocked(item):
                self._blocked.add(device)
                return True
            awaited = self._awaited(queue, suffix, partition, caught_up)
            if awaited is not None and now - since < self.max_hold_s:
                self._waiting.setdefault((awaited, partition), set()).add(device)
                if self._waiting_since.get(device) != since:
                    self._waiting_since[device] = since
                    self._pushed_waits += 1  # (a unique second field: devices never compare)
                    heapq.heappush(self._expiry, (since, self._pushed_waits, device))
                return True
            heapq.heappop(queue.heap)
            queue.held[suffix] -= 1
            if queue.last is None or order_key > queue.last:
                queue.last = order_key
            self._held -= 1
            self._held_in[partition] -= 1
            self._waiting_since.pop(device, None)
            out.append(item)
        return True

    def _awaited(self, queue: _Queue[T], suffix: str, partition: int, caught_up: CaughtUp) -> str | None:
        """A topic that may still hand over a record of the device that comes before its next one
        (none held of it, and its topic-partition not caught up); None: the next one can go."""
        for other in self.suffixes:
            if other != suffix and not queue.held.get(other) and not caught_up(other, partition):
                return other
        return None

    def holds(self, partition: int) -> bool:
        """Whether records of ``partition`` are held back."""
        return bool(self._held_in.get(partition))

    def holds_device(self, partition: int, key: bytes | None) -> bool:
        """Whether records of this device are held back."""
        queue = self._queues.get((partition, key))
        return queue is not None and bool(queue.heap)

    def drain(self) -> list[T]:
        """Everything held, each device's in order, and all that was known forgotten (a rebalance:
        the partitions are read again from their committed offsets)."""
        out: list[T] = []
        for queue in self._queues.values():
            while queue.heap:
                out.append(heapq.heappop(queue.heap)[3])
        self._queues.clear()
        self._candidates.clear()
        self._waiting.clear()
        self._waiting_since.clear()
        self._expiry.clear()
        self._blocked.clear()
        self._held = 0
        self._held_in.clear()
        self.clocks.clear()
        return out

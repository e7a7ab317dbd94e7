"""A timestamp-ordered merge of the input topics, per partition number.

The four input topics are consumed independently, so without help a worker catching up on a
backlog would see, say, all of a device's observations before its task events. The functional
core's results depend on the order (a return dispatch stops security only if the
``security.started`` evidence came first), and ``guardian replay`` orders by Kafka timestamp, so
the live worker must too: records of partition ``p`` are released in (timestamp, topic order,
offset) order, and a record is held back while another input topic of the same partition may
still deliver an earlier one — that is, while that topic-partition is not caught up to its high
watermark. ``max_hold_s`` bounds how long anything waits (a stalled fetch never stalls the
pipeline), on the clock the caller passes: the live shell's counts only the time its pipeline
waits for input (``streams.agents.PipelineShell.merge_clock``), so a busy worker keeps the order.
Records already in order (the live steady state) pass straight through.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")

CaughtUp = Callable[[str, int], bool]


@dataclass(order=True)
class _Held(Generic[T]):
    ts: int
    topic_rank: int
    offset: int
    since: float = field(compare=False)
    suffix: str = field(compare=False)
    item: T = field(compare=False)


@dataclass
class TimestampMerger(Generic[T]):
    """Holds items per partition; releases them in timestamp order when it is safe to."""

    suffixes: tuple[str, ...]
    max_hold_s: float = 1.0
    _heaps: dict[int, list[_Held[T]]] = field(default_factory=dict)
    _held_per_suffix: dict[tuple[int, str], int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._rank = {s: i for i, s in enumerate(self.suffixes)}

    def __len__(self) -> int:
        return sum(len(h) for h in self._heaps.values())

    def push(self, suffix: str, partition: int, ts: int, offset: int, item: T, now: float) -> None:
        held = _Held(ts, self._rank[suffix], offset, now, suffix, item)
        heapq.heappush(self._heaps.setdefault(partition, []), held)
        key = (partition, suffix)
        self._held_per_suffix[key] = self._held_per_suffix.get(key, 0) + 1

    def pop_ready(
        self,
        caught_up: CaughtUp,
        now: float,
        limit: int | None = None,
        blocked: Callable[[T], bool] | None = None,
    ) -> list[T]:
        """The items that can go now (at most ``limit``), in order. An item ``blocked`` says must
        wait stays, with everything after it in its partition, however long it has been held."""
        out: list[T] = []
        for partition, heap in self._heaps.items():
            while heap and (limit is None or len(out) < limit):
                head = heap[0]
                if blocked is not None and blocked(head.item):
                    break
                if now - head.since < self.max_hold_s and not self._safe(partition, head, caught_up):
                    break
                heapq.heappop(heap)
                key = (partition, head.suffix)
                self._held_per_suffix[key] -= 1
                out.append(head.item)
        return out

    def holds(self, partition: int) -> bool:
        """Whether records of ``partition`` are held back (its devices are not quiet)."""
        return bool(self._heaps.get(partition))

    def drain(self) -> list[T]:
        """Everything, in order (on shutdown or rebalance)."""
        out: list[T] = []
        for heap in self._heaps.values():
            while heap:
                out.append(heapq.heappop(heap).item)
        self._held_per_suffix.clear()
        return out

    def _safe(self, partition: int, head: _Held[T], caught_up: CaughtUp) -> bool:
        # another topic of this partition could still deliver an earlier record only if nothing
        # of it is held here (a held record of it would be ordered before or after the head
        # already) and it is not caught up to its high watermark
        for suffix in self.suffixes:
            if suffix == head.suffix:
                continue
            if self._held_per_suffix.get((partition, suffix), 0) > 0:
                continue
            if not caught_up(suffix, partition):
                return False
        return True

"""Liveness judged without the wall clock: stalled input partitions and time spent stopped.

Plain deterministic Python: every method takes the time it judges at (``now``: monotonic seconds
as :class:`WaitClock` gives them, ``wall_ms``: the wall clock for the broker's answers); the
worker's watchdog (``streams.health.watchdog``) reads the consumer and carries out the actions.

**A stalled partition.** faust-streaming can leave a partition assigned and never fetched after a
rebalance (faust-streaming #629, open; #175), or fetch records that never reach the pipeline: the
worker holds the partition, nobody reads it, and nothing says so. :class:`InputWatch` finds an
input partition with records past its committed offset whose committed offset and fetch position
stay where they are for ``after_s`` (``GUARDIAN_STALL_AFTER_S``) while the pipeline waits for input
and the broker answers the consumer's fetches (a busy pipeline gets there; a silent broker stalls
every partition alike, which is not this). Upstream, such a worker stays as it is until someone
restarts it, and before this module Guardian's own watchdog stopped it (exit 5), shrinking the
group. Now the stall is healed in the process, in steps, each one tried when the step before did
not make the partition move within ``after_s``: seek it to its committed offset and resume its
fetch (a fetch that lost its place or was never resumed), then rejoin the consumer group (faust
builds its fetch state for the assignment again), then again from the start. A stall is counted
once when found (``guardian_stall_detected_total``), each step taken
(``guardian_stall_heal_actions_total``) and once when it ends with the partition read again
(``guardian_stall_healed_total``); while it lasts ``/ready`` names it (503). Tests:
``tests/unit/test_liveness.py``.

**Time spent stopped.** ``time.monotonic()`` goes on while the process is stopped (SIGSTOP, a
suspended VM, a debugger): on the raw clock a worker stopped for 20 s found it had waited 20 s for
its assignment. :class:`WaitClock` takes a jump between two of the watchdog's ticks far beyond its
interval for time the process was stopped, and leaves it out of every wait it measures.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

#: how long an input partition may hold records past its committed offset, neither its committed
#: offset nor its fetch position moving, while the pipeline waits for input and the broker answers,
#: before it counts as stalled (``GUARDIAN_STALL_AFTER_S``)
STALL_AFTER_S = 15.0
#: a gap between two watchdog ticks longer than this many tick intervals is time spent stopped
STOPPED_AFTER_TICKS = 10
#: ... and never less than this (a busy event loop that ticks late is not a stopped process)
STOPPED_AFTER_MIN_S = 5.0

Lag = Mapping[tuple[str, int], tuple[int, int | None]]
Key = tuple[str, int]


@dataclass
class WaitClock:
    """Monotonic seconds minus the time the process was stopped.

    :meth:`tick`, called by the watchdog every ``tick_s``, finds a gap since its last tick longer
    than ``STOPPED_AFTER_TICKS`` intervals (at least ``STOPPED_AFTER_MIN_S``): the process did not
    run meanwhile (stopped, suspended), and all of the gap but one interval is left out of every
    time this clock gives."""

    tick_s: float = 0.5
    monotonic: Callable[[], float] = time.monotonic
    #: time found stopped so far
    stopped_s: float = 0.0
    #: raw monotonic time of the last tick
    last_tick: float | None = None

    @property
    def stopped_after_s(self) -> float:
        return max(STOPPED_AFTER_MIN_S, STOPPED_AFTER_TICKS * self.tick_s)

    def now(self) -> float:
        """The time now, without the time spent stopped."""
        return self.monotonic() - self.stopped_s

    def tick(self) -> float:
        """A watchdog tick: the time now, a gap since the last tick taken for time stopped."""
        raw = self.monotonic()
        if self.last_tick is not None and raw - self.last_tick > self.stopped_after_s:
            self.stopped_s += raw - self.last_tick - self.tick_s
        self.last_tick = raw
        return raw - self.stopped_s


@dataclass(frozen=True)
class FetchView:
    """Where the fetch of an input partition stands (``streams.seam.reads.FetchState``'s fields)."""

    position: int | None
    fetched_unread: bool
    active: bool
    answered_ms: int | None


@dataclass(frozen=True)
class Stall:
    """An input partition found stalled: what it holds and where its fetch stands."""

    topic: str
    partition: int
    high: int
    committed: int | None
    for_s: float
    state: FetchView | None

    def reason(self) -> str:
        state = self.state
        if state is None:
            where = "the consumer has no fetch state for it"
        elif state.position is None:
            where = "its fetch has no position"
        else:
            where = f"fetch position {state.position}"
            if state.fetched_unread:
                where += ", fetched records not taken"
            if not state.active:
                where += ", not among the partitions the consumer asks for"
        committed = self.committed
        return (
            f"input partition {self.topic}[{self.partition}] has {self.high - (committed or 0)} record(s) "
            f"past its committed offset ({'none' if committed is None else committed}, end {self.high}), "
            f"none committed for {self.for_s:.0f} s while the pipeline waits for input ({where})"
        )


Step = Literal["seek", "rejoin"]
#: the heal steps, in the order they are tried (then again from the first)
STEPS: tuple[Step, ...] = ("seek", "rejoin")


@dataclass(frozen=True)
class Heal:
    """One heal step for the watchdog to carry out (of an input partition, or with no partition:
    of the worker's group membership)."""

    step: Step
    topic: str | None = None
    partition: int | None = None
    #: where a ``seek`` goes: the committed offset (None: where the broker has it, else the log's
    #: beginning)
    offset: int | None = None


@dataclass
class Episode:
    """A stall of one partition, from when it was found until the partition is read again."""

    stall: Stall
    #: the committed offset when it was found: the stall ends when it moves
    committed: int | None
    steps: list[Step] = field(default_factory=list)


@dataclass
class InputWatch:
    """Input partitions a worker holds and does not read, and their healing (module docstring)."""

    #: (topic, partition) -> (high watermark, committed offset) of the assigned input partitions
    lag: Callable[[], Lag]
    #: (topic, partition) -> where the consumer's fetch stands
    fetch: Callable[[], Mapping[Key, Any]]
    #: does the pipeline wait for input (nothing taken, nothing to do)?
    idle: Callable[[], bool]
    after_s: float = STALL_AFTER_S
    #: (topic, partition) -> (committed offset, fetch position) seen last, and since when
    seen: dict[Key, tuple[tuple[int | None, int | None], float]] = field(default_factory=dict)
    #: the stalls not over yet
    episodes: dict[Key, Episode] = field(default_factory=dict)
    #: counts: stalls found, heal steps taken (per step), stalls over with the partition read again
    detected: int = 0
    steps_taken: dict[Step, int] = field(default_factory=lambda: dict.fromkeys(STEPS, 0))
    healed: int = 0

    def reset(self) -> None:
        """Partitions moved: nothing seen so far counts (the stalls stay open until judged)."""
        self.seen.clear()

    def starved(self, now: float, wall_ms: int) -> list[Stall]:
        """The input partitions stalled now (empty: every one moves or has nothing to read)."""
        lag = self.lag()
        states = {k: _view(v) for k, v in self.fetch().items()}
        for key in [k for k in self.seen if k not in lag]:
            del self.seen[key]
        late: list[Stall] = []
        for key, (high, committed) in lag.items():
            state = states.get(key)
            mark = (committed, None if state is None else state.position)
            before = self.seen.get(key)
            if before is None or before[0] != mark or high <= (committed or 0):
                self.seen[key] = (mark, now)
                continue
            if now - before[1] >= self.after_s:
                late.append(Stall(key[0], key[1], high, committed, now - before[1], state))
        if not late or not self.idle() or not _broker_answers(states, wall_ms, self.after_s):
            return []
        return sorted(late, key=lambda s: (s.topic, s.partition))

    def judge(self, now: float, wall_ms: int) -> list[Heal]:
        """Look once (the worker being otherwise ready): end the stalls whose partition moves, and
        the heal step due for each partition stalled now."""
        lag = self.lag()
        for key, episode in list(self.episodes.items()):
            held = lag.get(key)
            if held is None:
                del self.episodes[key]  # another worker holds it now, and reads it from its commit
                continue
            high, committed = held
            if committed != episode.committed or high <= (committed or 0):
                del self.episodes[key]
                self.healed += 1
        heals: list[Heal] = []
        for stall in self.starved(now, wall_ms):
            key = (stall.topic, stall.partition)
            found = self.episodes.get(key)
            if found is None:
                found = self.episodes[key] = Episode(stall, stall.committed)
                self.detected += 1
            else:
                found.stall = stall
            heals.append(self._next_step(found, now))
        return heals

    def failed(self, heal: Heal, now: float) -> Heal | None:
        """``heal`` could not be carried out: the next step, at once (None: none to try now)."""
        if heal.topic is None or heal.partition is None:
            return None
        episode = self.episodes.get((heal.topic, heal.partition))
        if episode is None or heal.step == STEPS[-1]:
            return None
        return self._next_step(episode, now)

    def _next_step(self, episode: Episode, now: float) -> Heal:
        step = STEPS[len(episode.steps) % len(STEPS)]
        episode.steps.append(step)
        self.steps_taken[step] += 1
        stall = episode.stall
        key = (stall.topic, stall.partition)
        before = self.seen.get(key)
        if before is not None:
            self.seen[key] = (before[0], now)  # the next step only if this one does not move it
        return Heal(step, stall.topic, stall.partition, stall.committed)

    def open_stalls(self) -> list[str]:
        """What ``/ready`` says while stalls last (read only)."""
        said = []
        for _key, episode in sorted(self.episodes.items()):
            tried = ", then ".join(episode.steps) or "nothing yet"
            said.append(f"{episode.stall.reason()}; healing: {tried}")
        return said


def _view(state: Any) -> FetchView:
    return FetchView(state.position, state.fetched_unread, state.active, state.answered_ms)


def _broker_answers(states: Mapping[Key, FetchView], wall_ms: int, after_s: float) -> bool:
    answered = [s.answered_ms for s in states.values() if s.answered_ms is not None]
    return bool(answered) and wall_ms - max(answered) <= after_s * 1000

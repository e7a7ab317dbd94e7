"""A stop that ends in bounded time (:class:`StopDeadline`, :func:`with_stop_deadline`).

What mode does: on SIGTERM (or SIGINT, or a crash) ``Worker.stop`` stops every service in turn and
waits for each: faust's consumer commits and leaves its group, the worker's batches handed to the
producer are waited for, the producer flushes what it holds (each delivery retried for up to
``producer_request_timeout``, 120 s), then every task of the loop is gathered. With the broker
away each step waits on it, and a worker told to stop stayed for minutes (chaos storm seed 106: a
SIGTERM 15 s into a 70 s broker outage; the worker had written nothing 30 s later and was killed).

Why we differ: whoever sends SIGTERM gives a stop a grace period and then kills (the compose file
30 s, Kubernetes 30 s by default, the chaos run 30 s). A worker should end within it on its own and
say why, not be killed without a word. When the stop begins, a deadline is armed
(:data:`STOP_DEADLINE_S`); if the process is still there when it expires, it writes one line naming
the cause and ends at once: exit 0 for a stop that was asked for, 1 after a crash. Nothing is lost
by it: what the worker had not committed is read again by the partitions' next owner (as after a
SIGKILL), outputs carry IDs derived from their causes, and RocksDB recovers its last writes from
its log. A stop that finishes in time is untouched (with a broker, well under a second).

Upstream issue: none filed (mode has no overall stop timeout).

Proved by: ``tests/unit/test_stop_deadline.py`` (armed once by the worker's stop, in a daemon thread;
the line and the exit code when it expires); ``tests/integration/test_worker_startup.py``:
``test_a_worker_told_to_stop_while_the_broker_is_away_exits_within_the_deadline``; the chaos run's
storm shape (a SIGTERM inside the broker outage).
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from typing import Any

from config.exitcodes import Exit

#: seconds a stop may take before the worker ends at once (inside a 30 s grace period)
STOP_DEADLINE_S = 20.0


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class StopDeadline:
    """The one deadline of a worker's stop: armed once, it ends the process when it expires."""

    def __init__(
        self,
        seconds: float = STOP_DEADLINE_S,
        *,
        crashed: Callable[[], bool] = lambda: False,
        say: Callable[[str], None] = _say,
        end: Callable[[int], Any] = os._exit,
        timer: Callable[[float, Callable[[], None]], Any] = threading.Timer,
    ) -> None:
        self.seconds = seconds
        self.crashed = crashed
        self.say = say
        self.end = end
        self.timer = timer
        self.armed: Any = None

    def arm(self) -> None:
        """The stop begins (again, it changes nothing): the deadline runs from now, in a thread
        of its own (the event loop may be the thing waiting)."""
        if self.armed is not None:
            return
        self.armed = self.timer(self.seconds, self.expire)
        self.armed.daemon = True
        self.armed.start()

    def expire(self) -> None:
        """The stop took too long: say why and end the process now."""
        code = Exit.INTERNAL if self.crashed() else Exit.OK
        self.say(
            f"guardian worker: stopping took over {self.seconds:.0f} s (the Kafka broker did not "
            "answer its last requests); exiting now, what was not committed is read again by the "
            "partitions' next owner"
        )
        sys.stdout.flush()
        self.end(int(code))


def with_stop_deadline(worker: Any, deadline: StopDeadline) -> None:
    """Arm ``deadline`` whenever ``worker`` (a ``faust.Worker``) begins to stop: its ``stop`` is
    what mode calls on SIGTERM and SIGINT and after a crash."""
    stop = worker.stop

    async def stop_within_deadline() -> None:
        deadline.arm()
        await stop()

    worker.stop = stop_within_deadline

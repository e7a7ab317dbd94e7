"""Exit codes shared by every ``guardian`` command: the same cause gives the same code everywhere.

Listed in the README ("Exit codes"); scripts and process supervisors may rely on them.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum
from types import FrameType


class Exit(IntEnum):
    """What a ``guardian`` command's exit status means."""

    #: done
    OK = 0
    #: an unexpected failure inside Guardian (a bug, or an installed library it cannot work with)
    INTERNAL = 1
    #: a bad flag, setting or configuration file (e.g. a broken registry): the message names it
    USAGE = 2
    #: no Kafka broker answered at the configured address (also ``guardian kafka status``: not running)
    BROKER_UNREACHABLE = 3
    #: the input cannot be used as given (an unreadable replay file, topics that exist with another
    #: partition count)
    BAD_INPUT = 4
    #: a worker was not ready in time (topics missing, partitions not assigned, tables not recovered)
    NOT_READY = 5
    #: stopped by SIGINT (Ctrl-C) or SIGTERM, after cleaning up
    INTERRUPTED = 130


def describe() -> list[tuple[int, str]]:
    """(code, meaning) of every exit code, for help texts."""
    return [(int(code), (code.name.lower().replace("_", " "))) for code in sorted(Exit, key=lambda c: int(c))]


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises KeyboardInterrupt, as SIGINT does, so that a command's ``finally``
    blocks stop what it started (broker, workers) before it exits. Restored on exit (main thread
    only; elsewhere a no-op)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)

"""What ``guardian replay`` tells a person at a terminal while it works (all on standard error).

Progress is shown only when standard error is a terminal and the replay has run for a few
seconds, on one line rewritten in place and erased at the end: scripts and tests that read
standard error never see it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")

#: seconds a replay runs before its progress is shown
SHOW_AFTER_S = 3.0
#: seconds between two updates of the line
EVERY_S = 0.5


class Progress:
    """One progress line on ``stream``, when it is a terminal; otherwise every call does nothing."""

    def __init__(
        self,
        stream: TextIO,
        *,
        after_s: float = SHOW_AFTER_S,
        every_s: float = EVERY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.on = stream.isatty()
        self.clock = clock
        self.after_s = after_s
        self.every_s = every_s
        self.started = clock()
        self._last = -every_s
        self._shown = False

    def show(self, text: str) -> None:
        """Rewrite the line with ``text`` (not more often than every ``every_s``, not before
        ``after_s``)."""
        if not self.on:
            return
        now = self.clock() - self.started
        if now < self.after_s or now - self._last < self.every_s:
            return
        self._last = now
        self._shown = True
        self.stream.write(f"\r{text} ({now:.0f} s)\x1b[K")
        self.stream.flush()

    def reading(self, name: str, records: int) -> None:
        self.show(f"reading {name}: {records:,} records")

    def replaying(self, done: int, total: int) -> None:
        share = f" ({100 * done // total}%)" if total else ""
        self.show(f"replaying: {done:,} of {total:,} records{share}")

    def counted(self, batches: Iterable[list[T]], total: int) -> Iterator[list[T]]:
        """``batches`` unchanged, the line updated as they go by."""
        done = 0
        for batch in batches:
            done += len(batch)
            self.replaying(done, total)
            yield batch

    def close(self) -> None:
        """Erase the line, if one was shown."""
        if self._shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self._shown = False


def waiting_for_stdin(files: Iterable[str], stdin: TextIO, stderr: TextIO) -> None:
    """Say that the replay waits for input when it reads ``-`` from a terminal."""
    if "-" in files and stdin.isatty():
        stderr.write(
            "guardian replay: reading kcat -C -J lines from standard input (the terminal); end with Ctrl-D\n"
        )
        stderr.flush()

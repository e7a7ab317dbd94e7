"""The ``guardian.gc`` timer (:class:`YoungOnlyCollector`): it owns the cyclic garbage collector's
hook and decides when the long-lived state is frozen out of the collector's sight and when
everything is collected once.
"""

from __future__ import annotations

import gc
import time
from typing import Any

#: the cyclic garbage collector's view of the long-lived state (see ``YoungOnlyCollector``)
GC_FREEZE_EVERY_S = 5.0
GC_FULL_EVERY_S = 600.0


class YoungOnlyCollector:
    """The ``guardian.gc`` timer. The state cache keeps ~10^6 long-lived objects whose replacements
    keep arriving, so Python's full collections came every few seconds and each stopped the stream
    (for how long: docs/PERFORMANCE.md) while finding almost nothing (the states are freed by
    reference counting). Freezing moves what exists now out of the collector's sight: collections
    scan only what is newer. Every ``GC_FULL_EVERY_S`` everything is collected once (one such
    pause).

    What survives a collection of the two young generations is frozen at once as well
    (:meth:`after_collection`): the oldest generation, which the collector scans whole, otherwise
    filled with up to ``GC_FREEZE_EVERY_S`` of survivors between two ticks (100-260 ms pauses under
    load, and again as often as it grew by a quarter: frozen objects do not count in that ratio).
    Right after such a collection the young generations are empty, so only objects that outlived
    it are frozen.

    :meth:`start` runs when the worker starts (an app task): the timer's first tick comes
    ``GC_FREEZE_EVERY_S`` later, and without the hook the worker's first seconds (recovery, the
    state cache filling up) met full collections of 80-240 ms every half second."""

    def __init__(self) -> None:
        self.last_full = time.monotonic()
        self.installed = False

    def install(self) -> None:
        """Hook :meth:`after_collection` into the collector (once)."""
        if not self.installed:
            self.installed = True
            gc.callbacks.append(self.after_collection)

    async def start(self) -> None:
        """At the worker's start: the hook installed and what exists so far (the imported modules,
        the registry) frozen."""
        self.install()
        gc.freeze()

    async def collect(self) -> None:
        self.install()
        now = time.monotonic()
        if now - self.last_full >= GC_FULL_EVERY_S:
            self.last_full = now
            gc.unfreeze()
            gc.collect()
        gc.freeze()

    def after_collection(self, phase: str, info: dict[str, Any]) -> None:
        """A ``gc.callbacks`` hook: after a collection of generation 1 (and 0 with it), freeze its
        survivors (now all in the oldest generation)."""
        if phase == "stop" and info.get("generation") == 1:
            gc.freeze()

    def close(self) -> None:
        if self.after_collection in gc.callbacks:
            gc.callbacks.remove(self.after_collection)
        self.installed = False

"""The latency trace (``GUARDIAN_LATENCY_TRACE``): where the time of each dispatch went inside the
worker, a ``guardian bench`` diagnostic (:class:`LatencyTrace`, held by the worker's metrics)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from topics.envelope import Out

#: where a worker writes its latency trace (JSON lines; unset: no trace). ``guardian bench`` sets it
TRACE_ENV = "GUARDIAN_LATENCY_TRACE"
#: event-loop lag and GC pauses shorter than this are not written
TRACE_MIN_PAUSE_S = 0.005
TRACE_LAG_EVERY_S = 0.01
#: an event-loop stall this long is sampled: where the loop's thread is, every ``TRACE_SAMPLE_EVERY_S``
TRACE_STALL_SAMPLE_S = 0.05
TRACE_SAMPLE_EVERY_S = 0.02
#: frames kept per sample (the innermost)
TRACE_STACK_DEPTH = 40


class LatencyTrace:
    """Where the time of each dispatch went inside the worker (a bench diagnostic).

    Per dispatched trigger, wall-clock times (``time.time()``) of: the input handed over by faust's
    conductor (``recv``), pushed into the timestamp merge (``pushed``), handled by the core
    (``handled``), its batch's flush started (``flush``) and handed to the producer (``sent``), and
    Kafka acknowledging all of the batch (``acked``). Also every garbage-collector pause and every
    event-loop stall of at least ``TRACE_MIN_PAUSE_S`` (when and how long), so a slow dispatch can
    be matched with what the worker was doing; and a line per batch acked (when, how many input
    records). A stall of ``TRACE_STALL_SAMPLE_S`` or more is sampled from a thread of its own: its
    ``lag`` line carries where the event loop's thread was (``stacks``: innermost frame last, one
    per sample), so each long stall names its cause, and every ``lag`` line the loop thread's CPU
    time during it (``cpu``: a stall the loop spent working, or one it spent waiting for a core).
    Costs a dict entry per input record while on."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._file = open(path, "ab", buffering=1 << 16)  # noqa: SIM115 - closed in close()
        self._seen: dict[tuple[str, int, int], list[float]] = {}
        self._gc_start = 0.0
        self._lag_task: Any = None
        #: when the event loop last ran the watcher (monotonic), read by the sampling thread
        self._beat = time.monotonic()
        #: (monotonic time, stack) samples of the current stall, taken by the sampling thread
        self._samples: list[tuple[float, list[str]]] = []
        self._sampler: Any = None
        self._stop_sampler: Any = None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LatencyTrace | None:
        path = env.get(TRACE_ENV)
        return cls(path) if path else None

    def start(self) -> None:
        """Watch the garbage collector and the event loop (call from inside the running loop)."""
        import asyncio
        import gc

        if self._lag_task is None:
            import threading

            gc.callbacks.append(self._on_gc)
            self._beat = time.monotonic()
            self._lag_task = asyncio.ensure_future(self._watch_loop())
            self._stop_sampler = threading.Event()
            self._sampler = threading.Thread(
                target=self._sample_stalls,
                args=(threading.get_ident(), self._stop_sampler),
                name="guardian-stall-sampler",
                daemon=True,
            )
            self._sampler.start()

    def received(self, message: Any) -> None:
        self._seen[(message.topic, message.partition, message.offset)] = [time.time(), 0.0]

    def pushed(self, message: Any) -> None:
        times = self._seen.get((message.topic, message.partition, message.offset))
        if times is not None:
            times[1] = time.time()

    def handled(self, message: Any, outs: Iterable[Out]) -> dict[str, Any] | None:
        """A record is handled: its entry if it caused a dispatch (completed by the flush)."""
        times = self._seen.pop((message.topic, message.partition, message.offset), None)
        for out in outs:
            if out.kind == "dispatch" and times is not None:
                return {
                    "kind": "dispatch",
                    "trigger": out.value.get("trigger_event_id"),
                    "kafka_ts": message.timestamp,
                    "recv": times[0],
                    "pushed": times[1] or times[0],
                    "handled": time.time(),
                }
        return None

    def write(self, entry: dict[str, Any]) -> None:
        import orjson

        self._file.write(orjson.dumps(entry) + b"\n")

    def delivered(self, entries: list[dict[str, Any]], flush: float, sent: float, records: int) -> None:
        acked = time.time()
        for entry in entries:
            entry.update(flush=flush, sent=sent, acked=acked, batch=records)
            self.write(entry)
        self._file.flush()

    def acked(self, records: int) -> None:
        """A batch of ``records`` input records is delivered and acked (``guardian bench`` times the
        worker's throughput by these lines)."""
        self.write({"kind": "acked", "at": time.time(), "records": records})
        self._file.flush()

    def forget(self) -> None:
        """A rebalance: records received so far are read again."""
        self._seen.clear()

    def _on_gc(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._gc_start = time.time()
            return
        took = time.time() - self._gc_start
        if took >= TRACE_MIN_PAUSE_S:
            self.write({"kind": "gc", "at": self._gc_start, "s": took, "generation": info.get("generation")})

    async def _watch_loop(self) -> None:
        import asyncio

        while True:
            before = time.monotonic()
            cpu_before = time.thread_time()
            at = time.time()
            self._beat = before
            await asyncio.sleep(TRACE_LAG_EVERY_S)
            now = time.monotonic()
            self._beat = now
            late = now - before - TRACE_LAG_EVERY_S
            samples, self._samples = self._samples, []
            if late >= TRACE_MIN_PAUSE_S:
                # the event loop's own CPU time meanwhile: about ``s`` when the loop worked all
                # along, much less when its thread waited (not scheduled, or another thread had
                # the GIL)
                cpu = time.thread_time() - cpu_before
                entry: dict[str, Any] = {"kind": "lag", "at": at + TRACE_LAG_EVERY_S, "s": late, "cpu": cpu}
                stacks = [stack for t, stack in samples if t >= before]
                if stacks:
                    entry["stacks"] = stacks
                self.write(entry)

    def _sample_stalls(self, loop_thread: int, stop: Any) -> None:
        """The sampling thread: while the event loop has not run the watcher for
        ``TRACE_STALL_SAMPLE_S``, note where the loop's thread is (read by the next ``lag`` line)."""
        import sys

        while not stop.wait(TRACE_SAMPLE_EVERY_S):
            if time.monotonic() - self._beat < TRACE_STALL_SAMPLE_S:
                continue
            frame = sys._current_frames().get(loop_thread)
            if frame is not None:
                self._samples.append((time.monotonic(), stack_of(frame)))

    def close(self) -> None:
        import gc

        if self._stop_sampler is not None:
            self._stop_sampler.set()
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        if self._lag_task is not None:
            self._lag_task.cancel()
        self._file.close()


def stack_of(frame: Any, depth: int = TRACE_STACK_DEPTH) -> list[str]:
    """``module-relative file:line function`` of the ``depth`` innermost frames (innermost last)."""
    out: list[str] = []
    while frame is not None and len(out) < depth:
        code = frame.f_code
        path = code.co_filename
        for marker in ("site-packages/", "/lib/python"):
            if marker in path:
                path = path.split(marker, 1)[1]
                break
        else:
            path = "/".join(path.rsplit("/", 2)[-2:])
        out.append(f"{path}:{frame.f_lineno} {code.co_name}")
        frame = frame.f_back
    out.reverse()
    return out

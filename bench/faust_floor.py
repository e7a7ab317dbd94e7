"""The floors: what handing records from faust's consumer to a pipeline costs, before any work.

Over the pipeline's own input topic, on the worker's App class and transport
(``streams.app.GuardianApp``), with no tables and no outputs, in a consumer group of its own:

- ``agent``: a faust agent that only acks each event (faust's Event/channel/Stream path);
- ``inbox``: faust's conductor hands the messages to an inbox drained in batches, each batch
  acked at once (the path the worker takes, ``streams.seam.batch_conductor.BatchConductor`` and
  ``ack_all``).

Each writes when it acked how many records to a progress file (``{"kind": "acked", "at": s,
"records": n}`` lines, as the worker's latency trace does for its batches): the benchmark times
each from those lines, like the pipeline (:func:`bench.timing.acked_rate`). Its committed offsets
only tell the benchmark when it is done: offsets are committed on faust's timer (every second, as
the worker's), and a floor acks a quick run's records within one or two commits.

Run as ``python -m bench.faust_floor MODE BOOTSTRAP TOPIC GROUP PARTITIONS DATADIR PROGRESS``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any, cast

import faust
import orjson

from streams.app import COMMIT_EVERY_NEVER, GuardianApp
from streams.seam.batch_acks import ack_all
from streams.seam.batch_conductor import BatchConductor
from streams.seam.spinner import new_worker, restore_log_level

INBOX_MAX = 10_000
MODES = ("agent", "inbox")
#: how often the acks counted so far go to the progress file
PROGRESS_EVERY_S = 0.2


class Progress:
    """The acks counted in memory (a wall-clock time and a count per batch acked), written to the
    progress file every ``PROGRESS_EVERY_S`` (never on the acking path)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.marks: list[tuple[float, int]] = []

    def acked(self, records: int) -> None:
        self.marks.append((time.time(), records))

    def write(self) -> None:
        marks, self.marks = self.marks, []
        if marks:
            with self.path.open("ab") as out:
                out.writelines(
                    orjson.dumps({"kind": "acked", "at": at, "records": n}) + b"\n" for at, n in marks
                )


def floor_app(
    mode: str,
    bootstrap: str,
    topic: str,
    group: str,
    partitions: int,
    datadir: str,
    progress: Progress,
) -> faust.App:
    app = GuardianApp(
        group,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=datadir,
        topic_partitions=partitions,
        web_enabled=False,
        autodiscover=False,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=COMMIT_EVERY_NEVER,  # as the worker: commits on the timer only
        broker_commit_interval=1.0,
        stream_buffer_maxsize=8192,
        stream_wait_empty=False,
    )
    source = app.topic(topic, key_serializer="raw", value_serializer="raw", acks=True)
    if mode == "agent":

        async def only_ack(stream: Any) -> None:
            async for event in stream.noack().events():
                await stream.ack(event)
                progress.acked(1)

        app.agent(source, name="floor.only_ack")(only_ack)
    else:
        inbox: list[Any] = []
        ready, room = asyncio.Event(), asyncio.Event()

        async def receive(message: Any) -> None:
            inbox.append(message)
            ready.set()
            if len(inbox) >= INBOX_MAX:
                room.clear()
                await room.wait()

        async def drain() -> None:
            while True:
                await ready.wait()
                ready.clear()
                batch = inbox[:]
                del inbox[:]
                room.set()
                ack_all(app.consumer, batch)
                progress.acked(len(batch))

        conductor = cast(BatchConductor, app.topics)
        conductor.add(source)
        conductor.route({topic}, receive)
        app.task(drain)

    async def quiet_root_logger() -> None:
        restore_log_level(logging.getLogger())

    app.task(quiet_root_logger)

    async def write_progress() -> None:
        progress.write()

    app.timer(PROGRESS_EVERY_S, name="floor.progress")(write_progress)
    return app


def main(argv: list[str]) -> int:
    mode, bootstrap, topic, group, partitions, datadir, progress_path = argv
    if mode not in MODES:
        print(f"bench.faust_floor: mode is one of {MODES}, not {mode!r}", file=sys.stderr)
        return 2
    progress = Progress(Path(progress_path))
    app = floor_app(mode, bootstrap, topic, group, int(partitions), datadir, progress)
    worker = new_worker(app, "warn")
    try:
        worker.execute_from_commandline()
    finally:
        progress.write()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""The floors: what handing records from faust's consumer to a pipeline costs, before any work.

Over the pipeline's own input topic, on the worker's App class and transport
(``streams.app.GuardianApp``), with no tables and no outputs, in a consumer group of its own:

- ``agent``: a faust agent that only acks each event (faust's Event/channel/Stream path);
- ``inbox``: faust's conductor hands the messages to an inbox drained in batches, each message
  acked (the path the worker takes, ``streams.faust_seam.BatchConductor``).

The benchmark times each like the pipeline, by its committed offsets.

Run as ``python -m bench.faust_floor MODE BOOTSTRAP TOPIC GROUP PARTITIONS DATADIR``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from typing import Any, cast

import faust

from streams.agents import restore_log_level
from streams.app import COMMIT_EVERY_NEVER, GuardianApp
from streams.faust_seam import BatchConductor, new_worker

INBOX_MAX = 10_000
MODES = ("agent", "inbox")


def floor_app(mode: str, bootstrap: str, topic: str, group: str, partitions: int, datadir: str) -> faust.App:
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
                for message in batch:
                    message.ack(app.consumer)

        conductor = cast(BatchConductor, app.topics)
        conductor.add(source)
        conductor.route({topic}, receive)
        app.task(drain)

    async def quiet_root_logger() -> None:
        restore_log_level(logging.getLogger())

    app.task(quiet_root_logger)
    return app


def main(argv: list[str]) -> int:
    mode, bootstrap, topic, group, partitions, datadir = argv
    if mode not in MODES:
        print(f"bench.faust_floor: mode is one of {MODES}, not {mode!r}", file=sys.stderr)
        return 2
    app = floor_app(mode, bootstrap, topic, group, int(partitions), datadir)
    worker = new_worker(app, "warn")
    worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

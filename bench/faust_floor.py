"""The faust floor: a faust agent that only acks, over the pipeline's own input topic.

It runs on the same App class and transport as the worker (``streams.app.GuardianApp``), with no
tables and no outputs, in a consumer group of its own: what faust's per-message machinery (fetch,
hand-off, stream, ack, commit) allows on this machine before any work is done. The benchmark
times it like the pipeline, by its committed offsets.

Run as ``python -m bench.faust_floor BOOTSTRAP TOPIC GROUP PARTITIONS DATADIR``.
"""

from __future__ import annotations

import sys
from typing import Any

import faust

from streams.agents import restore_log_level
from streams.app import GuardianApp


def floor_app(bootstrap: str, topic: str, group: str, partitions: int, datadir: str) -> faust.App:
    app = GuardianApp(
        group,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        datadir=datadir,
        topic_partitions=partitions,
        web_enabled=False,
        autodiscover=False,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=2000,
        broker_commit_interval=1.0,
        stream_buffer_maxsize=8192,
        stream_wait_empty=False,
    )
    source = app.topic(topic, key_serializer="raw", value_serializer="raw")

    async def only_ack(stream: Any) -> None:
        async for event in stream.noack().events():
            await stream.ack(event)

    app.agent(source, name="floor.only_ack")(only_ack)

    async def quiet_root_logger() -> None:
        import logging

        restore_log_level(logging.getLogger())

    app.task(quiet_root_logger)
    return app


def main(argv: list[str]) -> int:
    bootstrap, topic, group, partitions, datadir = argv
    app = floor_app(bootstrap, topic, group, int(partitions), datadir)
    worker = faust.Worker(app, loglevel="warn", quiet=True)
    worker.execute_from_commandline()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""``guardian console``: serve the live fleet console until interrupted (the thin shell).

It reads the output topics with its own reader (:mod:`console.reader`), polls the workers' ``/ready``
and ``/metrics`` (:mod:`console.workers`), and serves the page (:mod:`console.server`) on
``GUARDIAN_CONSOLE_HOST:GUARDIAN_CONSOLE_PORT``. It starts even when no broker answers (the page
then says since when it is disconnected) and prints its URL once it listens.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time

import aiohttp
from aiohttp import web

from config.exitcodes import Exit
from config.settings import Settings, SettingsError
from console.reader import Reader, parse_from
from console.server import Hub, build_app
from console.settings import ConsoleSettings
from console.state import ConsoleState
from console.workers import WorkerRoster, poll
from topics.names import TopicNames

WORKERS_EVERY_S = 2.0


async def _poll_workers(hub: Hub, roster: WorkerRoster) -> None:
    async with aiohttp.ClientSession() as session:
        while True:
            hub.workers[:] = await roster.refresh()
            now = time.monotonic()
            await asyncio.gather(*(poll(session, track, now) for track in hub.workers))
            await asyncio.sleep(WORKERS_EVERY_S)


async def serve(bootstrap: str, topics: TopicNames, conf: ConsoleSettings, start: str | int) -> None:
    state = ConsoleState(max_lanes=conf.max_experiences, records_per_lane=conf.records_per_experience)
    roster = WorkerRoster(conf.workers)
    reader = Reader(bootstrap, topics, start, state.add)
    hub = Hub(state, topics, reader.link, [])
    runner = web.AppRunner(build_app(hub), shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, conf.host, conf.port)
    await site.start()
    host = f"[{conf.host}]" if ":" in conf.host else conf.host
    print(f"guardian console: http://{host}:{conf.port}/ (reading {bootstrap})", flush=True)
    tasks = [asyncio.create_task(c) for c in (reader.run(), hub.pump(), _poll_workers(hub, roster))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await runner.cleanup()


def cmd_console(args: argparse.Namespace, settings: Settings) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # the reader says itself when the broker is away
    try:
        conf = ConsoleSettings.from_env_and_args(args)
        start = parse_from(args.start_from)
        bootstrap = settings.resolve_bootstrap()
    except (SettingsError, ValueError) as exc:
        print(f"guardian console: {exc}", file=sys.stderr)
        return Exit.USAGE
    try:
        asyncio.run(serve(bootstrap, TopicNames(settings.topic_prefix), conf, start))
    except OSError as exc:  # the port is taken, or the host cannot be bound
        print(f"guardian console: cannot listen on {conf.host}:{conf.port}: {exc.strerror}", file=sys.stderr)
        return Exit.USAGE
    return Exit.OK

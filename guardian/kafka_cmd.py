"""The ``guardian kafka`` commands: ``up``, ``down``, ``status`` and ``fetch`` of the local broker
(``guardian.kafka_local.LocalBroker``)."""

from __future__ import annotations

import argparse
import time

from config.exitcodes import Exit
from config.settings import Settings
from guardian.kafka_error import BrokerError, say
from guardian.kafka_jars import KAFKA_VERSION
from guardian.kafka_local import LocalBroker


def _broker(settings: Settings) -> LocalBroker:
    from streams.admin import quiet_client_logs

    quiet_client_logs()
    return LocalBroker.from_settings(settings)


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian kafka up``: start (or find) the local broker; its address is the last stdout line."""
    try:
        broker = _broker(settings)
    except BrokerError as exc:
        say(str(exc))
        return 1
    started = time.monotonic()
    try:
        address = broker.up()
    except BrokerError as exc:
        say(str(exc))
        return 1
    finally:
        broker.release()
    if not broker.started:
        say(f"the local Kafka broker is already running (pid {broker.pid()}, data in {broker.kafka_dir})")
    else:
        say(f"the local Kafka broker started in {time.monotonic() - started:.1f} s (log {broker.log_file})")
    if settings.bootstrap and settings.bootstrap != address:
        say(f"note: GUARDIAN_KAFKA_BOOTSTRAP={settings.bootstrap} is set and wins over this local broker")
    print(address, flush=True)
    return 0


def cmd_down(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian kafka down``: stop the broker this data dir started; nothing is left running."""
    try:
        broker = _broker(settings)
        note = broker.clean_stale()
        if note:
            say(note)
        stopped = broker.down()
    except BrokerError as exc:
        say(str(exc))
        return 1
    print("stopped the local Kafka broker" if stopped else "the local Kafka broker was not running")
    return 0


def cmd_status(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian kafka status``: exit 0 when running (and where), 3 when not."""
    try:
        broker = _broker(settings)
        note = broker.clean_stale()
    except BrokerError as exc:
        say(str(exc))
        return 1
    if note:
        say(note)
    print(broker.describe())
    return Exit.OK if broker.is_running() else Exit.BROKER_UNREACHABLE


def cmd_fetch(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian kafka fetch``: only download the jars (once); prints their folder."""
    try:
        broker = _broker(settings)
        had = broker.jars_complete()
        started = time.monotonic()
        libs = broker.fetch()
    except BrokerError as exc:
        say(str(exc))
        return 1
    if not had:
        say(f"fetched the Kafka {KAFKA_VERSION} jars in {time.monotonic() - started:.1f} s")
    print(libs)
    return 0

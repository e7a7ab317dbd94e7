"""``guardian start``: publish the Adaptive Home Guardian plan (CONTRACTS.md §3) for one device."""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from guardian.admin import admin_client, partition_counts
from guardian.exitcodes import Exit
from guardian.settings import Settings
from topics.names import TopicNames
from topics.plans import guardian_plan
from topics.records import ID_PATTERN

REQUEST_TIMEOUT_MS = 15_000
SEND_TIMEOUT_S = 30.0

_ID = re.compile(ID_PATTERN)


def build_plan(args: argparse.Namespace, now_ms: int) -> dict[str, Any]:
    """The plan the flags describe; ValueError names the flag that is wrong."""
    device = str(args.device)
    if not _ID.fullmatch(device):
        raise ValueError(f"--device {device!r} is not an ID (1-128 characters of A-Z a-z 0-9 _ . : -)")
    areas = [a.strip() for a in str(args.areas).split(",") if a.strip()]
    if not areas:
        raise ValueError("--areas needs at least one area ID")
    bad = [a for a in areas if not _ID.fullmatch(a)]
    if bad:
        raise ValueError(f"--areas: {', '.join(repr(a) for a in bad)} are not area IDs")
    if len(set(areas)) != len(areas):
        raise ValueError("--areas names an area twice")
    if args.experience_id is not None and not _ID.fullmatch(args.experience_id):
        raise ValueError(f"--experience-id {args.experience_id!r} is not an ID")
    if args.max_decisions < 0:
        raise ValueError("--max-decisions must be 0 or more")
    return guardian_plan(
        device,
        experience_id=args.experience_id,
        areas=areas,
        created_at_ms=now_ms,
        max_decisions=args.max_decisions,
    )


class MissingTopic(RuntimeError):
    """The plans topic does not exist (an auto-created one would get a wrong partition count)."""


async def publish_plan(bootstrap: str, names: TopicNames, plan: dict[str, Any]) -> None:
    """Send ``plan`` to the plans topic, keyed by its device, and wait for the broker's ack."""
    async with asyncio.timeout(SEND_TIMEOUT_S), admin_client(bootstrap, REQUEST_TIMEOUT_MS) as admin:
        if names.plans not in await partition_counts(admin, [names.plans]):
            raise MissingTopic(f"topic {names.plans} does not exist: run 'guardian topics create' first")
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        client_id="guardian-start",
    )
    try:
        async with asyncio.timeout(SEND_TIMEOUT_S):
            await producer.start()
            await producer.send_and_wait(
                names.plans,
                value=orjson.dumps(plan),
                key=str(plan["device_id"]).encode(),
                timestamp_ms=int(plan["created_at_ms"]),
            )
    finally:
        async with asyncio.timeout(SEND_TIMEOUT_S):
            await producer.stop()


def cmd_start(args: argparse.Namespace, settings: Settings) -> int:
    """Publish the plan; print its experience ID."""
    try:
        plan = build_plan(args, int(time.time() * 1000))
    except ValueError as exc:
        print(f"guardian start: {exc}", file=sys.stderr)
        return Exit.USAGE
    bootstrap = settings.resolve_bootstrap()
    names = TopicNames(settings.topic_prefix)
    try:
        asyncio.run(publish_plan(bootstrap, names, plan))
    except MissingTopic as exc:
        print(f"guardian start: {exc} (prefix {names.prefix!r} on {bootstrap})", file=sys.stderr)
        return Exit.NOT_READY
    except (KafkaError, OSError, TimeoutError) as exc:
        print(
            f"guardian start: could not publish to {names.plans} on {bootstrap} "
            f"({type(exc).__name__}: {exc}); "
            "is the broker up ('guardian kafka up') and are the topics created ('guardian topics create')?",
            file=sys.stderr,
        )
        return Exit.BROKER_UNREACHABLE
    print(plan["experience_id"])
    return 0

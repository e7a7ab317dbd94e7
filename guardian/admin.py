"""Topic administration: ``guardian topics create`` and helpers the tests and the broker reuse.

Every topic of ``TopicNames.all()`` (docs/CONTRACTS.md §1 plus Guardian's internal ones) gets the
configured partition count and replication factor 1. Creating is idempotent; a topic that exists with
another partition count is an error (records of one device must stay on one partition, so the count
of a live topic is never changed behind the user's back).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError

from guardian.settings import Settings
from topics.names import TopicNames

#: Kafka error codes (the protocol's numbers)
TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3

REQUEST_TIMEOUT_MS = 15_000
ADMIN_TIMEOUT_S = 60.0


class TopicError(RuntimeError):
    """A topic cannot be created as asked; the message names the topic and the fix."""


class PartitionMismatch(TopicError):
    """A topic exists with another partition count than wanted."""

    def __init__(self, topic: str, found: int, wanted: int) -> None:
        super().__init__(
            f"topic {topic} exists with {found} partitions, but {wanted} are wanted: set "
            f"GUARDIAN_PARTITIONS={found} (or --partitions {found}), or use another GUARDIAN_TOPIC_PREFIX, "
            "or delete the topic first"
        )
        self.topic = topic
        self.found = found
        self.wanted = wanted


@asynccontextmanager
async def admin_client(bootstrap: str, request_timeout_ms: int = REQUEST_TIMEOUT_MS) -> AsyncIterator[Any]:
    """A started ``AIOKafkaAdminClient`` (closed on exit); its start is bounded by the request timeout."""
    client = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=request_timeout_ms,
        client_id="guardian-admin",
    )
    try:
        async with asyncio.timeout(request_timeout_ms / 1000):
            await client.start()
        yield client
    finally:
        await client.close()


async def probe_broker(bootstrap: str, timeout_s: float = 5.0) -> bool:
    """Whether a metadata request to ``bootstrap`` succeeds (and names at least one broker) in time."""
    timeout_ms = max(500, int(timeout_s * 1000))
    try:
        async with asyncio.timeout(timeout_s):
            async with admin_client(bootstrap, timeout_ms) as client:
                cluster = await client.describe_cluster()
    except (KafkaError, OSError, TimeoutError):
        return False
    return bool(cluster.get("brokers"))


async def wait_for_broker(bootstrap: str, timeout_s: float = 60.0) -> None:
    """Return once a metadata request to ``bootstrap`` succeeds; TimeoutError after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"no Kafka broker answered at {bootstrap} within {timeout_s:.0f} s")
        if await probe_broker(bootstrap, min(5.0, remaining)):
            return
        await asyncio.sleep(min(0.25, max(0.0, deadline - time.monotonic())))


async def partition_counts(client: Any, topics: Sequence[str]) -> dict[str, int]:
    """Partition count of each of ``topics`` that exists (missing ones are left out).

    Asks for the metadata of *every* topic: a metadata request naming topics is sent by aiokafka with
    ``allow_auto_topic_creation=True``, which on a cluster with ``auto.create.topics.enable`` would
    create the missing ones with the broker's default partition count.
    """
    wanted = set(topics)
    found: dict[str, int] = {}
    for entry in await client.describe_topics():
        name = str(entry["topic"])
        if name in wanted and entry.get("error_code", 0) == 0 and entry.get("partitions"):
            found[name] = len(entry["partitions"])
    return found


async def create_topics(
    bootstrap: str,
    names: TopicNames,
    partitions: int,
    *,
    timeout_s: float = ADMIN_TIMEOUT_S,
) -> list[str]:
    """Create every topic of ``names.all()`` (replication 1); the names created now (existing ones are fine).

    Raises :class:`PartitionMismatch` when a topic exists with another partition count.
    """
    wanted = names.all()
    async with asyncio.timeout(timeout_s), admin_client(bootstrap) as client:
        existing = await partition_counts(client, wanted)
        _check_counts(existing, partitions)
        missing = [t for t in wanted if t not in existing]
        created: list[str] = []
        if missing:
            response = await client.create_topics(
                [NewTopic(name=t, num_partitions=partitions, replication_factor=1) for t in missing],
                timeout_ms=REQUEST_TIMEOUT_MS,
            )
            for err in response.to_object()["topic_errors"]:
                code = int(err["error_code"])
                if code == 0:
                    created.append(str(err["topic"]))
                elif code != TOPIC_ALREADY_EXISTS:  # another creator won the race: checked below
                    message = err.get("error_message") or f"Kafka error code {code}"
                    raise TopicError(f"creating topic {err['topic']} failed: {message}")
        # the metadata of new topics reaches the broker shortly after the controller created them
        while True:
            now = await partition_counts(client, wanted)
            _check_counts(now, partitions)
            if len(now) == len(wanted):
                break
            await asyncio.sleep(0.1)
        return created


def _check_counts(found: dict[str, int], wanted: int) -> None:
    for topic, count in found.items():
        if count != wanted:
            raise PartitionMismatch(topic, count, wanted)


async def delete_topics(bootstrap: str, topics: Sequence[str], *, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    """Delete ``topics`` (missing ones are fine)."""
    if not topics:
        return
    async with asyncio.timeout(timeout_s), admin_client(bootstrap) as client:
        response = await client.delete_topics(list(topics), timeout_ms=REQUEST_TIMEOUT_MS)
        for name, code, *_ in response.topic_error_codes:
            if code not in (0, UNKNOWN_TOPIC_OR_PARTITION):
                raise TopicError(f"deleting topic {name} failed: Kafka error code {code}")


def quiet_client_logs() -> None:
    """For command-line entry points: a failure is told in one line, not with aiokafka's own log lines.

    Without a handler, Python's last-resort handler prints aiokafka's warnings and errors to stderr.
    """
    logger = logging.getLogger("aiokafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


def cmd_topics_create(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian topics create``: every topic of ``TopicNames.all()`` with the configured partition count."""
    quiet_client_logs()
    bootstrap = settings.resolve_bootstrap()
    names = TopicNames(settings.topic_prefix)
    try:
        created = asyncio.run(create_topics(bootstrap, names, settings.partitions))
    except TopicError as exc:
        print(f"guardian: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, OSError, TimeoutError) as exc:
        print(
            f"guardian: the Kafka broker at {bootstrap} did not answer ({_describe(exc)}): "
            "start it with 'guardian kafka up', or check GUARDIAN_KAFKA_BOOTSTRAP",
            file=sys.stderr,
        )
        return 1
    kept = len(names.all()) - len(created)
    print(
        f"{len(created)} topic(s) created, {kept} already there, {settings.partitions} partitions each, "
        f"prefix {settings.topic_prefix!r} on {bootstrap}"
    )
    return 0


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"


__all__ = [
    "PartitionMismatch",
    "TopicError",
    "cmd_topics_create",
    "create_topics",
    "delete_topics",
    "partition_counts",
    "probe_broker",
    "quiet_client_logs",
    "wait_for_broker",
]

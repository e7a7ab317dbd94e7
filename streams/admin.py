"""Topic administration: ``guardian topics create`` and helpers the tests and the broker reuse.

Every topic a worker uses gets the configured partition count and replication factor 1: the topics
of ``TopicNames.all()`` (docs/CONTRACTS.md §1 plus Guardian's internal ``control``) and the changelog
topics of the worker's tables (``cleanup.policy=compact``, as faust declares them). They are all
created before a worker starts: faust's partition assignor skips a topic that is not in the
cluster metadata yet, and a table whose changelog missed the first assignment never recovers.
Creating is idempotent and returns once every partition of every topic has a leader; a topic that
exists with another partition count is an error (records of one device must stay on one partition,
so the count of a live topic is never changed behind the user's back). Reaching the broker (the
admin client, probing and waiting for it, a command's one line when it does not answer) is
:mod:`streams.kafka_reach`, re-exported here.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import NewTopic
from aiokafka.errors import KafkaError

from config.exitcodes import Exit
from config.settings import Settings
from streams.kafka_reach import (
    REQUEST_TIMEOUT_MS,
    admin_client,
    probe_broker,
    quiet_client_logs,
    unreachable,
    wait_for_broker,
)
from topics.names import CLAIMS_SUFFIX, INPUT_SUFFIXES, TopicNames

#: the tables of a worker (``tables.store.faust_tables.define_tables``); faust names each one's changelog
#: topic ``<app id>-<table>-changelog``, the app id being ``<prefix>worker`` (``streams.app.app_id``)
TABLE_NAMES = ("devices", "seen", "owners")
#: the topic configuration of a table changelog (faust's own, for a non-windowed table)
CHANGELOG_CONFIG = {"cleanup.policy": "compact"}
#: the topic configuration of an input topic: no deletion by age. An input record's Kafka timestamp
#: is its receive time, which may be long past when it is written (a bridge uploading what it kept
#: while offline, a replayed export, a test script); the broker's time-based retention (7 days by
#: default) judges a segment by those timestamps and deletes such records at its next retention
#: check, possibly before a worker has read them: the worker then starts past them, ready and idle.
INPUT_CONFIG = {"retention.ms": "-1"}
#: the experience claims topic (``tables.claims``): ONE partition (one order for every worker), and
#: no compaction, no time or size retention (the first claim stays first): only the workers delete
#: its records, those before a snapshot of them (``streams.claims_snapshot``)
CLAIMS_PARTITIONS = 1
CLAIMS_CONFIG = {"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1"}

#: Kafka error codes (the protocol's numbers)
TOPIC_ALREADY_EXISTS = 36
UNKNOWN_TOPIC_OR_PARTITION = 3

ADMIN_TIMEOUT_S = 60.0


class TopicError(RuntimeError):
    """A topic cannot be created as asked; the message names the topic and the fix."""


class TopicsNotReady(TimeoutError):
    """Topics a worker needs did not exist with leaders in time; the message names them."""


class PartitionMismatch(TopicError):
    """A topic exists with another partition count than wanted."""

    def __init__(self, topic: str, found: int, wanted: int, message: str | None = None) -> None:
        super().__init__(
            message
            or f"topic {topic} exists with {found} partitions, but {wanted} are wanted: set "
            f"GUARDIAN_PARTITIONS={found} (or --partitions {found}), or use another GUARDIAN_TOPIC_PREFIX, "
            "or delete the topic first"
        )
        self.topic = topic
        self.found = found
        self.wanted = wanted


async def served(bootstrap: str, topics: Sequence[str], partitions: int | Mapping[str, int]) -> None:
    """Return once the broker answers an offsets request for every partition of ``topics``.

    A partition's leader shows in the metadata a moment before that broker serves it (it answers
    NotLeaderForPartition meanwhile): clients that start then retry, logging errors, and a consumer
    group's first fetches stall. The offsets request is retried by the client until it succeeds."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        client_id="guardian-admin",
        # the partitions' metadata is fetched on demand: retried every 20 ms, not 100 (-1 s per start)
        retry_backoff_ms=20,
    )
    await consumer.start()
    try:
        counts = _counts(topics, partitions)
        await consumer.end_offsets([TopicPartition(t, p) for t in topics for p in range(counts[t])])
    finally:
        await consumer.stop()


def changelog_topics(names: TopicNames) -> list[str]:
    """The changelog topics of the worker's tables under ``names``' prefix."""
    return [f"{names.prefix}worker-{table}-changelog" for table in TABLE_NAMES]


def worker_topics(names: TopicNames) -> list[str]:
    """Every topic a worker reads or writes: §1, ``control``, the claims and the tables' changelogs."""
    return [*names.all(), names.claims, *changelog_topics(names)]


def topic_partitions(names: TopicNames, partitions: int) -> dict[str, int]:
    """The partition count of each of :func:`worker_topics`: ``partitions``, the claims topic one."""
    counts = dict.fromkeys(worker_topics(names), partitions)
    counts[names.claims] = CLAIMS_PARTITIONS
    return counts


def _counts(topics: Sequence[str], partitions: int | Mapping[str, int]) -> Mapping[str, int]:
    return dict.fromkeys(topics, partitions) if isinstance(partitions, int) else partitions


async def leaderless(client: Any, topics: Sequence[str]) -> dict[str, str]:
    """Of ``topics``, those not ready for a consumer group, with why: missing from the cluster
    metadata, or with partitions that have no leader yet."""
    wanted = set(topics)
    state: dict[str, str] = dict.fromkeys(wanted, "missing")
    for entry in await client.describe_topics():
        name = str(entry["topic"])
        if name not in wanted or entry.get("error_code", 0) != 0 or not entry.get("partitions"):
            continue
        without = sorted(int(p["partition"]) for p in entry["partitions"] if int(p.get("leader", -1)) < 0)
        if without:
            state[name] = f"no leader for partition(s) {', '.join(map(str, without))}"
        else:
            del state[name]
    return state


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
    """Create every topic of :func:`worker_topics` (replication 1; changelogs compacted); the names
    created now (existing ones are fine). Returns once every partition of every one has a leader.

    Raises :class:`PartitionMismatch` when a topic exists with another partition count, and
    TimeoutError (naming the topics still waited for) after ``timeout_s``.
    """
    wanted = worker_topics(names)
    counts = topic_partitions(names, partitions)
    changelogs = set(changelog_topics(names))
    waiting: dict[str, str] = dict.fromkeys(wanted, "not created yet")
    try:
        async with asyncio.timeout(timeout_s):
            async with admin_client(bootstrap) as client:
                inputs = frozenset(names.prefix + s for s in INPUT_SUFFIXES)
                created = await _create(client, wanted, changelogs, counts, waiting, inputs, names.claims)
            waiting.update(dict.fromkeys(wanted, "its leaders do not serve it yet"))
            await served(bootstrap, wanted, counts)
            waiting.clear()
            return created
    except TimeoutError as exc:
        pending = _list(waiting) or "the broker's answer"
        raise TimeoutError(f"topics not ready on {bootstrap} within {timeout_s:.0f} s: {pending}") from exc


def topic_config(
    topic: str, changelogs: set[str], inputs: frozenset[str], claims: str | None = None
) -> dict[str, str]:
    """The configuration ``topic`` is created with."""
    if topic in changelogs:
        return dict(CHANGELOG_CONFIG)
    if topic in inputs:
        return dict(INPUT_CONFIG)
    if topic == claims:
        return dict(CLAIMS_CONFIG)
    return {}


async def _create(
    client: Any,
    wanted: list[str],
    changelogs: set[str],
    partitions: int | Mapping[str, int],
    waiting: dict[str, str],
    inputs: frozenset[str] = frozenset(),
    claims: str | None = None,
) -> list[str]:
    counts = _counts(wanted, partitions)
    existing = await partition_counts(client, wanted)
    _check_counts(existing, counts)
    missing = [t for t in wanted if t not in existing]
    created: list[str] = []
    if missing:
        response = await client.create_topics(
            [
                NewTopic(
                    name=t,
                    num_partitions=counts[t],
                    replication_factor=1,
                    topic_configs=topic_config(t, changelogs, inputs, claims),
                )
                for t in missing
            ],
            timeout_ms=REQUEST_TIMEOUT_MS,
        )
        for err in response.to_object()["topic_errors"]:
            code = int(err["error_code"])
            if code == 0:
                created.append(str(err["topic"]))
            elif code != TOPIC_ALREADY_EXISTS:  # another creator won the race: checked below
                message = err.get("error_message") or f"Kafka error code {code}"
                raise TopicError(f"creating topic {err['topic']} failed: {message}")
    # the metadata of new topics reaches the broker shortly after the controller created them,
    # and their partitions' leaders a moment later
    while True:
        _check_counts(await partition_counts(client, wanted), counts)
        waiting.clear()
        waiting.update(await leaderless(client, wanted))
        if not waiting:
            return created
        await asyncio.sleep(0.1)


async def ensure_worker_topics(
    bootstrap: str,
    names: TopicNames,
    partitions: int,
    *,
    timeout_s: float,
    say: Callable[[str], None],
) -> None:
    """Before a worker joins its group: every topic it uses exists with a leader for every partition.

    The tables' changelogs are created when missing (as faust would, but before the group is
    joined); the other topics are ``guardian topics create``'s to make, so the worker waits for
    them, saying once what it waits for. Raises :class:`PartitionMismatch`, or TimeoutError naming
    the topics still missing after ``timeout_s``."""
    wanted = worker_topics(names)
    counts = topic_partitions(names, partitions)
    changelogs = changelog_topics(names)
    waiting: dict[str, str] = {}
    told = False
    try:
        async with asyncio.timeout(timeout_s), admin_client(bootstrap) as client:
            while True:
                existing = await partition_counts(client, wanted)
                _check_counts(existing, counts)
                missing_logs = [t for t in changelogs if t not in existing]
                if missing_logs:
                    await _create(client, missing_logs, set(missing_logs), partitions, {})
                waiting = await leaderless(client, wanted)
                if not waiting:
                    break
                if not told:
                    told = True
                    say(
                        f"waiting for topic(s) {_list(waiting)} on {bootstrap} "
                        f"(create them with 'guardian topics create'; giving up after {timeout_s:g} s)"
                    )
                await asyncio.sleep(0.5)
            waiting = dict.fromkeys(wanted, "its leaders do not serve it yet")
            await served(bootstrap, wanted, counts)
            waiting = {}
    except TimeoutError as exc:
        if not waiting:
            raise
        hint = (
            f"create them with 'guardian topics create' (prefix {names.prefix!r}, {partitions} partitions)"
            if any(why == "missing" for why in waiting.values())
            else "the broker may be overloaded or still starting"
        )
        raise TopicsNotReady(
            f"topic(s) not ready on {bootstrap} after {timeout_s:g} s: {_list(waiting)}; {hint}"
        ) from exc


def _list(waiting: dict[str, str]) -> str:
    return ", ".join(f"{t} ({why})" for t, why in sorted(waiting.items()))


def _check_counts(found: dict[str, int], wanted: Mapping[str, int]) -> None:
    for topic, count in found.items():
        if count != wanted[topic]:
            if topic.endswith(CLAIMS_SUFFIX):  # no other topic's name ends so
                raise PartitionMismatch(
                    topic,
                    count,
                    CLAIMS_PARTITIONS,
                    f"topic {topic} (the experience claims) exists with {count} partitions, but it must "
                    f"have {CLAIMS_PARTITIONS}: delete it and run 'guardian topics create' again",
                )
            raise PartitionMismatch(topic, count, wanted[topic])


async def delete_topics(bootstrap: str, topics: Sequence[str], *, timeout_s: float = ADMIN_TIMEOUT_S) -> None:
    """Delete ``topics`` (missing ones are fine)."""
    if not topics:
        return
    async with asyncio.timeout(timeout_s), admin_client(bootstrap) as client:
        response = await client.delete_topics(list(topics), timeout_ms=REQUEST_TIMEOUT_MS)
        for name, code, *_ in response.topic_error_codes:
            if code not in (0, UNKNOWN_TOPIC_OR_PARTITION):
                raise TopicError(f"deleting topic {name} failed: Kafka error code {code}")


def cmd_topics_create(args: argparse.Namespace, settings: Settings) -> int:
    """``guardian topics create``: every topic of ``TopicNames.all()`` with the configured partition count."""
    quiet_client_logs()
    bootstrap = settings.resolve_bootstrap()
    names = TopicNames(settings.topic_prefix)
    try:
        created = asyncio.run(create_topics(bootstrap, names, settings.partitions))
    except PartitionMismatch as exc:
        print(f"guardian: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    except TopicError as exc:
        print(f"guardian: {exc}", file=sys.stderr)
        return Exit.INTERNAL
    except (KafkaError, OSError, TimeoutError) as exc:
        print(f"guardian: {unreachable(bootstrap, exc)}", file=sys.stderr)
        return Exit.BROKER_UNREACHABLE
    kept = len(worker_topics(names)) - len(created)
    print(
        f"{len(created)} topic(s) created, {kept} already there, {settings.partitions} partitions each, "
        f"prefix {settings.topic_prefix!r} on {bootstrap}"
    )
    return 0


__all__ = [
    "PartitionMismatch",
    "TopicError",
    "TopicsNotReady",
    "admin_client",
    "changelog_topics",
    "cmd_topics_create",
    "create_topics",
    "delete_topics",
    "ensure_worker_topics",
    "partition_counts",
    "probe_broker",
    "quiet_client_logs",
    "unreachable",
    "wait_for_broker",
    "worker_topics",
]

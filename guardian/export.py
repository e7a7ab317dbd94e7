"""``guardian export``: topic contents for a time range in the ``kcat -C -J`` format (CONTRACTS.md §12).

Reads every partition of the chosen topics from the first offset at or after ``--since-ms`` up to
the end offsets taken when the export starts (so it ends even while producers go on), keeps the
records up to ``--until-ms`` and, with ``--device``, those keyed by that device.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import IO, Any

import orjson
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from guardian.settings import Settings
from topics.names import CONTRACT_SUFFIXES, TopicNames

REQUEST_TIMEOUT_MS = 30_000
POLL_TIMEOUT_MS = 1_000
#: give up when a partition yields nothing for this long before its end offset (a broker problem)
STALL_TIMEOUT_S = 60.0


def kcat_line(msg: Any) -> bytes:
    """One record as ``kcat -C -J`` prints it."""
    return orjson.dumps(
        {
            "topic": msg.topic,
            "partition": msg.partition,
            "offset": msg.offset,
            "tstype": "create" if msg.timestamp_type == 0 else "logappend",
            "ts": msg.timestamp,
            "broker": -1,
            "key": None if msg.key is None else msg.key.decode("utf-8", "replace"),
            "payload": None if msg.value is None else msg.value.decode("utf-8", "replace"),
        }
    )


async def topic_partitions(bootstrap: str, topics: list[str]) -> list[TopicPartition]:
    """The partitions of the topics that exist (a missing topic has none)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    await admin.start()
    try:
        existing = set(await asyncio.wait_for(admin.list_topics(), REQUEST_TIMEOUT_MS / 1000))
        wanted = [t for t in topics if t in existing]
        if not wanted:
            return []
        described = await asyncio.wait_for(admin.describe_topics(wanted), REQUEST_TIMEOUT_MS / 1000)
    finally:
        await admin.close()
    tps: list[TopicPartition] = []
    for topic in described:
        for part in topic.get("partitions", []):
            tps.append(TopicPartition(topic["topic"], int(part["partition"])))
    return sorted(tps)


async def export_topics(
    bootstrap: str,
    topics: Iterable[str],
    out: IO[bytes],
    *,
    since_ms: int | None = None,
    until_ms: int | None = None,
    device: str | None = None,
) -> int:
    """Write the records of ``topics`` to ``out``; returns how many were written."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        group_id=None,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    written = 0
    try:
        tps = await topic_partitions(bootstrap, list(topics))
        if not tps:
            return 0
        consumer.assign(tps)
        end = await asyncio.wait_for(consumer.end_offsets(tps), REQUEST_TIMEOUT_MS / 1000)
        start = await asyncio.wait_for(consumer.beginning_offsets(tps), REQUEST_TIMEOUT_MS / 1000)
        if since_ms is not None:
            found = await asyncio.wait_for(
                consumer.offsets_for_times({tp: since_ms for tp in tps}), REQUEST_TIMEOUT_MS / 1000
            )
            for tp in tps:
                hit = found.get(tp)
                start[tp] = hit.offset if hit is not None else end[tp]
        remaining = {tp for tp in tps if start[tp] < end[tp]}
        for tp in tps:
            consumer.seek(tp, start[tp])
        loop = asyncio.get_running_loop()
        last_progress = loop.time()
        device_key = device.encode() if device is not None else None
        while remaining:
            batch = await consumer.getmany(*remaining, timeout_ms=POLL_TIMEOUT_MS)
            if not batch:
                if loop.time() - last_progress > STALL_TIMEOUT_S:
                    raise TimeoutError(f"no progress reading {sorted(str(t) for t in remaining)}")
                continue
            last_progress = loop.time()
            for tp, msgs in batch.items():
                for msg in msgs:
                    if msg.offset >= end[tp]:
                        break
                    if until_ms is not None and msg.timestamp > until_ms:
                        continue
                    if device_key is not None and msg.key != device_key:
                        continue
                    out.write(kcat_line(msg) + b"\n")
                    written += 1
                if await consumer.position(tp) >= end[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    return written


def cmd_export(args: argparse.Namespace, settings: Settings) -> int:
    names = TopicNames(settings.topic_prefix)
    suffixes = [s.strip() for s in args.topics.split(",")] if args.topics else list(CONTRACT_SUFFIXES)
    unknown = [s for s in suffixes if s not in CONTRACT_SUFFIXES]
    if unknown:
        print(
            f"guardian export: unknown topic(s) {', '.join(unknown)}; "
            f"choose from {', '.join(CONTRACT_SUFFIXES)}",
            file=sys.stderr,
        )
        return 2
    bootstrap = settings.resolve_bootstrap()
    topics = [names.prefix + s for s in suffixes]

    async def run(out: IO[bytes]) -> int:
        return await export_topics(
            bootstrap, topics, out, since_ms=args.since_ms, until_ms=args.until_ms, device=args.device
        )

    if args.out == "-":
        count = asyncio.run(run(sys.stdout.buffer))
    else:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as fh:
            count = asyncio.run(run(fh))
    print(f"exported {count} records from {len(topics)} topics", file=sys.stderr)
    return 0

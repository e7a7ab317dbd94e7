"""``guardian export``: topic contents for a time range in the ``kcat -C -J`` format (docs/CONTRACTS.md §12).

Reads every partition of the chosen topics from the first offset at or after ``--since-ms`` up to
the end offsets taken when the export starts (so it ends even while producers go on), keeps the
records up to ``--until-ms`` and, with ``--device``, those keyed by that device.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from config.exitcodes import Exit
from config.settings import Settings
from guardian.kcat_json import kcat_line as kcat_line
from streams.admin import admin_client, partition_counts, quiet_client_logs, unreachable, wait_for_broker
from topics.names import CONTRACT_SUFFIXES, TopicNames

REQUEST_TIMEOUT_MS = 30_000
EXPORT_TIMEOUT_S = 300.0
METADATA_ATTEMPTS = 10
#: how long ``guardian export`` waits for a broker to answer before saying so
BROKER_WAIT_S = 20.0


async def export_topics(
    bootstrap: str,
    names: Sequence[str],
    out_path: Path,
    since_ms: int | None = None,
    until_ms: int | None = None,
    device: str | None = None,
    *,
    timeout_s: float = EXPORT_TIMEOUT_S,
) -> int:
    """Write every record of ``names`` (up to their end offsets now) to ``out_path``; how many.

    ``since_ms``/``until_ms`` bound the Kafka timestamps, ``device`` the record key."""
    counts: dict[str, int] = {}
    async with asyncio.timeout(timeout_s), admin_client(bootstrap) as admin:
        for _ in range(METADATA_ATTEMPTS):  # a busy cluster's metadata can lag behind
            counts = await partition_counts(admin, list(names))
            if len(counts) == len(set(names)):
                break
            await asyncio.sleep(0.5)
    parts = [TopicPartition(t, p) for t in names if t in counts for p in range(counts[t])]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        client_id="guardian-export",
        # the reset that assign() starts must agree with the seek below (else it may win the race)
        auto_offset_reset="earliest",
    )
    written = 0
    fh = _open_for_writing(out_path)
    try:
        async with asyncio.timeout(timeout_s):
            await consumer.start()
            if not parts:
                return 0
            consumer.assign(parts)
            ends: dict[TopicPartition, int] = await consumer.end_offsets(parts)
            if since_ms is not None:
                found = await consumer.offsets_for_times({tp: since_ms for tp in parts})
                for tp in parts:
                    hit = found.get(tp)
                    consumer.seek(tp, hit.offset if hit is not None else ends[tp])
            else:
                starts = await consumer.beginning_offsets(parts)
                for tp in parts:
                    consumer.seek(tp, starts[tp])
            remaining = {tp for tp in parts if await consumer.position(tp) < ends[tp]}
            key_filter = device.encode() if device is not None else None
            while remaining:
                batches = await consumer.getmany(*remaining, timeout_ms=500, max_records=10_000)
                for tp, records in batches.items():
                    for r in records:
                        if r.offset >= ends[tp]:
                            continue
                        if until_ms is not None and r.timestamp > until_ms:
                            continue
                        if key_filter is not None and r.key != key_filter:
                            continue
                        fh.write(
                            kcat_line(tp.topic, tp.partition, r.offset, r.timestamp, r.key, r.value) + b"\n"
                        )
                        written += 1
                for tp in list(remaining):
                    if await consumer.position(tp) >= ends[tp]:
                        remaining.discard(tp)
    finally:
        fh.close()
        with contextlib.suppress(KafkaError, TimeoutError):
            async with asyncio.timeout(30):
                await consumer.stop()
    return written


def _open_for_writing(path: Path) -> IO[bytes]:
    if str(path) == "-":
        return os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path.open("wb")


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
        return Exit.USAGE
    bootstrap = settings.resolve_bootstrap()
    topics = [names.prefix + s for s in suffixes]
    quiet_client_logs()
    try:
        # a broker that does not answer is told in one line well within 30 s, not after a timeout
        asyncio.run(wait_for_broker(bootstrap, BROKER_WAIT_S))
        count = asyncio.run(
            export_topics(bootstrap, topics, Path(args.out), args.since_ms, args.until_ms, args.device)
        )
    except (KafkaError, OSError, TimeoutError) as exc:
        print(f"guardian export: {unreachable(bootstrap, exc)}", file=sys.stderr)
        return Exit.BROKER_UNREACHABLE
    print(f"exported {count} records from {len(topics)} topics", file=sys.stderr)
    return Exit.OK

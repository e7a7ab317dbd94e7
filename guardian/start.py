"""``guardian start``: publish the Adaptive Home Guardian plan (docs/CONTRACTS.md §3) for one device."""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
import unicodedata
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError

from config.exitcodes import Exit
from config.settings import Settings
from streams.admin import admin_client, partition_counts
from topics.gate import Gate, Rejected
from topics.names import TopicNames
from topics.plans import DEFAULT_AREA_NAMES, guardian_plan
from topics.records import ID_PATTERN
from topics.registry import load_registry

REQUEST_TIMEOUT_MS = 15_000
SEND_TIMEOUT_S = 30.0

_ID = re.compile(ID_PATTERN)

#: The room names a plan carries when ``--area-names`` does not name an area, per GUARDIAN_LANGUAGE.
AREA_NAMES_BY_LANGUAGE: dict[str, dict[str, str]] = {
    "ko": DEFAULT_AREA_NAMES,
    "en": {
        "2": "the living room",
        "3": "the bedroom",
        "4": "the small room",
        "5": "the study",
        "6": "the kitchen",
        "7": "the entrance",
    },
}
#: Longest room name a plan may carry.
MAX_AREA_NAME = 64


def parse_area_names(text: str) -> dict[str, str]:
    """``--area-names``: ``ID=NAME`` pairs separated by commas (``2=Living room,3=Bedroom``), or a
    JSON object (``{"2": "Living room, east"}``) when a name holds a comma; ValueError says why not."""
    pairs: list[tuple[str, object]]
    if text.lstrip().startswith("{"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"--area-names is not a JSON object ({exc.msg})") from exc
        if not isinstance(obj, dict):
            raise ValueError("--area-names is not a JSON object")
        pairs = list(obj.items())
    else:
        pairs = []
        for item in text.split(","):
            if not item.strip():
                continue
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--area-names: {item.strip()!r} is not ID=NAME")
            pairs.append((key.strip(), value.strip()))
    names: dict[str, str] = {}
    for area, name in pairs:
        if not isinstance(area, str) or not _ID.fullmatch(area):
            raise ValueError(f"--area-names: {area!r} is not an area ID")
        if area in names:
            raise ValueError(f"--area-names names area {area} twice")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"--area-names: area {area} needs a name")
        if len(name) > MAX_AREA_NAME:
            raise ValueError(f"--area-names: the name of area {area} is over {MAX_AREA_NAME} characters")
        if any(unicodedata.category(ch) in ("Cc", "Cf") for ch in name):
            raise ValueError(f"--area-names: the name of area {area} holds a control or formatting character")
        names[area] = name.strip()
    if not names:
        raise ValueError("--area-names names no area")
    return names


def build_plan(args: argparse.Namespace, now_ms: int, language: str = "ko") -> dict[str, Any]:
    """The plan the flags describe; ValueError names the flag that is wrong.

    Room names: ``--area-names``, else the defaults of ``language`` for the areas it knows."""
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
    defaults = AREA_NAMES_BY_LANGUAGE.get(language, DEFAULT_AREA_NAMES)
    names = {a: defaults[a] for a in areas if a in defaults}
    given = getattr(args, "area_names", None)
    if given is not None:
        chosen = parse_area_names(str(given))
        stray = [a for a in chosen if a not in areas]
        if stray:
            raise ValueError(f"--area-names: {', '.join(stray)} not in --areas ({','.join(areas)})")
        names.update(chosen)
    return guardian_plan(
        device,
        experience_id=args.experience_id,
        areas=areas,
        area_names=names,
        created_at_ms=now_ms,
        max_decisions=args.max_decisions,
    )


def refusal(plan: dict[str, Any], settings: Settings, names: TopicNames) -> str | None:
    """Why the pipeline's gate would dead-letter ``plan`` (None: it would admit it)."""
    registry = load_registry(settings.contracts_file, settings.capabilities_file)
    verdict = Gate(registry).admit(
        "plans",
        str(plan["device_id"]),
        json.dumps(plan, ensure_ascii=False).encode("utf-8"),
        source_topic=names.plans,
        partition=0,
        offset=0,
        received_at_ms=int(plan["created_at_ms"]),
    )
    if isinstance(verdict, Rejected):
        return f"{verdict.dead_letter.reason_code}: {verdict.dead_letter.detail}"
    return None


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
        plan = build_plan(args, int(time.time() * 1000), settings.language)
    except ValueError as exc:
        print(f"guardian start: {exc}", file=sys.stderr)
        return Exit.USAGE
    names = TopicNames(settings.topic_prefix)
    refused = refusal(plan, settings, names)
    if refused is not None:
        print(f"guardian start: the pipeline would refuse this plan ({refused})", file=sys.stderr)
        return Exit.USAGE
    bootstrap = settings.resolve_bootstrap()
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

"""Reaching the Kafka broker, for the commands and the worker: a started admin client
(:func:`admin_client`), whether the broker answers (:func:`probe_broker`, :func:`wait_for_broker`),
and how a command tells that it did not (:func:`unreachable`, :func:`quiet_client_logs`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError

REQUEST_TIMEOUT_MS = 15_000


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


def quiet_client_logs() -> None:
    """For command-line entry points: a failure is told in one line, not with aiokafka's own log lines.

    Without a handler, Python's last-resort handler prints aiokafka's warnings and errors to stderr.
    """
    logger = logging.getLogger("aiokafka")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


def unreachable(bootstrap: str, exc: BaseException) -> str:
    """One line for a broker that did not answer: the address, what happened, and the hint."""
    return (
        f"the Kafka broker at {bootstrap} did not answer ({_describe(exc)}): "
        "start it with 'guardian kafka up', or check GUARDIAN_KAFKA_BOOTSTRAP"
    )


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    name = type(exc).__name__
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"

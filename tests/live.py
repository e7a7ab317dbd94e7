"""Helpers of the live tier: a ``guardian worker`` subprocess and whether it is ready, producing
scripted records (plans first), collecting the pipeline's outputs from the real broker, comparing
them with replay's, and exporting the topics with Debian's kcat."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import GroupCoordinatorNotAvailableError

from guardian.kafka_local import free_port
from guardian.replay import InputRecord, ReplayResult
from topics.names import OUTPUT_SUFFIXES, TopicNames


@dataclass
class WorkerProcess:
    """One ``guardian worker`` in its own process group, logging to a file, its web server on a
    free port of its own (``metrics_url``)."""

    env: dict[str, str]
    log_path: Path
    worker_id: str = "w0"
    proc: subprocess.Popen[bytes] | None = None
    web_port: int = field(default_factory=free_port)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.web_port}"

    def start(self) -> WorkerProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        env = {**self.env, "GUARDIAN_WEB_PORT": str(self.web_port), "GUARDIAN_WEB_HOST": "127.0.0.1"}
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "guardian",
                    "worker",
                    "--worker-id",
                    self.worker_id,
                    "--loglevel",
                    "warn",
                ],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        return self

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no flush, no commit, no goodbye."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def log_tail(self, lines: int = 40) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def ready(worker: WorkerProcess) -> bool:
    """The worker answers ``/ready`` with 200 (False while it does not, or does not answer)."""
    try:
        with urllib.request.urlopen(worker.base_url + "/ready", timeout=5) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


async def produce(bootstrap: str, records: Iterable[InputRecord], *, in_order: bool = False) -> int:
    """Produce records with their scripted Kafka timestamps, keyed by device.

    ``in_order``: each record is on the broker before the next is sent, so records of different
    topics arrive in the order given (batches of different topic-partitions otherwise land in any
    order, and a worker orders only what is on the broker: a test comparing live to replay needs
    the arrival order to be the timestamp order, as it is for a device sending as events happen)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=30_000, linger_ms=0 if in_order else 5
    )
    await producer.start()
    count = 0
    try:
        futures = []
        for r in records:
            fut = await producer.send(r.topic, r.value, key=r.key, timestamp_ms=r.ts)
            if in_order:
                await asyncio.wait_for(fut, 60)
            futures.append(fut)
            count += 1
        await asyncio.wait_for(asyncio.gather(*futures), 60)
    finally:
        await producer.stop()
    return count


@dataclass
class Outputs:
    """Every output record seen so far, per topic suffix (values decoded)."""

    values: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in OUTPUT_SUFFIXES})

    def statuses(self) -> dict[str, str]:
        found: dict[str, str] = {}
        for e in self.values["timeline"]:
            if e.get("stage") == "end":
                found[e["experience_id"]] = e["status"]
            elif e.get("experience_id"):  # a goal, or a plan waiting for its preconditions
                found.setdefault(e["experience_id"], "active")
        return found


async def collect(
    bootstrap: str,
    names: TopicNames,
    until: Callable[[Outputs], bool],
    *,
    timeout_s: float = 90.0,
    settle_s: float = 2.0,
) -> Outputs:
    """Read the output topics from the beginning until ``until`` holds (then ``settle_s`` more)."""
    consumer = AIOKafkaConsumer(
        *(names.prefix + s for s in OUTPUT_SUFFIXES),
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=30_000,
        metadata_max_age_ms=1000,
    )
    await consumer.start()
    out = Outputs()
    deadline = time.monotonic() + timeout_s
    settle_until: float | None = None
    try:
        while True:
            now = time.monotonic()
            if settle_until is not None and now >= settle_until:
                return out
            if now >= deadline:
                raise TimeoutError(f"outputs did not reach the expected state: {out.statuses()}")
            batch = await consumer.getmany(timeout_ms=300)
            for tp, msgs in batch.items():
                suffix = names.suffix_of(tp.topic)
                assert suffix is not None
                out.values[suffix].extend(orjson.loads(m.value) for m in msgs)
            if settle_until is None and until(out):
                settle_until = time.monotonic() + settle_s
    finally:
        await consumer.stop()


def by_id(values: list[dict[str, Any]], key: str) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for v in values:
        grouped.setdefault(v[key], []).append(v)
    return grouped


def assert_single_content(values: list[dict[str, Any]], key: str) -> dict[str, dict[str, Any]]:
    """No ID published with two different contents; returns one value per ID."""
    unique: dict[str, dict[str, Any]] = {}
    for ident, copies in by_id(values, key).items():
        first = copies[0]
        for other in copies[1:]:
            assert other == first, f"{key} {ident} published with two contents:\n{first}\n{other}"
        unique[ident] = first
    return unique


def produce_plans_first(bootstrap: str, names: TopicNames, records: list[InputRecord]) -> None:
    """Experiences start before anything refers to them (as in life): plans first, until every
    goal is in the timeline, then the devices' records. A plan with preconditions goes with its
    device's records, in time order: the device context it is judged on comes before it."""
    gated = {r.key for r in records if r.suffix == "plans" and b'"preconditions"' in (r.value or b"")}
    plans = [r for r in records if r.suffix == "plans" and r.key not in gated]
    started = {orjson.loads(r.value or b"{}").get("experience_id") for r in plans}
    asyncio.run(produce(bootstrap, plans, in_order=True))
    asyncio.run(collect(bootstrap, names, lambda o: started <= set(o.statuses()), timeout_s=90, settle_s=0))
    rest = [r for r in records if r.suffix != "plans" or r.key in gated]
    asyncio.run(produce(bootstrap, rest, in_order=True))


def all_ended(expected: dict[str, str]) -> Any:
    def check(out: Outputs) -> bool:
        statuses = out.statuses()
        return all(statuses.get(exp) == status for exp, status in expected.items())

    return check


def compare(live: Outputs, replayed: ReplayResult) -> None:
    live_decisions = assert_single_content(live.values["decisions"], "decision_id")
    live_dispatch = assert_single_content(live.values["dispatch"], "dispatch_id")
    want_decisions = {d["decision_id"]: d for d in replayed.outs["decisions"]}
    want_dispatch = {d["dispatch_id"]: d for d in replayed.outs["dispatch"]}
    for ident in sorted(set(live_decisions) | set(want_decisions)):
        assert live_decisions.get(ident) == want_decisions.get(ident), ident
    for ident in sorted(set(live_dispatch) | set(want_dispatch)):
        assert live_dispatch.get(ident) == want_dispatch.get(ident), ident
    assert live.statuses() == replayed.summary["experiences"]
    # a dead letter's identity is the record it is about: re-read after a crash, a record is
    # dead-lettered again, identically (at-least-once), never differently
    unique_letters = assert_single_content(
        [
            {**d, "source": f"{d['source_topic']}:{d['partition']}:{d['offset']}"}
            for d in live.values["deadletter"]
        ],
        "source",
    )
    live_letters = sorted((d["reason_code"], d["key"], d["payload_sha256"]) for d in unique_letters.values())
    want_letters = sorted(
        (d["reason_code"], d["key"], d["payload_sha256"]) for d in replayed.outs["deadletter"]
    )
    assert live_letters == want_letters, (len(live_letters), len(want_letters))


def run_guardian(env: dict[str, str], *args: str, timeout_s: float) -> subprocess.CompletedProcess[str]:
    """``guardian ARGS`` in a subprocess with ``env``; output captured as text, never raises on
    a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "guardian", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )


def kcat_export(bootstrap: str, names: TopicNames) -> bytes:
    """Every contract topic as Debian's ``kcat -C -J`` prints it."""
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.fail("kcat is not installed: run scripts/ensure-debian-tools kcat:kcat", pytrace=False)
    out = b""
    for topic in names.contract_topics():
        done = subprocess.run(
            [kcat, "-C", "-J", "-b", bootstrap, "-t", topic, "-o", "beginning", "-e", "-q"],
            capture_output=True,
            check=True,
            timeout=120,
        )
        out += done.stdout
    return out


async def group_members(bootstrap: str, group: str) -> list[Any]:
    """The group's members as its coordinator describes them (none while the broker has no
    coordinator for the group yet: a group nobody has joined, on a broker that has just started,
    has none for a moment)."""
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10_000)
    async with asyncio.timeout(30):
        await client.start()
        try:
            described = await client.describe_consumer_groups([group])
        except GroupCoordinatorNotAvailableError:
            return []
        finally:
            await client.close()
    groups = described[0].to_object()["groups"]
    return list(groups[0]["members"]) if groups else []

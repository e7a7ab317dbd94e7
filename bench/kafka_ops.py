"""Kafka plumbing of the benchmark (and the reliability suite): fast producing, group offsets, end
offsets, a ``guardian worker`` subprocess, a raw aiokafka passthrough, and Kafka's own perf tools.

Every network call is bounded by a timeout; every subprocess has one too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import GroupCoordinatorNotAvailableError
from aiokafka.structs import TopicPartition

from bench.workload import Rec

REQUEST_TIMEOUT_MS = 30_000
PRODUCE_TIMEOUT_S = 300.0
JAVA_TOOL_TIMEOUT_S = 300.0


async def produce(bootstrap: str, records: Iterable[Rec], *, linger_ms: int = 20) -> int:
    """Produce ``records`` (acks=all) as fast as aiokafka goes; how many were produced."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        linger_ms=linger_ms,
        max_batch_size=512 * 1024,
        acks="all",
    )
    await producer.start()
    count = 0
    try:
        async with asyncio.timeout(PRODUCE_TIMEOUT_S):
            pending: list[asyncio.Future[object]] = []
            for r in records:
                pending.append(await producer.send(r.topic, r.value, key=r.key, timestamp_ms=r.ts))
                count += 1
                if len(pending) >= 20_000:
                    await asyncio.gather(*pending)
                    pending.clear()
            await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return count


async def end_offsets(bootstrap: str, topics: Sequence[str], partitions: int) -> dict[tuple[str, int], int]:
    """The end offset of every partition of ``topics``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    async with asyncio.timeout(60):
        await consumer.start()
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
        async with asyncio.timeout(60):
            ends = await consumer.end_offsets(tps)
        return {(tp.topic, tp.partition): int(off) for tp, off in ends.items()}
    finally:
        await consumer.stop()


@dataclass
class GroupWatch:
    """Polls a consumer group's committed offsets (one admin client for the whole watch)."""

    bootstrap: str
    group: str
    client: AIOKafkaAdminClient | None = None

    async def __aenter__(self) -> GroupWatch:
        self.client = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap, request_timeout_ms=10_000)
        async with asyncio.timeout(30):
            await self.client.start()
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.client is not None:
            await self.client.close()

    async def committed(self, topics: Sequence[str]) -> dict[tuple[str, int], int]:
        assert self.client is not None
        wanted = set(topics)
        try:
            async with asyncio.timeout(15):
                offsets = await self.client.list_consumer_group_offsets(self.group)
        except GroupCoordinatorNotAvailableError:
            return {}  # a fresh broker is still making its offsets topic: nothing committed yet
        return {
            (tp.topic, tp.partition): int(om.offset)
            for tp, om in offsets.items()
            if tp.topic in wanted and om.offset >= 0
        }


def lag(ends: dict[tuple[str, int], int], committed: dict[tuple[str, int], int]) -> int:
    """Records not yet committed (partitions with records only)."""
    return sum(max(0, end - committed.get(tp, 0)) for tp, end in ends.items() if end > 0)


@contextlib.asynccontextmanager
async def deadline(what: str, timeout_s: float) -> AsyncIterator[None]:
    """``asyncio.timeout`` whose TimeoutError says what was waited for."""
    try:
        async with asyncio.timeout(timeout_s):
            yield
    except TimeoutError as exc:
        raise TimeoutError(f"waited {timeout_s:.0f} s for {what}") from exc


async def wait_caught_up(
    bootstrap: str,
    group: str,
    topics: Sequence[str],
    partitions: int,
    timeout_s: float,
    worker: Worker | None = None,
) -> float:
    """Wait until ``group`` has committed up to the current end of ``topics``; seconds waited.

    TimeoutError after ``timeout_s``, RuntimeError as soon as ``worker`` exits; both say what was
    waited for and how far it got."""
    ends = await end_offsets(bootstrap, topics, partitions)
    start = time.monotonic()
    async with GroupWatch(bootstrap, group) as watch:
        while True:
            left = lag(ends, await watch.committed(topics))
            if left == 0:
                return time.monotonic() - start
            what = f"group {group} to commit the {sum(ends.values())} records of {list(topics)} ({left} left)"
            if worker is not None and not worker.alive():
                raise RuntimeError(f"the worker exited while waiting for {what}:\n{worker.log_tail()}")
            if time.monotonic() - start > timeout_s:
                raise TimeoutError(f"waited {timeout_s:.0f} s for {what}")
            await asyncio.sleep(0.2)


async def create_extra_topics(bootstrap: str, topics: Sequence[str], partitions: int) -> None:
    """Create ``topics`` (replication 1) unless they exist."""
    client = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS)
    async with deadline(f"topics {list(topics)} to be created", 60):
        await client.start()
        try:
            existing = {str(t["topic"]) for t in await client.describe_topics()}
            missing = [t for t in topics if t not in existing]
            if missing:
                await client.create_topics(
                    [NewTopic(name=t, num_partitions=partitions, replication_factor=1) for t in missing]
                )
            while True:
                now = {str(t["topic"]) for t in await client.describe_topics() if t.get("partitions")}
                if all(t in now for t in topics):
                    return
                await asyncio.sleep(0.1)
        finally:
            await client.close()


def proc_status(pid: int, field_name: str) -> int | None:
    """A ``/proc/<pid>/status`` memory field (``VmHWM``, ``VmRSS``) in bytes, or None."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    m = re.search(rf"^{field_name}:\s+(\d+)\s+kB", text, re.MULTILINE)
    return int(m.group(1)) * 1024 if m else None


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` (``/proc/<pid>/stat``), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


@dataclass
class Worker:
    """One ``guardian worker`` subprocess in its own process group, logging to a file."""

    env: dict[str, str]
    log_path: Path
    worker_id: str = "w0"
    proc: subprocess.Popen[bytes] | None = None
    #: what to run instead of ``guardian worker`` (arguments after ``python -m``)
    module_argv: list[str] | None = None
    #: the cores it runs on (``bench.layout``; None: those of the process starting it)
    cores: frozenset[int] | None = None

    def start(self) -> Worker:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = self.module_argv or ["guardian", "worker", "--worker-id", self.worker_id]
        env = dict(self.env)
        if not env.get("GUARDIAN_WEB_PORT"):
            from guardian.kafka_local import free_port

            env["GUARDIAN_WEB_PORT"] = str(free_port())
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", *argv],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        if self.cores is not None:
            from bench.layout import pin

            pin(self.proc.pid, self.cores)  # before its imports are done: no thread of its own yet
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL the worker's process group: no flush, no commit."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM (a clean leave: flush, commit), SIGKILL after ``timeout_s``; the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.proc.returncode

    def log_tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


async def passthrough(
    bootstrap: str, source: str, sink: str, group: str, expected: int, timeout_s: float
) -> dict[str, float]:
    """The raw ceiling: consume ``source``, JSON-decode each value, produce it to ``sink``; commit
    after the producer is flushed (at-least-once, like the worker). Timed from the first record
    received to the last commit, and so is the CPU time it took (``cpu_s``: the bench process's,
    which does nothing else meanwhile)."""
    consumer = AIOKafkaConsumer(
        source,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        linger_ms=2,
        max_batch_size=256 * 1024,
        acks="all",
    )
    async with asyncio.timeout(60):
        await consumer.start()
        await producer.start()
    seen = 0
    first: float | None = None
    cpu_first = 0.0
    try:
        async with deadline(f"the passthrough to copy {expected} records from {source}", timeout_s):
            last_commit = time.monotonic()
            while seen < expected:
                batch = await consumer.getmany(timeout_ms=500, max_records=4000)
                if not batch:
                    continue
                if first is None:
                    first, cpu_first = time.monotonic(), time.process_time()
                for tp, msgs in batch.items():
                    for m in msgs:
                        value = orjson.loads(m.value)
                        await producer.send(sink, orjson.dumps(value), key=m.key, partition=tp.partition)
                    seen += len(msgs)
                if time.monotonic() - last_commit >= 1.0 or seen >= expected:
                    await producer.flush()
                    await consumer.commit()
                    last_commit = time.monotonic()
            done, cpu = time.monotonic(), time.process_time() - cpu_first
    finally:
        await producer.stop()
        await consumer.stop()
    assert first is not None
    elapsed = done - first
    return {"records": float(seen), "seconds": elapsed, "cpu_s": cpu}


def _java(classpath: str, main: str, args: Sequence[str], timeout_s: float) -> str:
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java") if os.environ.get("JAVA_HOME") else "java"
    cmd = [java, "-Xmx512m", "-cp", classpath, main, *args]
    result = subprocess.run(
        cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise RuntimeError(f"{main} failed (exit {result.returncode}): {' | '.join(tail)}")
    return result.stdout


def producer_perf(classpath: str, bootstrap: str, topic: str, records: int, size: int) -> dict[str, float]:
    """``org.apache.kafka.tools.ProducerPerformance`` (acks=all, linger 5 ms, batches of 256 KiB)."""
    out = _java(
        classpath,
        "org.apache.kafka.tools.ProducerPerformance",
        [
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(size),
            "--throughput",
            "-1",
            "--producer-props",
            f"bootstrap.servers={bootstrap}",
            "acks=all",
            "linger.ms=5",
            "batch.size=262144",
        ],
        JAVA_TOOL_TIMEOUT_S,
    )
    final = [ln for ln in out.splitlines() if "records sent" in ln][-1]
    m = re.search(r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\)", final)
    if m is None:
        raise RuntimeError(f"cannot read ProducerPerformance's summary: {final!r}")
    return {"records": float(m.group(1)), "records_per_s": float(m.group(2)), "mb_per_s": float(m.group(3))}


def consumer_perf(classpath: str, bootstrap: str, topic: str, records: int, group: str) -> dict[str, float]:
    """``org.apache.kafka.tools.ConsumerPerformance`` over ``records`` records of ``topic``."""
    out = _java(
        classpath,
        "org.apache.kafka.tools.ConsumerPerformance",
        [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--messages",
            str(records),
            "--timeout",
            "60000",
            "--group",
            group,
        ],
        JAVA_TOOL_TIMEOUT_S,
    )
    lines = [ln for ln in out.splitlines() if ln.strip()]
    header = next(i for i, ln in enumerate(lines) if ln.startswith("start.time"))
    names = [h.strip() for h in lines[header].split(",")]
    values = [v.strip() for v in lines[header + 1].split(",")]
    row = dict(zip(names, values, strict=False))
    return {
        "records": float(row["data.consumed.in.nMsg"]),
        "records_per_s": float(row["fetch.nMsg.sec"]),
        "mb_per_s": float(row["fetch.MB.sec"]),
    }

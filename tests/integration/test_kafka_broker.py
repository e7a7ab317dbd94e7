"""The real local broker and topic administration, end to end (needs Java 17+ and the jars or Maven).

The CLI tests run ``guardian kafka ...`` with their own temp GUARDIAN_DATA_DIR, so their broker is
not the session broker of ``kafka_bootstrap``.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from config.exitcodes import Exit
from config.settings import Settings
from guardian.kafka_host import read_cmdline
from guardian.kafka_local import LocalBroker
from streams.admin import admin_client, create_topics, partition_counts, worker_topics
from tests.live import run_guardian
from topics.names import TopicNames

pytestmark = [pytest.mark.kafka, pytest.mark.timeout(300)]

CLI_TIMEOUT_S = 180
ADDRESS_RE = re.compile(r"^127\.0\.0\.1:\d{2,5}$")


def _needs_java() -> None:
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.skip("the local broker needs Java 17+ (apt-get install openjdk-17-jre-headless maven)")


def _local_env(data_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "GUARDIAN_KAFKA_BOOTSTRAP",
            "GUARDIAN_KAFKA_PORT",
            "GUARDIAN_TOPIC_PREFIX",
            "GUARDIAN_PARTITIONS",
        )
    }
    env["GUARDIAN_DATA_DIR"] = str(data_dir)
    env.update(extra)
    return env


def _guardian(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_guardian(env, *args, timeout_s=CLI_TIMEOUT_S)


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


async def _round_trip(bootstrap: str, topic: str, key: bytes, value: bytes) -> tuple[int, bytes, bytes]:
    """Produce one record and read it back from its partition; (partition, key, value)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", request_timeout_ms=15_000)
    await asyncio.wait_for(producer.start(), 30)
    try:
        meta = await asyncio.wait_for(producer.send_and_wait(topic, value, key=key), 30)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, request_timeout_ms=15_000, enable_auto_commit=False
    )
    await consumer.start()
    try:
        tp = TopicPartition(topic, meta.partition)
        consumer.assign([tp])
        consumer.seek(tp, meta.offset)
        record = await asyncio.wait_for(consumer.getone(tp), 30)
    finally:
        await consumer.stop()
    assert record.key is not None
    assert record.value is not None
    return meta.partition, record.key, record.value


@pytest.fixture
def cli_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Env of a CLI broker in its own data dir; whatever happens, ``kafka down`` runs at the end."""
    _needs_java()
    env = _local_env(tmp_path / "data", GUARDIAN_TOPIC_PREFIX=f"cli{os.getpid()}.", GUARDIAN_PARTITIONS="3")
    try:
        yield env
    finally:
        _guardian(env, "kafka", "down")


@pytest.mark.own_broker  # `guardian kafka up` itself: a broker of its own
def test_cli_up_status_topics_down(cli_env: dict[str, str], tmp_path: Path) -> None:
    kafka_dir = tmp_path / "data" / "kafka"

    first = _guardian(cli_env, "kafka", "up")
    assert first.returncode == 0, first.stderr
    address = _last_line(first.stdout)
    assert ADDRESS_RE.match(address), first.stdout
    assert (kafka_dir / "bootstrap").read_text(encoding="utf-8").strip() == address
    pid = int((kafka_dir / "kafka.pid").read_text(encoding="utf-8"))

    again = _guardian(cli_env, "kafka", "up")
    assert again.returncode == 0, again.stderr
    assert _last_line(again.stdout) == address
    assert "already running" in again.stderr
    assert int((kafka_dir / "kafka.pid").read_text(encoding="utf-8")) == pid

    status = _guardian(cli_env, "kafka", "status")
    assert status.returncode == 0, status.stderr
    assert f"running at {address} (pid {pid}" in status.stdout

    # topics: created, then idempotent, then a partition count that does not match is refused
    names = TopicNames(cli_env["GUARDIAN_TOPIC_PREFIX"])
    count = len(worker_topics(names))
    created = _guardian(cli_env, "topics", "create")
    assert created.returncode == 0, created.stderr
    assert f"{count} topic(s) created, 0 already there, 3 partitions each" in created.stdout
    twice = _guardian(cli_env, "topics", "create")
    assert twice.returncode == 0, twice.stderr
    assert f"0 topic(s) created, {count} already there" in twice.stdout
    wrong = _guardian(cli_env, "topics", "create", "--partitions", "5")
    assert wrong.returncode == Exit.BAD_INPUT
    assert "Traceback" not in wrong.stderr
    assert re.search(
        rf"^guardian: topic {re.escape(cli_env['GUARDIAN_TOPIC_PREFIX'])}[a-z-]+ exists with 3 partitions, "
        r"but 5 are wanted",
        wrong.stderr,
        re.MULTILINE,
    ), wrong.stderr

    partition, key, value = asyncio.run(_round_trip(address, names.observations, b"dev-cli", b'{"x":1}'))
    assert (key, value) == (b"dev-cli", b'{"x":1}')
    assert 0 <= partition < 3

    down = _guardian(cli_env, "kafka", "down")
    assert down.returncode == 0, down.stderr
    assert "stopped" in down.stdout
    assert read_cmdline(pid) is None
    assert not (kafka_dir / "kafka.pid").exists()
    assert not (kafka_dir / "bootstrap").exists()
    stopped = _guardian(cli_env, "kafka", "status")
    assert stopped.returncode == 3
    assert "not running" in stopped.stdout
    topics_without_broker = _guardian(cli_env, "topics", "create")
    assert topics_without_broker.returncode == 2
    assert "guardian kafka up" in topics_without_broker.stderr


async def test_round_trip_on_the_session_broker(kafka_bootstrap: str, topic_names: TopicNames) -> None:
    partition, key, value = await _round_trip(kafka_bootstrap, topic_names.plans, b"dev-1", b'{"plan":1}')
    assert (key, value) == (b"dev-1", b'{"plan":1}')
    async with admin_client(kafka_bootstrap) as client:
        counts = await partition_counts(client, topic_names.all())
    assert counts == dict.fromkeys(topic_names.all(), 4)
    assert 0 <= partition < 4


@pytest.mark.parametrize("kafka_partitions", [2])
async def test_topic_prefix_honours_kafka_partitions(
    kafka_bootstrap: str, topic_names: TopicNames, kafka_partitions: int
) -> None:
    async with admin_client(kafka_bootstrap) as client:
        counts = await partition_counts(client, topic_names.all())
    assert set(counts.values()) == {2}
    # idempotent through the API as well
    assert await create_topics(kafka_bootstrap, topic_names, kafka_partitions) == []


def test_guardian_env(guardian_env: dict[str, str], kafka_bootstrap: str, topic_prefix: str) -> None:
    assert guardian_env["GUARDIAN_KAFKA_BOOTSTRAP"] == kafka_bootstrap
    assert guardian_env["GUARDIAN_TOPIC_PREFIX"] == topic_prefix
    assert guardian_env["GUARDIAN_PARTITIONS"] == "4"
    settings = Settings.from_env(guardian_env)
    assert settings.resolve_bootstrap() == kafka_bootstrap


@pytest.mark.own_broker
def test_restart_keeps_ports_and_data(tmp_path: Path) -> None:
    """The API a broker-restart reliability test uses: same address after restart, records kept."""
    _needs_java()
    env = _local_env(tmp_path / "data")
    broker = LocalBroker.from_settings(Settings.from_env(env), env=env)
    try:
        address = broker.up()
        assert broker.is_running()
        assert broker.bootstrap() == address
        assert broker.classpath().endswith("*")
        names = TopicNames("restart.")
        asyncio.run(create_topics(address, names, 1))
        _, _, value = asyncio.run(_round_trip(address, names.timeline, b"dev-r", b"before"))
        old_pid = broker.pid()

        assert broker.restart() == address
        assert broker.pid() != old_pid
        assert old_pid is not None and read_cmdline(old_pid) is None

        async def read_back() -> bytes:
            consumer = AIOKafkaConsumer(
                names.timeline,
                bootstrap_servers=address,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
                request_timeout_ms=15_000,
            )
            await asyncio.wait_for(consumer.start(), 30)
            try:
                record = await asyncio.wait_for(consumer.getone(), 30)
            finally:
                await consumer.stop()
            assert record.value is not None
            return bytes(record.value)

        assert asyncio.run(asyncio.wait_for(read_back(), 30)) == value
    finally:
        broker.down()
    assert not broker.is_running()
    assert broker.bootstrap() is None

"""Fixtures for the whole suite.

The Kafka broker of the integration tier (``kafka_bootstrap``, session-scoped; see tests/brokers.py):

1. the cluster named by ``GUARDIAN_KAFKA_BOOTSTRAP``, when set;
2. else ``GUARDIAN_TEST_BROKER=testcontainers``: a Kafka container started by testcontainers (no
   Docker engine is a failure, not a fall back);
3. else (``GUARDIAN_TEST_BROKER=local``, the default, whether or not a Docker engine answers) the
   real local broker of ``guardian kafka up`` (:class:`guardian.kafka_local.LocalBroker`) with its
   data in a session temp dir and its jars from the shared cache; stopped at session end.

Per test: ``topic_prefix`` (a unique prefix with every topic of ``TopicNames.all()`` created,
``kafka_partitions`` partitions each, default 4; override with
``@pytest.mark.parametrize("kafka_partitions", [8])``), ``topic_names``, ``guardian_env``
(an env dict for ``guardian`` subprocesses), and ``own_broker`` (a local broker of the test only,
which it may stop and start again).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import FrameType

import pytest
from aiokafka.errors import KafkaError

from config.settings import Settings
from guardian.kafka_local import BrokerError, LocalBroker, free_port, run_sync
from streams.admin import create_topics, delete_topics, wait_for_broker, worker_topics
from tests.brokers import TESTCONTAINERS, container_broker, which_broker
from topics.names import TopicNames


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM ends the run as Ctrl-C does: pytest then tears the fixtures down, so the session's
    broker and every test's workers (stopped in ``finally`` blocks) do not outlive it."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An integration test either uses the tier's broker (``kafka_bootstrap``) or is marked
    ``own_broker`` (it starts its own or needs none), never both and never neither: the
    testcontainers tier leaves out ``own_broker`` tests (they would only run again as they did in
    ``make test``), so a test that used the tier's broker unmarked could not be left out by mistake,
    and one marked that uses it would be left out of the testcontainers tier."""
    wrong = [
        item.nodeid
        for item in items
        if "integration" in item.path.parts
        and ("kafka_bootstrap" in getattr(item, "fixturenames", ()))
        == (item.get_closest_marker("own_broker") is not None)
    ]
    if wrong:
        raise pytest.UsageError(
            "an integration test must use kafka_bootstrap or be marked own_broker (one of the two): "
            + ", ".join(wrong)
        )


BROKER_START_TIMEOUT_S = 120.0


def make_guardian_env(
    bootstrap: str,
    prefix: str,
    partitions: int,
    data_dir: Path,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment of a ``guardian`` subprocess that talks to this broker and these topics (a
    worker's web server on a free port: the default one may be taken by another run)."""
    env = dict(os.environ if base is None else base)
    env.update(
        GUARDIAN_WEB_PORT=str(free_port()),
        GUARDIAN_KAFKA_BOOTSTRAP=bootstrap,
        GUARDIAN_TOPIC_PREFIX=prefix,
        GUARDIAN_PARTITIONS=str(partitions),
        GUARDIAN_DATA_DIR=str(data_dir),
    )
    return env


def _local_broker(data_dir: Path) -> LocalBroker:
    """A local broker with its data in ``data_dir`` and its jars from the shared cache (not started)."""
    env = {k: v for k, v in os.environ.items() if k not in ("GUARDIAN_KAFKA_PORT", "GUARDIAN_DATA_DIR")}
    env["GUARDIAN_DATA_DIR"] = str(data_dir)
    return LocalBroker.from_settings(Settings.from_env(env), env=env)


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of a real Kafka broker for this test session."""
    configured = os.environ.get("GUARDIAN_KAFKA_BOOTSTRAP", "").strip()
    if configured:
        run_sync(lambda: wait_for_broker(configured, 30.0))
        yield configured
        return
    choice = which_broker(os.environ)
    if choice == TESTCONTAINERS:
        address, stop = container_broker(BROKER_START_TIMEOUT_S)
        try:
            yield address
        finally:
            stop()
        return
    broker = _local_broker(tmp_path_factory.mktemp("guardian-kafka"))
    try:
        address = broker.up(timeout_s=BROKER_START_TIMEOUT_S)
    except BrokerError as exc:
        pytest.fail(f"no Kafka broker for the integration tests: {exc}", pytrace=False)
    try:
        yield address
    finally:
        broker.down()


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[LocalBroker]:
    """A local broker of this test only, which the test may stop and start again."""
    broker = _local_broker(tmp_path / "broker-data")
    broker.up(timeout_s=BROKER_START_TIMEOUT_S)
    try:
        yield broker
    finally:
        broker.down()


@pytest.fixture
def kafka_partitions() -> int:
    """Partitions of every topic ``topic_prefix`` creates (override per module or parametrize)."""
    return 4


@pytest.fixture
def topic_prefix(kafka_bootstrap: str, kafka_partitions: int) -> Iterator[str]:
    """A prefix unique to this test (``t<8 hex>.``), every topic a worker uses created (with leaders)."""
    prefix = f"t{uuid.uuid4().hex[:8]}."
    names = TopicNames(prefix)
    run_sync(lambda: create_topics(kafka_bootstrap, names, kafka_partitions))
    yield prefix
    # best effort: a broker stopped by the test itself is not a failure of the test
    with contextlib.suppress(KafkaError, OSError, TimeoutError):
        run_sync(lambda: delete_topics(kafka_bootstrap, worker_topics(names), timeout_s=20.0))


@pytest.fixture
def topic_names(topic_prefix: str) -> TopicNames:
    """The topic names under this test's ``topic_prefix``."""
    return TopicNames(topic_prefix)


@pytest.fixture
def guardian_env(
    kafka_bootstrap: str, topic_prefix: str, kafka_partitions: int, tmp_path: Path
) -> dict[str, str]:
    """Env for ``guardian`` subprocesses: this broker, this test's topics, a temp GUARDIAN_DATA_DIR."""
    return make_guardian_env(kafka_bootstrap, topic_prefix, kafka_partitions, tmp_path / "guardian-data")

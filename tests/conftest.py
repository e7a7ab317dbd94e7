"""Fixtures for the whole suite.

The Kafka broker of the integration tier (``kafka_bootstrap``, session-scoped), first found wins:

1. the cluster named by ``GUARDIAN_KAFKA_BOOTSTRAP``;
2. an ``apache/kafka`` container (testcontainers) when a Docker engine answers
   (``GUARDIAN_TEST_NO_DOCKER=1`` skips this);
3. the real local broker of ``guardian kafka up`` (:class:`guardian.kafka_local.LocalBroker`) with its
   data in a session temp dir and its jars from the shared cache; stopped at session end.

Per test: ``topic_prefix`` (a unique prefix with every topic of ``TopicNames.all()`` created,
``kafka_partitions`` partitions each, default 4; override with
``@pytest.mark.parametrize("kafka_partitions", [8])``), ``topic_names``, and ``guardian_env``
(an env dict for ``guardian`` subprocesses).
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from types import FrameType

import pytest
from aiokafka.errors import KafkaError

from config.settings import Settings
from guardian.kafka_local import BrokerError, LocalBroker, free_port, run_sync
from streams.admin import create_topics, delete_topics, wait_for_broker, worker_topics
from topics.names import TopicNames

KAFKA_IMAGE = "apache/kafka:4.1.1"


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM ends the run as Ctrl-C does: pytest then tears the fixtures down, so the session's
    broker and every test's workers (stopped in ``finally`` blocks) do not outlive it."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _interrupt)


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


def _docker_engine_answers() -> bool:
    """Whether a Docker engine answers; ``docker.from_env()`` raises DockerException when none does."""
    if os.environ.get("GUARDIAN_TEST_NO_DOCKER"):
        return False
    try:
        import docker
        from docker.errors import DockerException
    except ImportError:
        return False
    # A failed probe leaves an unclosed socket behind: collect it here, where its ResourceWarning is
    # ignored, so that it cannot fail the run later (filterwarnings = error).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        try:
            client = docker.from_env(timeout=10)
        except DockerException:
            client = None
        gc.collect()
    if client is None:
        return False
    try:
        client.ping()
    except DockerException:
        return False
    finally:
        client.close()
    return True


def _docker_broker() -> tuple[str, Callable[[], None]]:
    """A single-node KRaft ``apache/kafka`` container; its address and its stop function."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    port = free_port()
    container = DockerContainer(KAFKA_IMAGE)
    host = container.get_docker_client().host()
    container = (
        container.with_envs(
            KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_LISTENERS="PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://{host}:{port}",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_INTER_BROKER_LISTENER_NAME="PLAINTEXT",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            KAFKA_CONTROLLER_QUORUM_VOTERS="1@127.0.0.1:9093",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS="8",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
            KAFKA_AUTO_CREATE_TOPICS_ENABLE="false",
        )
        .with_bind_ports(9092, port)
        .waiting_for(
            LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(BROKER_START_TIMEOUT_S)
        )
    )
    container.start()
    address = f"{host}:{port}"
    run_sync(lambda: wait_for_broker(address, BROKER_START_TIMEOUT_S))
    return address, container.stop


@pytest.fixture(scope="session")
def kafka_bootstrap(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The bootstrap address of a real Kafka broker for this test session."""
    configured = os.environ.get("GUARDIAN_KAFKA_BOOTSTRAP", "").strip()
    if configured:
        run_sync(lambda: wait_for_broker(configured, 30.0))
        yield configured
        return
    if _docker_engine_answers():
        address, stop = _docker_broker()
        try:
            yield address
        finally:
            stop()
        return
    data_dir = tmp_path_factory.mktemp("guardian-kafka")
    env = {k: v for k, v in os.environ.items() if k not in ("GUARDIAN_KAFKA_PORT", "GUARDIAN_DATA_DIR")}
    env["GUARDIAN_DATA_DIR"] = str(data_dir)
    broker = LocalBroker.from_settings(Settings.from_env(env), env=env)
    try:
        address = broker.up(timeout_s=BROKER_START_TIMEOUT_S)
    except BrokerError as exc:
        pytest.fail(f"no Kafka broker for the integration tests: {exc}", pytrace=False)
    try:
        yield address
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

"""The Kafka broker of the integration tier, chosen explicitly (``GUARDIAN_TEST_BROKER``).

- ``local`` (the default, whether or not a Docker engine answers): the real local broker of
  ``guardian kafka up``;
- ``testcontainers``: a single-node KRaft Kafka container started by testcontainers, on
  ``GUARDIAN_TEST_KAFKA_IMAGE``, else ``apache/kafka:4.1.1`` when the engine has it, else the
  stand-in ``make docker`` built (``guardian/kafka:4.1.1``). No engine answering is a failure, never a
  silent fall back to the local broker.

``GUARDIAN_KAFKA_BOOTSTRAP`` wins over both (an existing cluster).
"""

from __future__ import annotations

import gc
import os
import warnings
from collections.abc import Callable, Mapping

import pytest

from guardian.docker_images import LOCAL_KAFKA, REGISTRY_KAFKA
from guardian.kafka_local import free_port, run_sync
from streams.admin import wait_for_broker

LOCAL = "local"
TESTCONTAINERS = "testcontainers"
BROKERS = (LOCAL, TESTCONTAINERS)
#: the label of every broker container the tests start (a run killed mid-way leaves it to `docker rm`)
CONTAINER_LABEL = "org.guardian.test-broker"
LOG_LINES = 30


class BrokerChoiceError(ValueError):
    """GUARDIAN_TEST_BROKER names no broker the tests know."""


class ContainerBrokerError(RuntimeError):
    """No broker container: no engine, or a container that did not serve in time (with its log)."""


def broker_choice(env: Mapping[str, str]) -> str:
    """``local`` or ``testcontainers`` from ``GUARDIAN_TEST_BROKER`` (empty or unset: ``local``)."""
    raw = env.get("GUARDIAN_TEST_BROKER", "").strip().lower() or LOCAL
    if raw not in BROKERS:
        raise BrokerChoiceError(
            f"GUARDIAN_TEST_BROKER must be one of {', '.join(BROKERS)}, not {env['GUARDIAN_TEST_BROKER']!r}"
        )
    return raw


def which_broker(env: Mapping[str, str]) -> str:
    """``broker_choice`` for the session fixture: a bad value fails the run in one line."""
    try:
        return broker_choice(env)
    except BrokerChoiceError as exc:
        error = str(exc)
    pytest.fail(error, pytrace=False)


def docker_engine_answers() -> bool:
    """Whether a Docker engine answers; ``docker.from_env()`` raises DockerException when none does."""
    import docker
    from docker.errors import DockerException

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


def kafka_image(env: Mapping[str, str]) -> str:
    """``GUARDIAN_TEST_KAFKA_IMAGE``, else apache/kafka when the engine has it, else the stand-in of
    ``make docker`` when the engine has that, else apache/kafka (to be pulled)."""
    if env.get("GUARDIAN_TEST_KAFKA_IMAGE", "").strip():
        return env["GUARDIAN_TEST_KAFKA_IMAGE"].strip()
    import docker
    from docker.errors import ImageNotFound

    client = docker.from_env(timeout=30)
    try:
        for image in (REGISTRY_KAFKA, LOCAL_KAFKA):
            try:
                client.images.get(image)
            except ImageNotFound:
                continue
            return image
    finally:
        client.close()
    return REGISTRY_KAFKA


def kafka_env(advertised: str) -> dict[str, str]:
    """The KAFKA_* settings of a single-node KRaft container (those of ``guardian kafka up``)."""
    return {
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,CONTROLLER://127.0.0.1:9093",
        "KAFKA_ADVERTISED_LISTENERS": f"PLAINTEXT://{advertised}",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "PLAINTEXT",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@127.0.0.1:9093",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "8",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
    }


def container_broker(timeout_s: float) -> tuple[str, Callable[[], None]]:
    """A Kafka container serving on a free host port: its address and its stop function (the run
    fails in one line, or with the container's last log lines, when there is none)."""
    try:
        return _container_broker(timeout_s)
    except ContainerBrokerError as exc:
        error = str(exc)
    pytest.fail(error, pytrace=False)


def _container_broker(timeout_s: float) -> tuple[str, Callable[[], None]]:
    if not docker_engine_answers():
        raise ContainerBrokerError(
            "GUARDIAN_TEST_BROKER=testcontainers, but no Docker engine answers: start one "
            "(make test-docker does), or run the tier on the local broker (GUARDIAN_TEST_BROKER=local)"
        )
    # the reaper image (ryuk) comes from a registry: without one, the fixture removes its container
    os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")
    from testcontainers.core.container import DockerContainer

    image = kafka_image(os.environ)
    port = free_port()
    container = DockerContainer(image, labels={CONTAINER_LABEL: "kafka"})
    host = container.get_docker_client().host()
    container.with_envs(**kafka_env(f"{host}:{port}")).with_bind_ports(9092, port)
    container.start()
    address = f"{host}:{port}"
    try:
        run_sync(lambda: wait_for_broker(address, timeout_s))
    except TimeoutError as exc:
        out, err = container.get_logs()
        lines = (out + err).decode("utf-8", errors="replace").splitlines()[-LOG_LINES:]
        container.stop()
        raise ContainerBrokerError(
            f"the Kafka container ({image}) did not serve within {timeout_s:.0f} s; its last lines:\n"
            + "\n".join(lines)
        ) from exc
    return address, container.stop

"""`docker compose up` runs the whole job: broker, topics, two workers in one consumer group, the live
console, and a simulated fleet of every story, which ends as expected (and is on the console, with
both workers); `docker compose down` leaves nothing behind.

Needs a Docker engine and the images of `make docker` (`make test-docker` provides both). Runs with
the compose command a user has (`docker compose`, else Debian's `docker-compose` 1.29), from the
project folder, so that the override `make docker` writes where no registry answers is read too.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest

from guardian.docker_engine import compose_command, docker_cli
from guardian.kafka_local import free_port
from simulator.scenarios import SCENARIO_IDS
from topics.records import EndStatus

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
UP_TIMEOUT_S = 600.0
FLEET_TIMEOUT_S = 600.0
LOG_LINES = 30


def _run(
    cmd: Sequence[str], timeout_s: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(cmd), cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )


class Project:
    """One compose project under a unique name, with its own host port for the broker."""

    def __init__(self, compose: list[str], docker: str, env: dict[str, str]) -> None:
        self.name = f"gsmoke{uuid.uuid4().hex[:8]}"
        self.compose = [*compose, "-p", self.name]
        self.docker = docker
        self.env = env

    def run(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
        return _run([*self.compose, *args], timeout_s, self.env)

    def containers(self, service: str | None = None) -> list[str]:
        labels = ["--filter", f"label=com.docker.compose.project={self.name}"]
        if service:
            labels += ["--filter", f"label=com.docker.compose.service={service}"]
        out = _run([self.docker, "ps", "-a", "-q", *labels], 60).stdout
        return out.split()

    def logs(self) -> str:
        """Each service's state and last log lines (what a failure shows)."""
        return self.run("ps").stdout + self.run("logs", "--no-color", "--tail", str(LOG_LINES)).stdout


@pytest.fixture
def project() -> Iterator[Project]:
    env = dict(os.environ)
    env.update(
        GUARDIAN_KAFKA_HOST_PORT=str(free_port()),
        GUARDIAN_CONSOLE_HOST_PORT=str(free_port()),
        SIM_DEVICES=str(len(SCENARIO_IDS)),
        SIM_SPEED="4",
        SIM_SEED="11",
    )
    proj = Project(compose_command(env), docker_cli(env), env)
    try:
        yield proj
    finally:
        down = proj.run("down", "--volumes", "--timeout", "60", timeout_s=300.0)
        assert down.returncode == 0, down.stderr
        assert proj.containers() == [], f"containers left after down: {proj.containers()}"
        volumes = _run([proj.docker, "volume", "ls", "-q", "--filter", f"name={proj.name}_"], 60).stdout
        assert volumes.split() == [], f"volumes left after down -v: {volumes}"


def console_snapshot(port: int) -> dict[str, Any]:
    """The console's first Server-Sent Event: every lane it holds, its overview, the workers'
    partitions (what a page gets when it opens)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/events", timeout=10) as resp:
        for raw in resp:
            line = raw.decode().rstrip("\n")
            if line.startswith("data: "):
                event: dict[str, Any] = orjson.loads(line[len("data: ") :])
                return event
    raise AssertionError("the console's stream ended without an event")


def test_compose_runs_the_job_with_two_workers_and_the_fleet_ends_as_expected(project: Project) -> None:
    up = project.run("up", "-d", "--scale", "worker=2", timeout_s=UP_TIMEOUT_S)
    assert up.returncode == 0, f"docker compose up failed:\n{up.stderr[-2000:]}\n{project.logs()}"

    [simulator] = project.containers("simulator")
    try:
        waited = _run([project.docker, "wait", simulator], FLEET_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the fleet did not end within {FLEET_TIMEOUT_S:.0f} s:\n{project.logs()}", pytrace=False)
    fleet = _run([project.docker, "logs", simulator], 60)
    assert waited.stdout.strip() == "0", f"the fleet did not end as expected:\n{fleet.stdout[-3000:]}"
    count = len(SCENARIO_IDS)
    assert f"{count}/{count} OK" in fleet.stdout

    # two workers, each with its own worker ID (table folder), both ready, in one consumer group
    workers = project.containers("worker")
    assert len(workers) == 2
    ids = set()
    for worker in workers:
        health = _run([project.docker, "inspect", "--format", "{{.State.Health.Status}}", worker], 60)
        assert health.stdout.strip() == "healthy", project.logs()
        log = _run([project.docker, "logs", worker], 60)
        ids |= {line.rsplit(" ", 1)[-1] for line in log.stderr.splitlines() if "worker ID" in line}
    assert ids == {"w0", "w1"}
    [kafka] = project.containers("kafka")
    group = _run(
        [
            project.docker,
            "exec",
            kafka,
            "/opt/kafka/bin/kafka-consumer-groups.sh",
            "--bootstrap-server",
            "kafka:19092",
            "--describe",
            "--group",
            "guardian.worker",
            "--members",
        ],
        120,
    )
    members = [line for line in group.stdout.splitlines() if line.startswith("guardian.worker ")]
    assert len(members) == 2, group.stdout + group.stderr

    # the console: every experience of the fleet at its end, and each replica's partitions (the
    # workers are polled every 2 s: a few tries)
    [console] = project.containers("console")
    port = int(project.env["GUARDIAN_CONSOLE_HOST_PORT"])
    deadline = time.monotonic() + 60
    snapshot: dict[str, Any] = {"worker_of": {}, "lanes": []}
    holders: set[int] = set()
    while time.monotonic() < deadline and not (len(holders) == 2 and len(snapshot["worker_of"]) == 8):
        time.sleep(2)
        try:
            snapshot = console_snapshot(port)
        except OSError as exc:  # not listening (yet): its log says why when it never does
            snapshot = {"worker_of": {}, "lanes": [], "error": repr(exc)}
        holders = set(snapshot["worker_of"].values())
    assert len(holders) == 2 and len(snapshot["worker_of"]) == 8, f"console: {snapshot}\n{project.logs()}"
    lanes = [lane for lane in snapshot["lanes"] if lane["experience"]]
    assert len(lanes) == count, [lane["device"] for lane in lanes]
    assert all(lane["status"] in get_args(EndStatus) for lane in lanes), lanes  # every one ended
    health = _run([project.docker, "inspect", "--format", "{{.State.Health.Status}}", console], 60)
    assert health.stdout.strip() == "healthy", project.logs()

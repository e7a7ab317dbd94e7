"""A worker told to stop while the broker is away ends within its stop deadline, and says why."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from guardian.kafka_local import LocalBroker
from streams.admin import create_topics
from streams.seam.stop_deadline import STOP_DEADLINE_S
from tests.conftest import make_guardian_env
from tests.live import WorkerProcess, produce, ready
from tests.streams import Script
from topics.names import TopicNames

pytestmark = pytest.mark.own_broker

#: what whoever sends SIGTERM waits before it kills (the compose file's and the chaos run's grace)
GRACE_S = 30.0


def test_a_worker_told_to_stop_while_the_broker_is_away_exits_within_the_deadline(
    own_broker: LocalBroker, tmp_path: Path
) -> None:
    bootstrap = own_broker.bootstrap()
    assert bootstrap is not None
    names = TopicNames("stop.")
    asyncio.run(create_topics(bootstrap, names, 2))
    env = make_guardian_env(bootstrap, names.prefix, 2, tmp_path / "guardian-data")
    worker = WorkerProcess(env, tmp_path / "worker.log", worker_id="w1").start()
    try:
        deadline = time.monotonic() + 120
        while not ready(worker):
            assert worker.alive(), worker.log_tail()
            assert time.monotonic() < deadline, f"not ready within 120 s:\n{worker.log_tail()}"
            time.sleep(0.2)
        scripts = [Script(device_id=f"stop-{i}", prefix=names.prefix).start() for i in range(8)]
        asyncio.run(produce(bootstrap, [r for s in scripts for r in s.records]))
        own_broker.down()  # with the worker's batches and commits on their way to it
        time.sleep(2)
        assert worker.proc is not None and worker.alive(), worker.log_tail()
        os.killpg(worker.proc.pid, signal.SIGTERM)
        told = time.monotonic()
        try:
            code = worker.proc.wait(timeout=GRACE_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still there {GRACE_S:.0f} s after SIGTERM:\n{worker.log_tail()}")
        took = time.monotonic() - told
    finally:
        worker.kill()
    assert code == 0, worker.log_tail()
    if took >= STOP_DEADLINE_S:  # it did not finish its stop on its own: it says why it ends
        assert "stopping took over 20 s" in worker.log_tail(), worker.log_tail()

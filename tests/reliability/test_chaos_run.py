"""Seeded chaos runs (``chaos``): the live group under kills, stops, a SIGTERM, a burst and a broker
outage, checked against ``guardian replay`` of the same records; and a group of four under kills,
every partition with records moving within 60 s of each rebalance.

``GUARDIAN_CHAOS_SEED`` (default 1) and ``GUARDIAN_CHAOS_DURATION`` (seconds, default 240) choose
the run; a failure prints the seed to rerun (``make chaos SEED=n``)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from chaos.run import ChaosConfig, ChaosRun
from chaos.schedule import Shape

pytestmark = [pytest.mark.reliability, pytest.mark.kafka]


@pytest.mark.parametrize(("shape", "workers"), [("storm", 2), ("scale", 4)])
def test_chaos_run_matches_replay(shape: Shape, workers: int, tmp_path: Path) -> None:
    seed = int(os.environ.get("GUARDIAN_CHAOS_SEED", "1"))
    duration = float(os.environ.get("GUARDIAN_CHAOS_DURATION", "240"))
    config = ChaosConfig(seed, duration, tmp_path / shape, shape=shape, workers=workers)
    report = ChaosRun(config, print).run()
    assert report.ok, f"seed {seed} ({shape}): " + orjson.dumps(report.to_json()).decode()

"""One short seeded chaos run in the integration tier (the long ones are in ``make reliability``):
a group of two workers under a SIGKILL burst, a SIGSTOP, a SIGTERM and a broker outage of 70 s,
on a broker of its own, gives what ``guardian replay`` gives of the same records, and no worker
exits by itself."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from chaos.run import ChaosConfig, ChaosRun

pytestmark = [pytest.mark.kafka, pytest.mark.own_broker]

SEED = 1
DURATION_S = 45.0


def test_a_short_storm_matches_replay(tmp_path: Path) -> None:
    report = ChaosRun(
        ChaosConfig(SEED, DURATION_S, tmp_path, wave_devices=17, wave_every_s=15.0), print
    ).run()
    kinds = sorted(f["kind"] for f in report.faults)
    assert kinds == ["broker", "burst", "stop", "term"]
    assert report.verdict is not None
    assert report.verdict.counts["inputs"]["records"] > 0
    assert report.ok, orjson.dumps(report.to_json()).decode()

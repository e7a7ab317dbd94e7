"""`guardian context summary FILE --device ID`: what the model saw of a device, from an export."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

from tests.unit.kcat_exports import kcat_file


def summary(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDIAN_")}
    return subprocess.run(
        [sys.executable, "-m", "guardian", "context", "summary", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_summary_of_a_device_from_a_replay_file(tmp_path: Path) -> None:
    path = kcat_file(tmp_path / "hg15.jsonl", "HG-15")
    done = summary(str(path), "--device", "airbot-0001")
    assert done.returncode == 0, done.stderr
    out = orjson.loads(done.stdout)
    assert out["summary"] == "planner_context_summary.v2" and out["device_id"] == "airbot-0001"
    domains = out["domains"]
    assert domains["movement"]["data"]["current_area"] == "거실"
    assert domains["network"]["state"] == "stale"
    assert domains["air_quality"]["data"]["grade"] == "moderate"
    for word in ("theta", "pm25", "level_pct", "streaming", "face_image", "CANARY"):
        assert word not in done.stdout
    # as of an earlier moment: before any context arrived there is nothing to show
    early = summary(str(path), "--device", "airbot-0001", "--at-ms", str(out["at_ms"] - 7000))
    assert early.returncode == 0 and orjson.loads(early.stdout)["domains"] == {}


def test_an_unknown_device_or_a_bad_file_is_named(tmp_path: Path) -> None:
    path = kcat_file(tmp_path / "hg15.jsonl", "HG-15")
    done = summary(str(path), "--device", "airbot-9999")
    assert done.returncode == 4 and "airbot-9999" in done.stderr
    bad = tmp_path / "bad.jsonl"
    bad.write_text("not json\n", "utf-8")
    done = summary(str(bad), "--device", "airbot-0001")
    assert done.returncode == 4 and "bad.jsonl:1" in done.stderr

"""A broken registry stops the worker at start with a message naming the entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path


def test_worker_refuses_to_start_on_a_broken_registry(tmp_path: Path) -> None:
    shipped = json.loads(resources.files("topics.registry").joinpath("contracts.json").read_text("utf-8"))
    text = json.dumps(shipped)
    assert '"presence"' in text
    broken = tmp_path / "contracts.json"
    # break one entry: an enum that is not a list
    contracts = shipped.get("contracts", shipped)
    person = contracts["security.person_detected"]
    person["facts"]["presence"]["enum"] = "detected"
    broken.write_text(json.dumps(shipped), encoding="utf-8")
    env = {**os.environ, "GUARDIAN_CONTRACTS_FILE": str(broken), "GUARDIAN_KAFKA_BOOTSTRAP": "127.0.0.1:1"}
    done = subprocess.run(
        [sys.executable, "-m", "guardian", "worker"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "broken registry" in done.stderr
    assert "security.person_detected" in done.stderr and "presence" in done.stderr

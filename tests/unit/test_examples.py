"""The shipped example replays to its shipped summary, as the README's analyst quick start says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_example_incident_replays_to_its_expected_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "incident"
    assert (
        main(["replay", str(EXAMPLES / "incident.jsonl"), "--out", str(out), "--topic-prefix", "guardian."])
        == 0
    )
    assert "4 experiences" in capsys.readouterr().out
    expected = json.loads((EXAMPLES / "incident.summary.json").read_text(encoding="utf-8"))
    summary = json.loads((out / "summary.json").read_text(encoding="utf-8"))
    # every field the example documents is reproduced exactly (newer fields may be added)
    assert {key: summary.get(key) for key in expected} == expected
    assert expected["experiences"] == {
        "exp_airbot-0005_1785400000000": "returned",
        "exp_airbot-0006_1785400060000": "completed",
        "exp_airbot-0007_1785400120000": "completed",
        "exp_airbot-0011_1785400180000": "completed",
    }
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "airbot-0011" in page and "privacy_violation" in page


def test_the_example_is_a_kcat_file_of_guardian_topics() -> None:
    lines = (EXAMPLES / "incident.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert {r["topic"] for r in records} == {
        "guardian.plans",
        "guardian.observations",
        "guardian.task-events",
    }
    assert all({"topic", "partition", "offset", "ts", "key", "payload"} <= r.keys() for r in records)

"""`guardian replay` as a user runs it: files in, outputs and report out, bad input named."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.unit.kcat_exports import kcat_file
from tests.unit.replay_runs import replay


def test_replay_writes_every_output_the_summary_and_the_report(tmp_path: Path) -> None:
    source = kcat_file(tmp_path / "hg05.jsonl", "HG-05")
    done = replay(str(source), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    for name in ("decisions.jsonl", "dispatch.jsonl", "timeline.jsonl", "deadletter.jsonl", "summary.json"):
        assert (out / name).is_file(), name
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert list(summary["experiences"].values()) == ["returned"]
    assert summary["counts"]["decisions"] == 1 and summary["decisions_mode"] == "rules"
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'class="lane"' in html and "return_to_station" in html


def test_an_unreadable_line_stops_replay_naming_file_and_line(tmp_path: Path) -> None:
    source = kcat_file(tmp_path / "broken.jsonl", "HG-01")
    lines = source.read_bytes().splitlines()
    lines.insert(2, b"{this is not json")
    source.write_bytes(b"\n".join(lines) + b"\n")
    done = replay(str(source), "--out", str(tmp_path / "out"))
    assert done.returncode != 0
    assert f"{source}:3" in done.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_a_missing_file_stops_replay_naming_it_as_unusable_input(tmp_path: Path) -> None:
    missing = tmp_path / "nope.jsonl"
    done = replay(str(missing), "--out", str(tmp_path / "out"))
    assert done.returncode == 4  # the README's exit codes: input that cannot be used as given
    assert str(missing) in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_records_inside_well_formed_lines_are_judged_like_live_ones(tmp_path: Path) -> None:
    source = kcat_file(tmp_path / "hg11.jsonl", "HG-11")
    done = replay(str(source), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    summary = orjson.loads((tmp_path / "out" / "summary.json").read_bytes())
    assert summary["deadletter_reasons"] == {
        "not_json": 1,
        "privacy_violation": 2,
        "too_large": 1,
        "unknown_contract": 1,
    }

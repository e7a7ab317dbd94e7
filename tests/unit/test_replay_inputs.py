"""`guardian replay`'s inputs and --out: input rules (§12), overlapping exports, stdin, gzip, --no-report."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from guardian.replay import OUTPUT_FILES, ReplayInputError, read_kcat_lines, replay_files, replay_records
from tests.scenario_scripts import build
from tests.unit.kcat_exports import OUTS, SETTINGS, fleet, line, outputs, with_recorded_decisions, write
from tests.unit.replay_runs import replay
from topics.names import TopicNames


# -- §12 input rules ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partition", True),
        ("offset", False),
        ("partition", -1),
        ("offset", -5),
        ("offset", 1.0),
        ("ts", 2**53),
        ("ts", -1),
        ("ts", 1785400000000.5),
        ("ts", True),
        ("ts", "1785400000000"),
    ],
)
def test_a_line_breaking_the_number_rules_is_unreadable_naming_file_and_line(
    tmp_path: Path, field: str, value: object
) -> None:
    records = build("HG-01").records
    source = write(tmp_path / "in.jsonl", records)
    lines = source.read_bytes().splitlines()
    lines[3] = line(records[3], **{field: value})
    source.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(ReplayInputError, match=f"{source}:4: .*{field}"):
        list(read_kcat_lines(source, TopicNames()))


def test_a_ts_near_2_64_stops_replay_without_a_traceback_or_outputs(tmp_path: Path) -> None:
    records = build("HG-05").records
    source = write(tmp_path / "in.jsonl", records)
    text = source.read_bytes().replace(f'"ts":{records[-1].ts}'.encode(), b'"ts":18446744073709551615', 1)
    source.write_bytes(text)
    out = tmp_path / "out"
    done = replay(str(source), "--out", str(out))
    assert done.returncode != 0
    assert f"{source}:" in done.stderr and "Traceback" not in done.stderr
    assert not any((out / name).exists() for name in OUTPUT_FILES)


def test_a_record_in_overlapping_exports_is_read_once(tmp_path: Path) -> None:
    records = with_recorded_decisions(fleet())
    whole = write(tmp_path / "whole.jsonl", records)
    first = write(tmp_path / "first.jsonl", records[: len(records) * 2 // 3])
    second = write(tmp_path / "second.jsonl", records[len(records) // 3 :])
    once = replay_files([str(whole)], tmp_path / "once", settings=SETTINGS, report=False)
    twice = replay_files([str(whole), str(whole)], tmp_path / "twice", settings=SETTINGS, report=False)
    overlap = replay_files([str(first), str(second)], tmp_path / "overlap", settings=SETTINGS, report=False)
    assert once.summary["decisions_mode"] == "recorded" and once.summary["divergences"] >= 1
    assert outputs(tmp_path / "twice") == outputs(tmp_path / "once") == outputs(tmp_path / "overlap")
    assert twice.summary == once.summary == overlap.summary
    assert (tmp_path / "twice" / "divergences.jsonl").read_bytes() == (
        tmp_path / "once" / "divergences.jsonl"
    ).read_bytes()


def test_a_file_with_none_of_our_topics_lists_the_topics_and_the_prefix(tmp_path: Path) -> None:
    source = write(tmp_path / "prod.jsonl", build("HG-05", prefix="prod.guardian.").records)
    done = replay(str(source), "--out", str(tmp_path / "out"))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert str(source) in done.stderr
    assert "prod.guardian.observations" in done.stderr and "'guardian.'" in done.stderr
    assert "--topic-prefix" in done.stderr
    with_prefix = replay(str(source), "--out", str(tmp_path / "out"), "--topic-prefix", "prod.guardian.")
    assert with_prefix.returncode == 0, with_prefix.stderr
    summary = orjson.loads((tmp_path / "out" / "summary.json").read_bytes())
    assert list(summary["experiences"].values()) == ["returned"]


def test_out_is_emptied_of_guardians_files_and_nothing_else(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "divergences.jsonl").write_text('{"old": true}\n')
    (out / "decisions.jsonl").write_text('{"old": true}\n')
    (out / "notes.txt").write_text("mine")
    source = write(tmp_path / "in.jsonl", build("HG-05").records)
    done = replay(str(source), "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert not (out / "divergences.jsonl").exists()
    assert b'"old"' not in (out / "decisions.jsonl").read_bytes()
    assert (out / "notes.txt").read_text() == "mine"
    # a failed rerun leaves the previous run's files as they were (tests/unit/test_replay_safety.py)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"{not json\n")
    assert replay(str(bad), "--out", str(out)).returncode == 4
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_out_naming_a_file_is_a_one_line_error(tmp_path: Path) -> None:
    source = write(tmp_path / "in.jsonl", build("HG-01").records)
    target = tmp_path / "taken"
    target.write_text("keep")
    done = replay(str(source), "--out", str(target))
    assert done.returncode != 0
    assert len(done.stderr.strip().splitlines()) == 1 and str(target) in done.stderr
    assert target.read_text() == "keep"


# -- stdin and gzip ------------------------------------------------------------------------------
def test_stdin_and_gzip_inputs_give_the_same_outputs(tmp_path: Path) -> None:
    records = fleet()
    source = write(tmp_path / "in.jsonl", records)
    packed = tmp_path / "in.jsonl.gz"
    packed.write_bytes(gzip.compress(source.read_bytes()))
    plain = replay(str(source), "--out", str(tmp_path / "plain"))
    gz = replay(str(packed), "--out", str(tmp_path / "gz"))
    import subprocess
    import sys

    piped = subprocess.run(
        [sys.executable, "-m", "guardian", "replay", "-", "--out", str(tmp_path / "stdin")],
        input=packed.read_bytes(),
        capture_output=True,
        timeout=120,
    )
    assert plain.returncode == gz.returncode == piped.returncode == 0, gz.stderr + piped.stderr.decode()
    assert outputs(tmp_path / "plain") == outputs(tmp_path / "gz") == outputs(tmp_path / "stdin")
    assert outputs(tmp_path / "plain")["timeline.jsonl"]


def test_a_truncated_gzip_file_is_unreadable_not_a_traceback(tmp_path: Path) -> None:
    source = write(tmp_path / "in.jsonl", build("HG-05").records * 20)
    packed = tmp_path / "in.jsonl.gz"
    data = gzip.compress(source.read_bytes())
    packed.write_bytes(data[: len(data) // 2])
    done = replay(str(packed), "--out", str(tmp_path / "out"))
    assert done.returncode != 0
    assert str(packed) in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "out" / "summary.json").exists()


def test_records_at_the_same_coordinates_with_other_content_are_not_copies() -> None:
    one = build("HG-01", device_id="airbot-0001").records
    two = build("HG-01", device_id="airbot-0002").records  # same partition, offsets and times
    result = replay_records(one + two, settings=SETTINGS)
    assert sorted(result.summary["experiences"].values()) == ["completed", "completed"]
    assert result.outs == replay_records(one + one + two + two, settings=SETTINGS).outs


def test_no_report_writes_the_outputs_and_summary_only(tmp_path: Path) -> None:
    source = write(tmp_path / "in.jsonl", build("HG-05").records)
    out = tmp_path / "out"
    done = replay(str(source), "--out", str(out), "--no-report")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == sorted([*OUTS, "summary.json"])

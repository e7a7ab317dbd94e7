"""The HTML incident report from a record directory: ``render_report_from_dir`` and ``python -m report``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from report import render_report, render_report_from_dir
from report.__main__ import main as report_main
from report.html import (
    DeviceStateChange,
)
from tests.unit.report_fixtures import (
    DEV_A,
    EXP_ABORT,
    EXP_DONE,
    EXP_RET,
    T0,
    card_rows,
    lanes,
    parse,
    sample_records,
)


def test_render_report_from_dir_and_main(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rec = sample_records()
    for name, key in (
        ("decisions.jsonl", "decisions"),
        ("dispatch.jsonl", "dispatches"),
        ("timeline.jsonl", "timeline"),
        ("deadletter.jsonl", "dead_letters"),
    ):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rec[key]), encoding="utf-8")
    summary = {"decisions": 4, "experiences": rec["statuses"]}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")

    out = render_report_from_dir(tmp_path)
    assert out == tmp_path / "report.html"
    dom = parse(out.read_text(encoding="utf-8"))
    assert {n.attrs["data-experience"] for n in lanes(dom)} == {EXP_DONE, EXP_RET, EXP_ABORT, ""}
    assert card_rows(dom, "Dead letters") == {"privacy_violation": 2, "not_json": 1}

    out.unlink()
    assert report_main([str(tmp_path)]) == 0
    assert out.exists()
    assert capsys.readouterr().out.strip().endswith("report.html")


def test_render_report_from_dir_names_a_bad_line(tmp_path: Path) -> None:
    (tmp_path / "timeline.jsonl").write_text('{"stage": "goal"}\nnot json\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"timeline\.jsonl:2"):
        render_report_from_dir(tmp_path)
    assert report_main([str(tmp_path)]) == 1
    (tmp_path / "timeline.jsonl").write_bytes(b'{"stage": "goal"}\n{"stage": "\xff"}\n')
    with pytest.raises(ValueError, match=r"timeline\.jsonl:2: not UTF-8"):
        render_report_from_dir(tmp_path)
    assert not (tmp_path / "report.html").exists() and not (tmp_path / "report.html.partial").exists()


def test_from_dir_reads_the_mode_and_divergences(tmp_path: Path) -> None:
    (tmp_path / "summary.json").write_text(json.dumps({"decisions_mode": "rules", "experiences": {}}))
    (tmp_path / "divergences.jsonl").write_text(
        json.dumps({"trigger_event_id": "t1", "kind": "no_recorded_decision"}) + "\n", encoding="utf-8"
    )
    dom = parse(render_report_from_dir(tmp_path).read_text(encoding="utf-8"))
    banner = next(n for n in dom.iter() if n.attrs.get("id") == "replay-mode")
    assert "decisions rules" in banner.text() and "1 divergence" in banner.text()


@pytest.mark.parametrize("on_demand", [False, True])
def test_from_dir_streams_the_files_to_the_same_page(tmp_path: Path, on_demand: bool) -> None:
    """The directory's files are read lane by lane, not held: the page is the one its records make."""
    rec = sample_records()
    rec["timeline"][0]["summary"] = "goal: 거실과 주방을 순찰"
    divergences = [
        {"trigger_event_id": "obs_a_20", "kind": "different", "field": "decision", "recorded": "continue"},
        {"trigger_event_id": "obs_zz", "kind": "not_reproduced", "recorded": "dec_zz"},
    ]
    files = {
        "decisions.jsonl": rec["decisions"],
        "dispatch.jsonl": rec["dispatches"],
        "timeline.jsonl": rec["timeline"],
        "deadletter.jsonl": rec["dead_letters"],
        "divergences.jsonl": divergences,
    }
    for name, items in files.items():
        # blank lines and non-ASCII text shift the byte offsets the second pass seeks to
        (tmp_path / name).write_text("\n".join(json.dumps(r, ensure_ascii=False) + "\n" for r in items))
    summary = {"decisions_mode": "recorded", "experiences": rec["statuses"]}
    (tmp_path / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    states = [DeviceStateChange(DEV_A, "network", T0 + 5_000, "net_down", "disconnected")]
    page = render_report_from_dir(tmp_path, device_states=states, on_demand=on_demand).read_text(
        encoding="utf-8"
    )
    expected = render_report(
        **rec,
        generated_note=f"From {tmp_path.name}/: 30 timeline entries, 4 decisions, 3 dispatches, "
        "3 dead letters.",
        divergences=divergences,
        replay_mode="recorded",
        device_states=states,
        on_demand=on_demand,
    )
    assert page == expected
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("report.html")] == ["report.html"]

"""A run's figures are kept with where and when they were measured, and the documents' tables are
generated from the latest kept file, so they cannot drift from it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import report_tables, results
from bench.targets import evaluate

ROOT = Path(__file__).resolve().parents[2]


def run_results(*, pipeline_valid: bool = True) -> dict[str, Any]:
    pipe: dict[str, Any] = (
        {"valid": True, "records_per_s": 16_000.0, "measured_records": 160_000, "measured_s": 10.0}
        | {"acks": 6, "cpu_us_per_record": 60.0}
        if pipeline_valid
        else {
            "valid": False,
            "records_per_s": None,
            "measured_records": 1,
            "measured_s": 0.16,
            "reasons": ["1 record measured (at least 1,000 needed)"],
        }
    )
    out: dict[str, Any] = {
        "mode": "full",
        "machine": {"nproc": 4, "cpu": "test cpu", "ram_gib": 16.0},
        "layout": {"pinned": True, "worker_cores": [3], "other_cores": [0, 1, 2]},
        "load_average_at_start": [0.5, 0.4, 0.3],
        "load_average_at_end": [1.5, 0.9, 0.5],
        "pipeline": {**pipe, "devices": 10_000, "records": 200_000, "mix": {"state_only": 16}},
        "passthrough": {"valid": True, "records_per_s": 80_000.0, "measured_records": 400_000}
        | {"measured_s": 5.0, "cpu_us_per_record": 12.0},
        "inbox_floor": {"valid": True, "records_per_s": 90_000.0, "measured_records": 400_000}
        | {"measured_s": 4.4, "acks": 20, "cpu_us_per_record": 10.0},
        "rss": {"devices": 11_000, "vm_hwm_mb": 380.0, "vm_rss_mb": 300.0},
        "replay": {"records": 1_000_000, "records_per_s": 41_000.0, "records_per_cpu_s": 40_000.0}
        | {"rss_mb": 290.0, "counts": {"decisions": 1}},
    }
    if pipeline_valid:
        window = {"valid": True, "seconds": 30.0, "matched": 300, "missing": 0, "rate_achieved": 4_000.0}
        out["latency"] = {
            "background_rate_target": 4_000.0,
            "windows": [
                window | {"window": i, "p50_ms": 20.0, "p99_ms": 60.0 + i, "p999_ms": 90.0, "max_ms": 95.0}
                for i in (1, 2, 3)
            ],
            "trace": {"slowest": ["kept out of the results file"]},
        }
    else:
        out["latency"] = {
            "refused": "the throughput it derives its load from is not valid: 1 record measured"
        }
    return out


def kept(**kwargs: Any) -> dict[str, Any]:
    return results.figures(
        run_results(**kwargs), commit="0123456789abcdef", dirty=False, date="2026-12-04T10:00:00Z"
    )


def test_a_run_keeps_its_figures_with_machine_cores_commit_and_date_not_its_traces() -> None:
    figures = kept()
    assert figures["commit"] == "0123456789abcdef" and figures["date"] == "2026-12-04T10:00:00Z"
    assert figures["machine"]["nproc"] == 4 and figures["layout"]["worker_cores"] == [3]
    assert figures["parts"]["pipeline"]["records_per_s"] == 16_000.0
    assert figures["parts"]["pipeline"]["cpu_us_per_record"] == 60.0
    assert [w["p99_ms"] for w in figures["parts"]["latency"]["windows"]] == [61.0, 62.0, 63.0]
    assert b"kept out of the results file" not in results.dumps(figures)
    assert figures["targets"] == evaluate(run_results())
    assert results.file_name(figures) == "2026-12-04T100000Z-full-0123456789.json"
    assert results.not_valid(figures) == []


def test_an_invalid_window_is_kept_as_its_reasons_and_makes_the_run_fail() -> None:
    figures = kept(pipeline_valid=False)
    assert "records_per_s" not in figures["parts"]["pipeline"]  # no figure kept
    assert results.not_valid(figures) == [
        "pipeline: window not valid, no figure: 1 record measured (at least 1,000 needed)",
        "latency: not run: the throughput it derives its load from is not valid: 1 record measured",
    ]
    table = report_tables.figures_table(figures)
    assert "| Guardian pipeline, one worker, 10,000 devices | no figure, window not valid: 1 record" in table
    assert "| trigger → dispatch | not run: the throughput it derives its load from is not valid" in table
    (row,) = [line for line in table.splitlines() if line.startswith("| Guardian pipeline")]
    assert "observations/s" not in row


def test_the_tables_show_every_window_the_cpu_ratios_and_the_targets() -> None:
    runs = [("a.json", kept())]
    text = report_tables.render("figures", runs)
    assert "commit `0123456789`" in text and "the measured worker on core 3" in text
    for i in (1, 2, 3):
        assert f"| trigger → dispatch, window {i} (30 s) | at 4,000 obs/s: p50 20.0 ms, p99 6{i}.0 ms" in text
    # the worker's CPU per observation against the passthrough's (12 µs) and the inbox floor's (10 µs)
    assert "| 5.00 / 6.00 |" in text
    assert "| pipeline, observations/s per worker ≥ 15,000 | 16,000: met | no (1 of 3) |" in text
    assert "Kafka" not in report_tables.render("targets", runs)


def test_a_target_counts_when_met_in_three_full_runs_in_a_row() -> None:
    met, missed = kept(), kept()
    missed["targets"]["pipeline_obs_per_s"]["met"] = False
    quick = kept() | {"mode": "quick"}
    runs = [("1", met), ("2", missed), ("3", met), ("4", quick), ("5", met), ("6", met)]
    assert report_tables.streak(runs, "pipeline_obs_per_s") == 3
    assert report_tables.streak(runs[:5], "pipeline_obs_per_s") == 2
    assert "| yes |" in report_tables.targets_table(runs)


def test_a_block_is_replaced_between_its_markers_only() -> None:
    text = f"intro\n{report_tables.begin('targets')}\nold\n{report_tables.end('targets')}\nafter\n"
    assert report_tables.replace_block(text, "targets", "new") == (
        f"intro\n{report_tables.begin('targets')}\nnew\n{report_tables.end('targets')}\nafter\n"
    )
    with pytest.raises(ValueError, match="markers are missing"):
        report_tables.replace_block("no markers", "targets", "new")


def test_keeping_a_run_writes_its_file_and_renders_the_documents(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    kept_dir = tmp_path / "results"
    kept_dir.mkdir()
    for doc, block in results.DOCS.items():
        (tmp_path / doc).write_text(f"# doc\n{report_tables.begin(block)}\n{report_tables.end(block)}\n")
    figures = kept()
    path = kept_dir / results.file_name(figures)
    path.write_bytes(results.dumps(figures))
    assert results.stale_docs(tmp_path, kept_dir) == ["README.md", "docs/PERFORMANCE.md"]
    assert results.render_docs(tmp_path, kept_dir) == ["README.md", "docs/PERFORMANCE.md"]
    assert results.stale_docs(tmp_path, kept_dir) == []
    assert "16,000: met" in (tmp_path / "README.md").read_text()
    assert orjson.loads(path.read_bytes())["commit"] == "0123456789abcdef"


def test_the_checked_in_documents_are_what_the_latest_kept_results_give() -> None:
    assert results.stale_docs(ROOT, ROOT / "bench" / "results") == [], "run: python -m bench.results render"

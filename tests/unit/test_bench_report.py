"""What ``guardian bench`` writes: the chart shows each baseline and says which targets are met."""

from __future__ import annotations

from typing import Any

from bench.cli import evaluate
from bench.svg import render


def results() -> dict[str, Any]:
    out: dict[str, Any] = {
        "machine": {"nproc": 2, "cpu": "test cpu"},
        "mode": "full",
        "pipeline": {"records_per_s": 4093.0},
        "passthrough": {"records_per_s": 81364.0},
        "faust_floor": {"records_per_s": 8514.0},
        "inbox_floor": {"records_per_s": 52785.0},
        "latency": {"p99_ms": 37.3},
        "rss": {"devices": 10600, "vm_hwm_mb": 322.0},
        "core": {"median_us": 11.1},
        "ratio_pipeline_passthrough": 4093.0 / 81364.0,
    }
    out["targets"] = evaluate(out)
    return out


def test_targets_are_judged_against_their_thresholds() -> None:
    targets = results()["targets"]
    assert targets["pipeline_obs_per_s"]["met"] is False
    assert targets["ratio_pipeline_passthrough"]["met"] is False
    assert targets["latency_p99_ms"]["met"] is True
    assert targets["worker_rss_mb_10k_devices"]["met"] is True
    assert targets["core_median_us"]["met"] is True


def test_rss_below_ten_thousand_devices_is_not_judged() -> None:
    out = results()
    out["rss"]["devices"] = 2100
    assert evaluate(out)["worker_rss_mb_10k_devices"]["met"] is None


def test_the_chart_has_a_bar_per_baseline_and_a_line_per_target() -> None:
    svg = render(results())
    for label in (
        "raw aiokafka passthrough",
        "faust floor (agent that only acks)",
        "inbox floor (batches, only acks)",
        "Guardian pipeline",
    ):
        assert label in svg
    assert "8,514" in svg and "4,093" in svg
    assert "✘ pipeline_obs_per_s" in svg and "✔ latency_p99_ms" in svg

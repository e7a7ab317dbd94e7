"""A measured window gives a figure only when it can: the benchmark cannot print nonsense."""

from __future__ import annotations

import pytest

from bench import windows
from bench.latency_run import Load, judge
from bench.sizes import FULL, QUICK, Sizes
from bench.timing import split_windows


def test_a_window_of_one_record_over_a_sixth_of_a_second_fails_naming_why() -> None:
    # the quick run of the issue: the worker drained 20,000 records in one or two batches before
    # its first ack line, and the bench printed "pipeline 6 obs/s"
    window = windows.throughput_from_acks([(100.00, 19_999), (100.16, 1)], expected=20_000)
    assert not window.valid
    assert window.rate is None
    assert window.as_dict()["records_per_s"] is None
    why = " / ".join(window.reasons)
    assert "1 record measured (at least 1,000 needed)" in why
    assert "the window holds 1 of the 20,000 records given" in why
    assert "0.16 s measured (at least 1 s needed)" in why
    assert "2 ack lines to time it by (at least 3 needed)" in why


def test_a_process_that_acked_everything_at_once_cannot_be_timed() -> None:
    window = windows.throughput_from_acks([(10.0, 26_658)], expected=26_658)
    assert not window.valid
    assert "1 ack line to time it by (at least 3 needed)" in window.reasons


def test_a_steady_window_gives_its_rate() -> None:
    marks = [(10.0, 5_000), (12.0, 18_000), (14.0, 18_000), (16.0, 18_000), (17.0, 9_000)]
    window = windows.throughput_from_acks(marks, expected=68_000)
    assert window.valid, window.reasons
    assert window.records == 63_000 and window.seconds == 7.0
    assert window.rate == 9_000.0


def test_a_window_whose_rate_changed_halfway_is_not_steady() -> None:
    # 20,000 records/s for 4 s, then 2,000 records/s for 4 s (a stall, a rebalance)
    marks = [(0.0, 1_000), (2.0, 40_000), (4.0, 40_000), (6.0, 4_000), (8.0, 4_000)]
    window = windows.throughput_from_acks(marks, expected=89_000)
    assert not window.valid
    (why,) = window.reasons
    assert why.startswith("the rate was not steady: 20,000 records/s in the first half of the window, 2,000")


def test_the_cpu_time_over_a_window_is_interpolated_from_the_samples() -> None:
    samples = [(0.0, 1.0), (1.0, 1.5), (3.0, 2.5), (4.0, 3.0)]
    assert windows.cpu_between(samples, 0.5, 3.5) == pytest.approx(1.5)
    assert windows.cpu_between(samples, -1.0, 3.0) is None  # not covered: no figure
    marks = [(1.0, 100), (2.0, 1_000), (3.0, 1_000)]
    timed = windows.acked_window(marks, 2_100, samples)
    assert timed["valid"] is True and timed["cpu_s"] == pytest.approx(1.0)
    assert timed["cpu_us_per_record"] == pytest.approx(500.0)


def test_the_latency_load_is_derived_from_a_valid_throughput_only() -> None:
    valid = windows.throughput_from_acks([(0.0, 10), (1.0, 4_000), (2.0, 4_000)], 8_010).as_dict()
    assert windows.latency_rate(valid, None) == 1_000.0  # a quarter of 4,000/s
    invalid = windows.throughput_from_acks([(100.0, 19_999), (100.16, 1)], 20_000).as_dict()
    with pytest.raises(windows.Refused, match=r"not valid: 1 record measured"):
        windows.latency_rate(invalid, None)
    with pytest.raises(windows.Refused, match="no throughput was measured"):
        windows.latency_rate(None, None)
    assert windows.latency_rate(invalid, 800.0) == 800.0  # the rate the user asked for


def sent_and_arrived(window_s: float, per_window: int) -> tuple[dict[str, float], dict[str, float]]:
    sent: dict[str, float] = {"warm": 0.5}
    arrived: dict[str, float] = {"warm": 0.9}
    for w in range(3):
        for i in range(per_window):
            event = f"w{w}-{i}"
            sent[event] = 1.0 + w * window_s + i * window_s / per_window
            arrived[event] = sent[event] + (0.020 if i else 0.080 + w / 10)  # one slow probe each
    return sent, arrived


def test_the_latency_part_reports_each_of_its_three_windows() -> None:
    sizes = Sizes(10, 10, 400, warmup_s=1.0, latency_s=10.0, probes_per_s=12.0, perf_records=1, micro_n=1)
    sent, arrived = sent_and_arrived(10.0, 120)
    load = Load(measured_from=1.0, sent_at=sent, arrived=arrived, background=[10_000, 10_000, 10_000])
    result = judge(load, sizes, rate=1_000.0)
    assert [w["window"] for w in result["windows"]] == [1, 2, 3]
    assert all(w["valid"] and w["matched"] == 120 for w in result["windows"])
    assert [w["max_ms"] for w in result["windows"]] == [80.0, 180.0, 280.0]
    assert result["warmup"]["matched"] == 1


def test_a_latency_window_with_too_few_probes_a_missing_dispatch_or_a_missed_load_is_not_valid() -> None:
    sizes = Sizes(10, 10, 400, warmup_s=1.0, latency_s=10.0, probes_per_s=12.0, perf_records=1, micro_n=1)
    sent, arrived = sent_and_arrived(10.0, 120)
    del arrived["w1-7"]  # a dispatch that never came
    load = Load(measured_from=1.0, sent_at=sent, arrived=arrived, background=[10_000, 10_000, 5_000])
    first, second, third = judge(load, sizes, rate=1_000.0)["windows"]
    assert first["valid"] and "p99_ms" in first
    assert not second["valid"] and "p99_ms" not in second
    assert second["reasons"] == ["1 probe never answered (a dispatch missing is no latency)"]
    assert not third["valid"]
    assert third["reasons"] == ["the load ran at 500 observations/s, not the 1,000 asked (within 10%)"]
    few = windows.check_latency_window(1, [20.0] * 99, 0, 1_000.0, 1_000.0, 10.0)
    assert few.reasons == ("99 probes answered (at least 100 needed)",)


def test_probes_are_split_into_windows_by_when_they_were_sent() -> None:
    sent = {"a": 0.5, "b": 1.0, "c": 10.99, "d": 11.0, "e": 31.0}
    arrived = {"a": 0.6, "b": 1.05, "c": 11.0, "e": 31.5}
    parts = split_windows(sent, arrived, first_from=1.0, seconds=10.0, count=2)
    assert [(sorted(round(x) for x in lat), missing) for lat, missing in parts] == [([10, 50], 0), ([], 1)]


@pytest.mark.parametrize("sizes", [QUICK, FULL], ids=["quick", "full"])
def test_every_latency_window_can_get_its_probes(sizes: Sizes) -> None:
    # one latency device per probe: a fleet too small would starve the last window
    assert sizes.windows == 3
    assert sizes.latency_devices >= sizes.probes
    assert sizes.probes_per_s * sizes.latency_s >= windows.MIN_PROBES

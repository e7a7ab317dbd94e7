"""The bench's console part: the console's core follows a replayed fleet's outputs, refusing none."""

from __future__ import annotations

from bench.console_bench import run_console_bench
from console.state import MAX_LANES_DEFAULT


def test_the_console_takes_every_output_of_a_replayed_fleet() -> None:
    figures = run_console_bench(3_000, 300)
    assert figures["devices"] == 300 and figures["records"] > 300
    # every record the pipeline writes matches its contract: the console refuses none of them
    assert figures["refused"] == 0
    assert 0 < figures["lanes_held"] <= MAX_LANES_DEFAULT
    assert figures["records_per_s"] > 0 and figures["rss_mb"] > 0

"""The benchmark times a measured process by the acks it reports, not by its (coarse) commits."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench.timing import ack_marks, probe_latencies


def write(path: Path, lines: list[dict[str, object]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def test_the_ack_lines_in_the_window_are_read_in_time_order(tmp_path: Path) -> None:
    path = tmp_path / "acks.jsonl"
    write(
        path,
        [
            {"kind": "acked", "at": 5.0, "records": 999},  # before the window: another process
            {"kind": "acked", "at": 12.0, "records": 800},
            {"kind": "dispatch", "trigger": "t1", "recv": 10.1},
            {"kind": "acked", "at": 10.0, "records": 300},
            {"kind": "acked", "at": 10.5, "records": 400},
            {"kind": "acked", "at": 30.0, "records": 50},  # after the window
        ],
    )
    path.write_bytes(path.read_bytes() + b'{"kind": "acked", "at": 1')  # a line cut by the stop
    assert ack_marks(path, since=9.0, until=20.0) == [(10.0, 300), (10.5, 400), (12.0, 800)]
    assert ack_marks(tmp_path / "missing.jsonl", since=0.0, until=100.0) == []


def test_probes_sent_while_the_load_warms_up_are_kept_apart_from_the_measured_ones() -> None:
    sent = {"a": 100.0, "b": 109.9, "c": 110.0, "d": 111.0, "e": 112.0}
    arrived = {"a": 100.5, "b": 110.0, "c": 110.02, "d": 111.05}  # e never arrived
    split = probe_latencies(sent, arrived, measured_from=110.0)
    assert [round(x) for x in split.warmup] == [500, 100]
    assert [round(x) for x in split.measured] == [20, 50]
    assert (split.warmup_missing, split.measured_missing) == (0, 1)
    assert split.measured_sent == {"c": 110.0, "d": 111.0, "e": 112.0}

"""`guardian replay` gives what the live run gave on hostile input: values that are not UTF-8 keep
their bytes through an export, a line is read within a bound, and a compressed input cannot
inflate past a bound of temporary disk."""

from __future__ import annotations

import dataclasses
import gzip
import io
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from guardian.kcat_json import kcat_line
from guardian.replay import replay_files, replay_records
from guardian.replay_input import (
    MAX_LINE_BYTES,
    InputRecord,
    LineTooLong,
    ReadMeter,
    ReplayInputError,
    SpoolBudget,
    bounded_lines,
    read_kcat_lines,
)
from tests.scenario_scripts import build
from tests.unit.replay_runs import replay
from topics.names import TopicNames

SETTINGS = Settings.from_env({})


def corrupted_plan() -> list[InputRecord]:
    """HG-05 (a patrol that returns with a decision and a spoken dispatch) whose plan holds a byte
    that is not UTF-8 inside its goal text: live, the plan is ``not_json`` and nothing follows."""
    records = build("HG-05").records
    plan = records[0]
    assert plan.suffix == "plans" and plan.value is not None
    bad = plan.value.replace(b'"goal_summary":"Check', b'"goal_summary":"\xffCheck', 1)
    assert bad != plan.value
    return [dataclasses.replace(plan, value=bad), *records[1:]]


def kcat_raw_line(r: InputRecord) -> bytes:
    """A line as kcat writes it: the value's bytes inside the JSON string as they are (its JSON
    generator escapes quotes, backslashes and control characters, and checks no UTF-8)."""
    head = orjson.dumps(
        {"topic": r.topic, "partition": r.partition, "offset": r.offset, "tstype": "create", "ts": r.ts}
    )[:-1]
    key = orjson.dumps(r.key.decode()) if r.key is not None else b"null"
    assert r.value is not None
    value = r.value.replace(b"\\", b"\\\\").replace(b'"', b'\\"')
    return head + b',"broker":1,"key":' + key + b',"payload":"' + value + b'"}'


def outputs(out: Path) -> dict[str, list[dict[str, object]]]:
    return {
        name: [orjson.loads(x) for x in (out / f"{name}.jsonl").read_bytes().splitlines()]
        for name in ("decisions", "dispatch", "timeline", "deadletter")
    }


# ----------------------------------------------------------------------------------------------
# values that are not UTF-8
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("writer", ["guardian export", "kcat"])
def test_a_value_that_is_not_utf8_replays_as_the_live_gate_judged_its_bytes(
    tmp_path: Path, writer: str
) -> None:
    records = corrupted_plan()
    # what the live worker makes of these bytes: the same gate and core over the bytes themselves
    live = replay_records(records, settings=SETTINGS)
    assert [d["reason_code"] for d in live.outs["deadletter"]] == ["not_json"]
    assert live.outs["decisions"] == [] and live.outs["dispatch"] == []
    to_line = (
        (lambda r: kcat_line(r.topic, r.partition, r.offset, r.ts, r.key, r.value))
        if (writer == "guardian export")
        else kcat_raw_line
    )
    source = tmp_path / "export.jsonl"
    source.write_bytes(b"".join(to_line(r) + b"\n" for r in records))
    assert [r.value for r in read_kcat_lines(source, TopicNames())] == [r.value for r in records]
    done = replay(str(source), "--out", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    assert outputs(tmp_path / "out") == live.outs


def test_guardian_export_keeps_the_file_utf8_and_escapes_only_the_bad_bytes() -> None:
    value = '방 \x01 "q" '.encode() + b"\xff\xc3(" + b"\xed\xb2\x80"
    line = kcat_line("guardian.observations", 0, 7, 1, b"k\xfe", value)
    text = line.decode("utf-8")  # valid UTF-8
    assert "방" in text and "\\udcff" in text and "\\udcfe" in text
    source = io.BytesIO(line + b"\n")
    assert list(bounded_lines(source)) == [line]


def test_a_lone_surrogate_that_names_no_byte_is_an_unreadable_line(tmp_path: Path) -> None:
    r = build("HG-01").records[0]
    good = kcat_line(r.topic, r.partition, r.offset, r.ts, r.key, r.value)
    bad = good.replace(b'"payload":"{', b'"payload":"\\ud800{', 1)
    source = tmp_path / "in.jsonl"
    source.write_bytes(good + b"\n" + bad + b"\n")
    with pytest.raises(ReplayInputError, match=f"{source}:2: .*lone surrogate"):
        list(read_kcat_lines(source, TopicNames()))


# ----------------------------------------------------------------------------------------------
# the line bound
# ----------------------------------------------------------------------------------------------
class CountingReader(io.RawIOBase):
    """An endless line (``a`` bytes, no newline) that counts what was read of it."""

    def __init__(self) -> None:
        self.served = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        n = len(buffer)
        buffer[:n] = b"a" * n
        self.served += n
        return n


def test_a_line_past_the_bound_stops_reading_once_the_bound_is_read() -> None:
    endless = CountingReader()
    with pytest.raises(LineTooLong) as caught:
        list(bounded_lines(io.BufferedReader(endless), limit=10_000, block=4096))
    assert caught.value.lineno == 1
    assert endless.served < 10_000 + 2 * 4096 + io.DEFAULT_BUFFER_SIZE


def test_a_gzip_holding_one_huge_line_is_unreadable_naming_file_and_line(tmp_path: Path) -> None:
    records = build("HG-05").records
    good = b"".join(kcat_line(r.topic, r.partition, r.offset, r.ts, r.key, r.value) + b"\n" for r in records)
    source = tmp_path / "bomb.jsonl.gz"
    with gzip.open(source, "wb", compresslevel=9) as fh:
        fh.write(good)
        chunk = b" " * (1 << 20)
        for _ in range(MAX_LINE_BYTES // len(chunk) + 2):  # one line past the bound (never ends)
            fh.write(chunk)
    assert source.stat().st_size < 100_000
    done = replay(str(source), "--out", str(tmp_path / "out"))
    assert done.returncode == 4, done.stderr
    assert f"{source}:{len(records) + 1}: line longer than {MAX_LINE_BYTES} bytes" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_record_as_large_as_kafka_takes_is_read_and_dead_lettered_too_large(tmp_path: Path) -> None:
    records = build("HG-01").records
    r = records[1]
    assert r.value is not None
    huge = dataclasses.replace(r, value=r.value[:-1] + b',"pad":"' + b"\x01" * 1_000_000 + b'"}')
    line = kcat_line(huge.topic, huge.partition, huge.offset, huge.ts, huge.key, huge.value)
    assert len(line) > 6_000_000  # every control byte is a six-character escape
    source = tmp_path / "in.jsonl"
    source.write_bytes(line + b"\n")
    [back] = read_kcat_lines(source, TopicNames())
    assert back.value == huge.value
    result = replay_records([back], settings=SETTINGS)
    assert [d["reason_code"] for d in result.outs["deadletter"]] == ["too_large"]


# ----------------------------------------------------------------------------------------------
# the temporary-disk bound
# ----------------------------------------------------------------------------------------------
def bomb(path: Path, copies: int) -> Path:
    """Valid, highly compressible lines: the same records again and again (new offsets)."""
    records = build("HG-05").records
    with gzip.open(path, "wb", compresslevel=9) as fh:
        for i in range(copies):
            for r in records:
                fh.write(kcat_line(r.topic, r.partition, r.offset + i * 100, r.ts, r.key, r.value) + b"\n")
    return path


def test_an_input_inflating_past_the_disk_bound_is_refused_in_one_line(tmp_path: Path) -> None:
    source = bomb(tmp_path / "bomb.jsonl.gz", 3000)
    budget = SpoolBudget(ReadMeter(), ratio=20, allowance=0)
    with pytest.raises(ReplayInputError, match=f"^{source}: refused: .*temporary disk") as caught:
        replay_files(
            [str(source)], tmp_path / "out", settings=SETTINGS, chunk_bytes=256 * 1024, budget=budget
        )
    assert "\n" not in str(caught.value)
    # refused as soon as the runs pass the bound: at most one chunk's run more than it
    assert budget.used <= 20 * budget.meter.stored + 2 * 256 * 1024
    assert not (tmp_path / "out" / "summary.json").exists()


def test_an_input_within_the_disk_bound_replays(tmp_path: Path) -> None:
    source = bomb(tmp_path / "fine.jsonl.gz", 300)
    budget = SpoolBudget(ReadMeter(), ratio=200, allowance=0)
    done = replay_files(
        [str(source)], tmp_path / "out", settings=SETTINGS, chunk_bytes=64 * 1024, budget=budget
    )
    assert done.records == 8 * 300
    assert budget.used > 0 and budget.meter.stored == source.stat().st_size

"""``guardian replay`` processes a device's records in the order the live worker can keep
(docs/CONTRACTS.md §2 rule 11), not in timestamp order: within a topic, offset order."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from guardian import replay as replay_mod
from guardian import replay_spool
from guardian.replay import InputRecord, replay_files, replay_records
from tests.streams import T0, Script
from tests.unit.kcat_exports import write

SETTINGS = Settings.from_env({})


def stamped_backwards() -> list[InputRecord]:
    """A device's ``security.started`` and, after it in the task-events partition, its patrol of an
    area stamped earlier (another device's bridge clock, a relay): the worker is handed them in
    offset order and can process them in no other."""
    script = Script(device_id="airbot-0001")
    script.start(experience_id="exp-1")
    script.wait(1_000).security_started()
    script.wait(1_000).patrol("2")
    records = list(script.records)
    records[-1] = dataclasses.replace(records[-1], ts=T0 + 500)
    return records


def stages(timeline: list[dict[str, object]]) -> list[tuple[object, object, object]]:
    return [(e["seq"], e["summary"], e["drop_reason"]) for e in timeline]


EXPECTED = [
    (1, "goal: adaptive_home_guardian (3 areas: 거실, 안방, 주방)", None),
    (2, "evidence: security.started", None),
    (3, "evidence: security.area_patrolled (거실)", None),
]


def test_a_devices_records_of_a_topic_are_replayed_in_offset_order_when_stamped_backwards() -> None:
    """By timestamp, the patrol would come first and ``security.started`` be dropped as
    ``out_of_order``: an order no live worker processes them in."""
    result = replay_records(stamped_backwards(), settings=SETTINGS)
    assert stages(result.outs["timeline"]) == EXPECTED


def test_the_streamed_replay_keeps_that_order_over_runs_and_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = stamped_backwards()
    # other devices around it, in other partitions and the same one, so the device's records are
    # spread over several runs
    for n in range(2, 40):
        other = Script(device_id=f"airbot-{n:04d}")
        other.start(experience_id=f"exp-{n}").wait(700).security_started().wait(900).patrol("3")
        records += [dataclasses.replace(r, partition=n % 3, offset=r.offset + 10 * n) for r in other.records]
    expected = replay_records(records, settings=SETTINGS)
    shuffled = list(records)
    random.Random(3).shuffle(shuffled)
    source = write(tmp_path / "in.jsonl", shuffled)
    monkeypatch.setattr(replay_spool, "MAX_FAN_IN", 3)
    for jobs in (1, 2):
        out = tmp_path / f"out-{jobs}"
        replay_files([str(source)], out, settings=SETTINGS, chunk_bytes=3000, jobs=jobs, report=False)
        timeline = [orjson.loads(line) for line in (out / "timeline.jsonl").read_bytes().splitlines()]
        mine = [e for e in timeline if e["device_id"] == "airbot-0001"]
        assert stages(mine) == EXPECTED, jobs
        assert sorted(timeline, key=orjson.dumps) == sorted(expected.outs["timeline"], key=orjson.dumps)


def test_jobs_two_write_the_lines_of_jobs_one_in_its_order_when_stamped_backwards(tmp_path: Path) -> None:
    """``--jobs N`` puts its jobs' lines back in the replay's order by position: order time, not the
    Kafka timestamp, comes first. Device X's patrol is stamped back but goes at its
    ``security.started``'s order time, after device Z's start (another job) in the partition."""
    x, q, z = "airbot-0004", "airbot-0005", "airbot-0001"
    assert [replay_mod.job_of(d.encode(), 2) for d in (x, q, z)] == [0, 0, 1]
    records: list[InputRecord] = []
    for n, (device, start_at, patrol_at) in enumerate(((x, 10, 20), (q, 15, None), (z, 17, None))):
        script = Script(device_id=device)
        script.start(experience_id=f"exp-{n}")
        script.wait(3_000).security_started()
        script.wait(1_000).patrol("2")
        plan, started, patrol = script.records
        records += [
            dataclasses.replace(plan, partition=0, offset=n),
            dataclasses.replace(started, partition=0, offset=start_at, ts=T0 + 3_000),
        ]
        if patrol_at is not None:
            records.append(dataclasses.replace(patrol, partition=0, offset=patrol_at, ts=T0 + 500))
    source = write(tmp_path / "in.jsonl", records)
    written = {}
    for jobs in (1, 2):
        out = tmp_path / f"out-{jobs}"
        replay_files([str(source)], out, settings=SETTINGS, jobs=jobs, report=False)
        written[jobs] = {p.name: p.read_bytes() for p in sorted(out.iterdir()) if p.suffix == ".jsonl"}
    evidence = [
        (e["device_id"], e["summary"])
        for e in map(orjson.loads, written[1]["timeline.jsonl"].splitlines())
        if e["stage"] == "evidence"
    ]
    assert [device for device, _ in evidence] == [x, q, z, x]
    assert written[2] == written[1]


def test_made_from_gives_the_earliest_and_latest_kafka_timestamps_not_the_first_and_last_replayed(
    tmp_path: Path,
) -> None:
    records = stamped_backwards()
    records[-1] = dataclasses.replace(records[-1], ts=T0 - 60_000)  # the earliest, replayed last
    done = replay_files([str(write(tmp_path / "in.jsonl", records))], tmp_path / "out", settings=SETTINGS)
    assert done.made_from["first_record_at"] == "2026-07-30T08:25:40.000Z"  # T0 - 60 s
    latest = max(r.ts for r in records)
    assert latest > T0 and done.made_from["last_record_at"].endswith(f"{latest % 60_000 / 1000:06.3f}Z")

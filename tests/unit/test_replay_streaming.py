"""`guardian replay` at scale: streaming over sorted runs, the batch merge, bounded memory, and --jobs."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import orjson
import pytest

from guardian import replay as replay_mod
from guardian import replay_engine, replay_spool, runs
from guardian.replay import InputRecord, ReplayEngine, replay_files, replay_records
from supervisor import rules
from tests.scenario_scripts import build
from tests.unit.kcat_exports import OUTS, SETTINGS, fleet, with_recorded_decisions, write
from tests.unit.replay_runs import replay
from topics.envelope import Out


# -- streaming -----------------------------------------------------------------------------------
def test_streamed_replay_over_unsorted_runs_equals_the_in_memory_replay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = with_recorded_decisions(fleet())
    expected = replay_records(records, settings=SETTINGS)
    shuffled = list(records)
    random.Random(7).shuffle(shuffled)  # no order at all: every chunk is a run of its own
    source = write(tmp_path / "in.jsonl", shuffled)
    monkeypatch.setattr(replay_spool, "MAX_FAN_IN", 3)  # and runs merged in more than one pass
    done = replay_files([str(source)], tmp_path / "out", settings=SETTINGS, chunk_bytes=4000, report=False)
    out = tmp_path / "out"
    for kind in ("decisions", "dispatch", "timeline", "deadletter"):
        assert (out / f"{kind}.jsonl").read_bytes() == b"".join(
            orjson.dumps(v) + b"\n" for v in expected.outs[kind]
        ), kind
    assert done.summary == expected.summary
    assert done.records == sum(1 for r in records if r.suffix != "decisions")
    assert not list(tmp_path.glob("**/run-*"))


def test_the_batch_merge_gives_every_row_once_in_order_whatever_the_batches() -> None:
    rng = random.Random(11)
    for trial in range(200):
        rows = [
            (
                rng.randrange(50),
                rng.randrange(4),
                rng.randrange(3),
                rng.randrange(100),
                seq,
                "observations",
                "t",
                None,
                None,
                True,
            )
            for seq in range(rng.randrange(0, 400))
        ]
        # dealt to up to six sources, each sorted and cut into batches of any size (empty ones too)
        dealt: list[list[tuple[Any, ...]]] = [[] for _ in range(rng.randrange(1, 7))]
        for row in rows:
            dealt[rng.randrange(len(dealt))].append(row)
        sources = []
        for share in dealt:
            share.sort()
            batches, i = [], 0
            while i < len(share) or rng.random() < 0.2:
                n = rng.randrange(0, 40)
                batches.append(share[i : i + n])
                i += n
            sources.append(iter(batches))
        merged = [row for batch in runs.merge_batches(sources) for row in batch]
        assert merged == sorted(rows), trial


def test_the_dedup_memory_keeps_only_the_window_and_still_catches_duplicates() -> None:
    script = build("HG-01")
    emitted: list[Out] = []
    engine = ReplayEngine(SETTINGS, rules.decide, emitted.append)
    window = engine.processor.pipeline.dedup_window_ms
    rows = replay_engine.input_rows(script.records)
    engine.feed(rows)
    t = rows[-1][0]
    base = script.records[0]
    n_windows = 4
    per_window = 3000  # one observation every 200 ms
    step = window // per_window
    dup_ts: list[int] = []
    more = []
    for i in range(n_windows * per_window):
        t += step
        value = {
            "event_id": f"obs_late_{i:06d}",
            "device_id": "airbot-0001",
            "type": "network.aws_iot_session_changed",
            "source": "DeviceAgent.Test",
            "observed_at_ms": t - 10,
            "freshness_ms": 20,
            "privacy_class": "semantic_only",
            "facts": {"connected": True, "session_state": "connected"},
        }
        more.append(
            (
                t,
                3,
                0,
                100_000 + i,
                10**6 + i,
                "observations",
                "guardian.observations",
                base.key,
                orjson.dumps(value),
                True,
                t,
            )
        )
        if i % 1000 == 999:  # the previous record sent again: a duplicate within the window
            t += step
            dup_ts.append(t)
            more.append((t, 3, 0, 200_000 + i, 2 * 10**6 + i, *more[-1][5:8], more[-1][8], True, t))
    engine.feed(more)
    # the last window's keys, and those since the last sweep (not the 12,000 seen)
    assert len(engine.store.seen_at) <= per_window + replay_engine.SWEEP_EVERY < n_windows * per_window
    duplicates = [o for o in emitted if o.kind == "timeline" and o.value["drop_reason"] == "duplicate"]
    assert [o.value["at_ms"] for o in duplicates] == dup_ts


def test_replay_keeps_one_copy_of_the_parts_plans_have_in_common() -> None:
    from pipeline.runner import ReplayStore
    from tables.state import ExperienceState

    def plan(device: str, policy: dict[str, object]) -> dict[str, object]:
        return {
            "experience_id": f"exp_{device}",
            "areas": ["2", "3"],
            "steps": [{"step_id": "patrol", "args": {"area_ids": ["2", "3"]}}],
            "observation_policy": policy,
        }

    def experience(device: str, policy: dict[str, object]) -> ExperienceState:
        return ExperienceState(f"exp_{device}", device, f"wf_{device}", plan(device, policy))

    store = ReplayStore()
    a = experience("a", {"subscriptions": ["x"], "mode": "semantic"})
    b = experience("b", {"subscriptions": ["x"], "mode": "semantic"})
    c = experience("c", {"mode": "semantic", "subscriptions": ["x"]})  # the same keys, other order
    for exp in (a, b, c):
        store.put_experience(exp)
    # equal parts are one object; a part whose keys come in another order is kept as it came
    assert a.plan["steps"] is b.plan["steps"] is c.plan["steps"]
    assert a.plan["observation_policy"] is b.plan["observation_policy"]
    assert c.plan["observation_policy"] is not a.plan["observation_policy"]
    # and each plan is encoded byte for byte as it came
    for exp, device, policy in (
        (a, "a", {"subscriptions": ["x"], "mode": "semantic"}),
        (c, "c", {"mode": "semantic", "subscriptions": ["x"]}),
    ):
        assert orjson.dumps(exp.plan) == orjson.dumps(plan(device, policy))
    # a state put again with the plan it has is not shared again; a new plan of the device is
    kept = a.plan
    store.put_experience(a)
    assert a.plan is kept
    a2 = experience("a", {"subscriptions": ["y"], "mode": "semantic"})
    store.put_experience(a2)
    assert a2.plan["steps"] is b.plan["steps"]
    assert store.get_experience("a") is a2


# -- --jobs ------------------------------------------------------------------------------------
def test_jobs_two_give_the_same_outputs_as_one_byte_for_byte(tmp_path: Path) -> None:
    records = with_recorded_decisions(fleet())
    source = write(tmp_path / "in.jsonl", records)
    same_time = {"SOURCE_DATE_EPOCH": "1785400000"}  # summary.json's made_at: the only wall-clock value
    one = replay(str(source), "--out", str(tmp_path / "one"), "--jobs", "1", env=same_time)
    two = replay(str(source), "--out", str(tmp_path / "two"), "--jobs", "2", env=same_time)
    assert one.returncode == 0 and two.returncode == 0, one.stderr + two.stderr
    assert one.stdout.replace("/one", "") == two.stdout.replace("/two", "")
    for name in (*OUTS, "divergences.jsonl", "summary.json"):
        a, b = (tmp_path / "one" / name).read_bytes(), (tmp_path / "two" / name).read_bytes()
        assert a == b, name  # the same lines in the same order
        assert a, name
    assert (
        len(
            {
                orjson.loads(line)["device_id"]
                for line in (tmp_path / "two" / "decisions.jsonl").read_bytes().splitlines()
            }
        )
        > 2
    )
    letters = orjson.loads((tmp_path / "two" / "summary.json").read_bytes())["deadletter_reasons"]
    assert letters.get("cross_device") == 2  # HG-12: B's records in one job, A's plan in the other
    split = {replay_mod.job_of(f"airbot-{p:04d}".encode(), 2) for p in range(6)}
    assert split == {0, 1}


def test_jobs_two_write_every_divergence_in_the_order_of_one(tmp_path: Path) -> None:
    # unreadable recorded decisions (no device known) routed to both jobs, the later offsets in the
    # job whose file comes first, and a device's divergences of several kinds
    records = with_recorded_decisions(fleet())
    for offset, device in ((9_003, "airbot-0005"), (9_001, "airbot-0000"), (9_002, "airbot-0004")):
        records.append(InputRecord("decisions", "guardian.decisions", 1, offset, 1, device.encode(), b"[]"))
    source = write(tmp_path / "in.jsonl", records)
    for jobs in (1, 2):
        replay_files([str(source)], tmp_path / f"j{jobs}", settings=SETTINGS, jobs=jobs, report=False)
    one, two = ((tmp_path / f"j{n}" / "divergences.jsonl").read_bytes() for n in (1, 2))
    assert one == two
    entries = [orjson.loads(x) for x in one.splitlines()]
    devices = [d["device_id"] for d in entries]
    named = [d for d in devices if d is not None]
    assert named == sorted(named) and devices[len(named) :] == [None] * 3  # by device, unreadable last
    assert [d["offset"] for d in entries[len(named) :]] == [9_001, 9_002, 9_003]
    assert {d["kind"] for d in entries} >= {"different", "unreadable_recorded_decision"}


def test_jobs_below_one_is_a_one_line_error(tmp_path: Path) -> None:
    source = write(tmp_path / "in.jsonl", build("HG-01").records)
    done = replay(str(source), "--out", str(tmp_path / "out"), "--jobs", "0")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("guardian replay:") and "--jobs" in lines[0]

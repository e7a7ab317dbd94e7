"""Live == replay, extended: the prompts a live worker sends its model equal, byte for byte, those
``guardian replay --decisions model`` sends for an export of the same records; and records holding
bytes that are not UTF-8 give the same outputs live and replayed from ``guardian export`` and from
kcat."""

# ruff: noqa: F811  (pytest fixtures imported from tests.gemini_stub are test arguments)

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from guardian import replay as replay_mod
from guardian.replay import InputRecord, replay_records
from supervisor.gemini import GeminiOptions
from supervisor.sync import blocking_model_decider
from tests.gemini_stub import GeminiStub, answer, gemini_env, gemini_stub  # noqa: F401
from tests.live import (
    Outputs,
    WorkerProcess,
    all_ended,
    assert_single_content,
    collect,
    kcat_export,
    produce,
    run_guardian,
)
from tests.scenario_scripts import build
from tests.streams import Script
from topics.envelope import Out
from topics.names import TopicNames

pytestmark = pytest.mark.kafka

SETTINGS = Settings.from_env({})


def read_outputs(out_dir: Path) -> dict[str, list[dict[str, Any]]]:
    return {
        kind: [orjson.loads(x) for x in (out_dir / f"{kind}.jsonl").read_bytes().splitlines()]
        for kind in ("decisions", "dispatch", "timeline", "deadletter")
    }


def letters(values: list[dict[str, Any]]) -> list[tuple[str, str | None, str]]:
    return sorted((d["reason_code"], d["key"], d["payload_sha256"]) for d in values)


# ----------------------------------------------------------------------------------------------
# the model's prompts
# ----------------------------------------------------------------------------------------------
def model_records(prefix: str, t0: int) -> list[InputRecord]:
    """HG-15 (a model decision on a device with device context), then on a second device a low-light
    change confirmed by a later condition record (decided on the state after that record)."""
    first = build("HG-15", device_id="dev-model-a", prefix=prefix, t0=t0).records
    s = Script(device_id="dev-model-b", prefix=prefix, t=max(r.ts for r in first) + 1_000)
    s.start().wait(500).security_started().wait(800).patrol("2").fresh_context()
    s.wait(700).obs("vision.low_light_changed", {"low_light": True})
    s.wait(2100).obs("security.condition_changed", {"battery": "ok", "network": "degraded"})
    return [*first, *s.records]


def decisions_after_each(records: list[InputRecord], stub: GeminiStub) -> list[int]:
    """How many decisions replay has made after each record (a live run waits for them before it
    sends the next record: the model answers before the device's next record, as replay assumes)."""
    made: list[int] = []
    count = [0]

    def emit(o: Out) -> None:
        count[0] += o.kind == "decisions"

    options = GeminiOptions.from_env({})
    with blocking_model_decider(SETTINGS, options=options, api_key="test", base_url=stub.base_url) as model:
        engine = replay_mod.ReplayEngine(SETTINGS, None, emit, model=model)
        for r in records:  # one at a time, as the live run sends them
            engine.feed(replay_mod.input_rows([r]))
            made.append(count[0])
        engine.finish()
    assert count[0] == made[-1], "a decision at the end of the input: live would take it by its timer"
    return made


def test_live_and_replay_ask_the_model_the_same_prompts_byte_for_byte(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    gemini_stub: GeminiStub,
    tmp_path: Path,
) -> None:
    names = TopicNames(topic_prefix)
    gemini_stub.default = answer("continue", "model_noted", "Noted.")
    # receive times ten minutes ahead: the quiet-device timer (on the wall clock) confirms nothing
    # pending while the test runs, so every change is confirmed by a record, as in the replay
    records = model_records(topic_prefix, int(time.time() * 1000) + 600_000)
    expected = decisions_after_each(records, gemini_stub)
    assert expected[-1] >= 2
    env = gemini_env(guardian_env, gemini_stub)
    mark = len(gemini_stub.requests)
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        for r, want in zip(records, expected, strict=True):
            asyncio.run(produce(kafka_bootstrap, [r], in_order=True))
            if want:

                def decided(out: Outputs, want: int = want) -> bool:
                    return len(assert_single_content(out.values["decisions"], "decision_id")) >= want

                asyncio.run(collect(kafka_bootstrap, names, decided, timeout_s=90, settle_s=0))
        live = asyncio.run(collect(kafka_bootstrap, names, lambda o: True, timeout_s=30, settle_s=2.0))
    finally:
        worker.stop()
    live_prompts = [req.raw for req in gemini_stub.requests[mark:]]
    assert len(live_prompts) == expected[-1], worker.log_tail()

    export = tmp_path / "export.jsonl"
    done = run_guardian(guardian_env, "export", "--out", str(export), timeout_s=120)
    assert done.returncode == 0, done.stderr
    mark = len(gemini_stub.requests)
    out_dir = tmp_path / "what-if"
    done = run_guardian(
        env, "replay", str(export), "--out", str(out_dir), "--decisions", "model", timeout_s=300
    )
    assert done.returncode == 0, done.stderr
    replay_prompts = [req.raw for req in gemini_stub.requests[mark:]]
    assert replay_prompts == live_prompts
    contexts = [orjson.loads(orjson.loads(p)["contents"][0]["parts"][0]["text"]) for p in live_prompts]
    assert all("domains" in c for c in contexts) and any("device_context" in c for c in contexts)
    # and the same decisions (the live lane dates its verdicts by the wall clock: left out)
    fields = ("decision_id", "decision", "reason_code", "backend", "state_etag", "budget_after")
    replayed = [{f: d[f] for f in fields} for d in read_outputs(out_dir)["decisions"]]
    live_decisions = assert_single_content(live.values["decisions"], "decision_id").values()
    assert sorted(replayed, key=str) == sorted(({f: d[f] for f in fields} for d in live_decisions), key=str)


# ----------------------------------------------------------------------------------------------
# values that are not UTF-8
# ----------------------------------------------------------------------------------------------
def utf8_records(prefix: str, t0: int) -> list[InputRecord]:
    """Two patrols. The first's plan holds a byte that is not UTF-8 in its goal text (``not_json``:
    the experience never starts); the second runs, with an observation and a task event whose
    values hold such bytes and a record whose key does."""
    bad = build("HG-05", device_id="dev-utf8-a", prefix=prefix, t0=t0).records
    plan = bad[0]
    assert plan.suffix == "plans" and plan.value is not None
    corrupt = plan.value.replace(b'"goal_summary":"', b'"goal_summary":"\xff', 1)
    bad[0] = dataclasses.replace(plan, value=corrupt)
    good = build("HG-05", device_id="dev-utf8-b", prefix=prefix, t0=t0 + 50).records
    extra: list[InputRecord] = []
    for i, r in enumerate(good):
        if r.suffix in ("observations", "task-events") and r.value is not None and i % 2 == 1:
            extra.append(dataclasses.replace(r, ts=r.ts + 1, value=r.value.replace(b'"', b'"\xc3(', 3)))
            extra.append(dataclasses.replace(r, ts=r.ts + 2, key=b"dev-utf8-b\xed\xa0\x80", value=r.value))
    records = sorted([*bad, *good, *extra], key=lambda r: r.ts)
    return records


def test_values_that_are_not_utf8_give_the_same_outputs_live_and_replayed(
    kafka_bootstrap: str, topic_prefix: str, guardian_env: dict[str, str], tmp_path: Path
) -> None:
    names = TopicNames(topic_prefix)
    records = utf8_records(topic_prefix, int(time.time() * 1000) - 120_000)
    want = replay_records(records, settings=SETTINGS)
    assert want.summary["deadletter_reasons"].get("not_json", 0) >= 3
    statuses = dict(want.summary["experiences"])
    assert list(statuses.values()) == ["returned"]  # only the second patrol started

    def done(out: Outputs) -> bool:
        return all_ended(statuses)(out) and len(out.values["deadletter"]) >= len(want.outs["deadletter"])

    worker = WorkerProcess(guardian_env, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce(kafka_bootstrap, records, in_order=True))
        live = asyncio.run(collect(kafka_bootstrap, names, done, timeout_s=120))
    finally:
        worker.stop()
    assert live.statuses() == statuses, worker.log_tail()
    located = [
        {**d, "at": f"{d['source_topic']}:{d['partition']}:{d['offset']}"} for d in live.values["deadletter"]
    ]
    live_letters = letters(list(assert_single_content(located, "at").values()))
    assert live_letters == letters(want.outs["deadletter"])

    ours = tmp_path / "ours.jsonl"
    exported = run_guardian(guardian_env, "export", "--out", str(ours), timeout_s=120)
    assert exported.returncode == 0, exported.stderr
    ours.read_bytes().decode("utf-8")  # guardian export keeps the file valid UTF-8
    theirs = tmp_path / "kcat.jsonl"
    theirs.write_bytes(kcat_export(kafka_bootstrap, names))
    for source in (ours, theirs):
        out_dir = tmp_path / f"replay-{source.stem}"
        replayed = run_guardian(guardian_env, "replay", str(source), "--out", str(out_dir), timeout_s=120)
        assert replayed.returncode == 0, replayed.stderr
        outs = read_outputs(out_dir)
        summary = orjson.loads((out_dir / "summary.json").read_bytes())
        assert summary["experiences"] == statuses, source
        assert letters(outs["deadletter"]) == live_letters, source
        assert {d["decision_id"]: d for d in outs["decisions"]} == assert_single_content(
            live.values["decisions"], "decision_id"
        )
        assert {d["dispatch_id"]: d for d in outs["dispatch"]} == assert_single_content(
            live.values["dispatch"], "dispatch_id"
        )

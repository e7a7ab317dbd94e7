"""Replay inputs as kcat exports: a record's line, an export file (of records or of a scenario), a fleet,
recorded decisions, outputs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson

from config.settings import Settings
from guardian.replay import InputRecord, replay_records
from tests.scenario_scripts import build, hg12

SETTINGS = Settings.from_env({})
OUTS = ("decisions.jsonl", "dispatch.jsonl", "timeline.jsonl", "deadletter.jsonl")


def line(r: InputRecord, **override: object) -> bytes:
    obj: dict[str, object] = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "tstype": "create",
        "ts": r.ts,
        "broker": 1,
        "key": r.key.decode() if r.key is not None else None,
        "payload": r.value.decode() if r.value is not None else None,
    }
    obj.update(override)
    return orjson.dumps(obj)


def write(path: Path, records: list[InputRecord]) -> Path:
    path.write_bytes(b"".join(line(r) + b"\n" for r in records))
    return path


def kcat_file(path: Path, scenario: str) -> Path:
    lines = []
    for r in build(scenario).records:
        lines.append(
            orjson.dumps(
                {
                    "topic": r.topic,
                    "partition": r.partition,
                    "offset": r.offset,
                    "tstype": "create",
                    "ts": r.ts,
                    "broker": 1,
                    "key": r.key.decode() if r.key else None,
                    "payload": r.value.decode() if r.value is not None else None,
                }
            )
        )
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def fleet() -> list[InputRecord]:
    """Several devices (one partition each, as Kafka would place them), HG-12's two included."""
    records: list[InputRecord] = []
    for p, scenario in enumerate(("HG-01", "HG-03", "HG-05", "HG-07", "HG-09", "HG-11")):
        script = build(scenario, device_id=f"airbot-{p:04d}")
        records += [dataclasses.replace(r, partition=p + 2) for r in script.records]
    a, b = hg12()
    records += [dataclasses.replace(r, partition=0) for r in a.records]
    records += [dataclasses.replace(r, partition=1) for r in b.records]
    return records


def with_recorded_decisions(records: list[InputRecord]) -> list[InputRecord]:
    """The records plus the decisions a live run recorded for them (one tampered with)."""
    live = replay_records(records, settings=SETTINGS)
    out = list(records)
    for i, d in enumerate(live.outs["decisions"]):
        if i == 1:
            d = dict(d, state_etag="e_tampered")
        out.append(
            InputRecord(
                "decisions",
                "guardian.decisions",
                0,
                i,
                d["decided_at_ms"],
                d["device_id"].encode(),
                orjson.dumps(d),
            )
        )
    return out


def outputs(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in OUTS if (out / name).exists()}

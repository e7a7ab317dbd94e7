"""``guardian replay FILE... --out DIR`` (CONTRACTS.md §12): the live pipeline's logic, offline.

Reads ``kcat -C -J`` lines, orders the input records by Kafka timestamp (ties: plans,
device-context, task-events, observations, then partition and offset), runs them through the very
same :class:`pipeline.runner.Processor` the worker runs, confirms still-pending debounce changes at
the end, and writes the outputs, ``summary.json`` and ``report.html``.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from guardian.exitcodes import Exit
from guardian.settings import Settings
from pipeline.core import Decider, Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from supervisor.verdict import DECISIONS, Verdict
from tables.state import ExperienceState, Trigger
from topics.envelope import Out
from topics.names import INPUT_SUFFIXES, TopicNames
from topics.registry import load_registry

_TIE_ORDER = {suffix: i for i, suffix in enumerate(INPUT_SUFFIXES)}


class ReplayInputError(ValueError):
    """An input file or line cannot be read; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class InputRecord:
    suffix: str
    topic: str
    partition: int
    offset: int
    ts: int
    key: bytes | None
    value: bytes | None


def read_kcat_lines(path: Path, names: TopicNames) -> Iterator[InputRecord]:
    """Records of one ``kcat -C -J`` file; a line that is not such a record raises ReplayInputError."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise ReplayInputError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    with handle:
        for lineno, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                obj = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ReplayInputError(f"{where}: not a JSON line ({exc})") from exc
            if not isinstance(obj, dict):
                raise ReplayInputError(f"{where}: not a JSON object")
            topic = obj.get("topic")
            partition, offset, ts = obj.get("partition"), obj.get("offset"), obj.get("ts")
            if not isinstance(topic, str) or not all(isinstance(x, int) for x in (partition, offset, ts)):
                raise ReplayInputError(
                    f"{where}: needs string 'topic' and integer 'partition', 'offset', 'ts'"
                )
            key, payload = obj.get("key"), obj.get("payload")
            if key is not None and not isinstance(key, str):
                raise ReplayInputError(f"{where}: 'key' must be a string or null")
            if payload is not None and not isinstance(payload, str):
                raise ReplayInputError(f"{where}: 'payload' must be a string or null")
            suffix = names.suffix_of(topic)
            if suffix is None:
                continue
            yield InputRecord(
                suffix=suffix,
                topic=topic,
                partition=int(partition),  # type: ignore[arg-type]
                offset=int(offset),  # type: ignore[arg-type]
                ts=int(ts),  # type: ignore[arg-type]
                key=key.encode("utf-8") if key is not None else None,
                value=payload.encode("utf-8") if payload is not None else None,
            )


@dataclass
class RecordedDecisions:
    """Decisions found in the input, by (experience_id, trigger_event_id)."""

    by_trigger: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    @classmethod
    def from_records(cls, records: Iterable[InputRecord]) -> RecordedDecisions:
        found = cls()
        for r in records:
            if r.suffix != "decisions" or r.value is None:
                continue
            try:
                d = orjson.loads(r.value)
            except orjson.JSONDecodeError:
                continue
            if isinstance(d, dict) and isinstance(d.get("experience_id"), str):
                found.by_trigger[(d["experience_id"], str(d.get("trigger_event_id")))] = d
        return found


@dataclass
class RecordedDecider:
    """Reuses recorded decisions for the same triggers; the rules decide (and it is reported) otherwise."""

    recorded: RecordedDecisions
    missing: list[str] = field(default_factory=list)

    def __call__(self, exp: ExperienceState, trigger: Trigger) -> Verdict:
        d = self.recorded.by_trigger.get((exp.experience_id, trigger.event_id))
        if d is None or d.get("decision") not in DECISIONS:
            self.missing.append(trigger.event_id)
            return rules.decide(exp, trigger)
        return Verdict(
            decision=d["decision"],
            reason_code=str(d.get("reason_code", "recorded")),
            rationale=str(d.get("rationale", "")),
            backend=d.get("backend", "rules")
            if d.get("backend") in ("rules", "gemini", "fallback")
            else "rules",
        )


@dataclass
class ReplayResult:
    outs: dict[str, list[dict[str, Any]]]
    summary: dict[str, Any]
    divergences: list[dict[str, Any]]


def replay_records(
    records: list[InputRecord],
    *,
    settings: Settings,
    mode: str | None = None,
    model_decider: Decider | None = None,
) -> ReplayResult:
    """Run input records through the live pipeline's logic; pure apart from the registry load."""
    registry = load_registry(settings.contracts_file, settings.capabilities_file)
    recorded = RecordedDecisions.from_records(records)
    if mode is None:
        mode = "recorded" if recorded.by_trigger else "rules"
    decider: Decider
    recorded_decider: RecordedDecider | None = None
    if mode == "recorded":
        recorded_decider = RecordedDecider(recorded)
        decider = recorded_decider
    elif mode == "model":
        if model_decider is None:
            raise ReplayInputError(
                "--decisions model needs GUARDIAN_SUPERVISOR=gemini and a configured model"
            )
        decider = model_decider
    else:
        decider = rules.decide
    processor = Processor(registry, Pipeline(registry, language=settings.language), decider)
    store = MemoryStore()
    inputs = sorted(
        (r for r in records if r.suffix in _TIE_ORDER),
        key=lambda r: (r.ts, _TIE_ORDER[r.suffix], r.partition, r.offset),
    )
    outs: dict[str, list[dict[str, Any]]] = {
        k: [] for k in ("decisions", "dispatch", "timeline", "deadletter")
    }

    def collect(items: list[Out]) -> None:
        for o in items:
            outs[o.kind].append(o.value)

    for r in inputs:
        done = processor.process(
            store,
            r.suffix,
            r.key,
            r.value,
            source_topic=r.topic,
            partition=r.partition,
            offset=r.offset,
            received_at_ms=r.ts,
        )
        collect(done.outs)
    for device_id in sorted(store.devices):
        collect(processor.confirm_quiet(store, device_id, None).outs)
    divergences = _divergences(recorded, outs["decisions"]) if mode == "recorded" else []
    if recorded_decider is not None:
        for event_id in recorded_decider.missing:
            divergences.append({"trigger_event_id": event_id, "kind": "no_recorded_decision"})
    summary = build_summary(outs, mode)
    summary["divergences"] = len(divergences)
    return ReplayResult(outs=outs, summary=summary, divergences=divergences)


def _divergences(recorded: RecordedDecisions, produced: list[dict[str, Any]]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for d in produced:
        key = (d["experience_id"], d["trigger_event_id"])
        seen.add(key)
        rec = recorded.by_trigger.get(key)
        if rec is None:
            continue
        for fld in ("decision_id", "decision", "reason_code", "backend", "state_etag", "budget_after"):
            if rec.get(fld) != d.get(fld):
                found.append(
                    {
                        "trigger_event_id": d["trigger_event_id"],
                        "kind": "different",
                        "field": fld,
                        "recorded": rec.get(fld),
                        "replayed": d.get(fld),
                    }
                )
    for key, rec in recorded.by_trigger.items():
        if key not in seen:
            found.append(
                {"trigger_event_id": key[1], "kind": "not_reproduced", "recorded": rec.get("decision_id")}
            )
    return found


def build_summary(outs: dict[str, list[dict[str, Any]]], mode: str) -> dict[str, Any]:
    """Counts per output and per drop reason, and each experience's status (§12)."""
    experiences: dict[str, str] = {}
    for entry in outs["timeline"]:
        exp_id = entry.get("experience_id")
        if not exp_id:
            continue
        if entry.get("stage") == "goal":
            experiences.setdefault(exp_id, "active")
        elif entry.get("stage") == "end":
            experiences[exp_id] = str(entry.get("status"))
    drops = Counter(e["drop_reason"] for e in outs["timeline"] if e.get("stage") == "drop")
    return {
        "decisions_mode": mode,
        "counts": {k: len(v) for k, v in outs.items()},
        "drop_reasons": dict(sorted(drops.items())),
        "deadletter_reasons": dict(sorted(Counter(d["reason_code"] for d in outs["deadletter"]).items())),
        "decisions_by_kind": dict(sorted(Counter(d["decision"] for d in outs["decisions"]).items())),
        "decisions_by_backend": dict(sorted(Counter(d["backend"] for d in outs["decisions"]).items())),
        "experiences": dict(sorted(experiences.items())),
    }


def write_outputs(result: ReplayResult, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {"decisions": "decisions.jsonl", "dispatch": "dispatch.jsonl", "timeline": "timeline.jsonl"}
    files["deadletter"] = "deadletter.jsonl"
    for kind, name in files.items():
        with (out_dir / name).open("wb") as fh:
            for value in result.outs[kind]:
                fh.write(orjson.dumps(value) + b"\n")
    (out_dir / "summary.json").write_bytes(orjson.dumps(result.summary, option=orjson.OPT_INDENT_2))
    if result.divergences:
        with (out_dir / "divergences.jsonl").open("wb") as fh:
            for d in result.divergences:
                fh.write(orjson.dumps(d) + b"\n")
    write_report(out_dir)


def write_report(out_dir: Path) -> Path | None:
    """The incident report next to the outputs (report.html)."""
    from report.html import render_report_from_dir

    return render_report_from_dir(out_dir)


def cmd_replay(args: argparse.Namespace, settings: Settings) -> int:
    names = TopicNames(settings.topic_prefix)
    try:
        records: list[InputRecord] = []
        for f in args.files:
            records.extend(read_kcat_lines(Path(f), names))
        if args.decisions == "model":
            from supervisor.sync import blocking_model_decider

            with blocking_model_decider(settings) as decider:
                result = replay_records(records, settings=settings, mode="model", model_decider=decider)
        else:
            result = replay_records(records, settings=settings, mode=args.decisions)
    except ReplayInputError as exc:
        print(f"guardian replay: {exc}", file=sys.stderr)
        return Exit.BAD_INPUT
    out_dir = Path(args.out)
    write_outputs(result, out_dir)
    s = result.summary
    print(
        f"replayed {len(records)} records: {s['counts']['decisions']} decisions, "
        f"{s['counts']['dispatch']} dispatches, {s['counts']['timeline']} timeline entries, "
        f"{s['counts']['deadletter']} dead letters; {len(s['experiences'])} experiences; "
        f"{len(result.divergences)} divergences -> {out_dir}"
    )
    return 0

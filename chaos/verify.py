"""A chaos run's verdict: the live outputs against ``guardian replay`` of the same input records.

:func:`compare` is pure (outputs in, problems out); :func:`export_and_replay` runs ``guardian
export`` and ``guardian replay`` as a user would. The live run passes when

- no decision, dispatch, timeline entry or dead letter is published with two different contents
  (at-least-once delivery may publish identical copies: counted, not a fault);
- every one of them equals replay's, and none is missing or extra: decisions and dispatches by ID,
  timeline entries by device and ``seq`` (so a different processing order shows), dead letters by
  the record they are about;
- every experience ends in replay's status.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from topics.names import INPUT_SUFFIXES, OUTPUT_SUFFIXES

Identity = Callable[[dict[str, Any]], str]

IDENTITIES: dict[str, Identity] = {
    "decisions": lambda v: str(v.get("decision_id")),
    "dispatch": lambda v: str(v.get("dispatch_id")),
    "timeline": lambda v: f"{v.get('device_id')}#{v.get('seq')}",
    "deadletter": lambda v: f"{v.get('source_topic')}:{v.get('partition')}:{v.get('offset')}",
}
#: problems listed per kind before the rest are only counted
SHOWN = 5


@dataclass
class Verdict:
    """What :func:`compare` found."""

    problems: list[str] = field(default_factory=list)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems


def statuses(timeline: Iterable[dict[str, Any]]) -> dict[str, str]:
    """Each experience's status as its timeline shows it (``active`` until its ``end``)."""
    found: dict[str, str] = {}
    for e in timeline:
        exp = e.get("experience_id")
        if not exp:
            continue
        if e.get("stage") == "end":
            found[str(exp)] = str(e.get("status"))
        else:
            found.setdefault(str(exp), "active")
    return found


def compare(
    live: dict[str, list[dict[str, Any]]],
    replayed: dict[str, list[dict[str, Any]]],
    replayed_statuses: dict[str, str],
) -> Verdict:
    verdict = Verdict()
    for kind, ident in IDENTITIES.items():
        mine: dict[str, dict[str, Any]] = {}
        conflicts: list[str] = []
        copies = 0
        for value in live.get(kind, []):
            key = ident(value)
            if key in mine:
                copies += 1
                if mine[key] != value and len(conflicts) < SHOWN:
                    conflicts.append(f"{kind} {key} published with two contents: {mine[key]} / {value}")
                continue
            mine[key] = value
        want = {ident(v): v for v in replayed.get(kind, [])}
        missing = sorted(set(want) - set(mine))
        extra = sorted(set(mine) - set(want))
        differ = sorted(k for k in set(want) & set(mine) if want[k] != mine[k])
        verdict.counts[kind] = {
            "live": len(mine),
            "replay": len(want),
            "identical_copies": copies,
            "missing": len(missing),
            "unexpected": len(extra),
            "different": len(differ),
        }
        verdict.problems.extend(conflicts)
        for label, keys in (("missing", missing), ("unexpected", extra)):
            if keys:
                verdict.problems.append(f"{len(keys)} {kind} {label} live: {', '.join(keys[:SHOWN])}")
        for k in differ[:SHOWN]:
            verdict.problems.append(f"{kind} {k} differs: live {mine[k]} / replay {want[k]}")
        if len(differ) > SHOWN:
            verdict.problems.append(f"... {len(differ) - SHOWN} more {kind} differ")
    live_statuses = statuses(live.get("timeline", []))
    wrong = sorted(
        e
        for e in set(live_statuses) | set(replayed_statuses)
        if live_statuses.get(e) != replayed_statuses.get(e)
    )
    verdict.counts["experiences"] = {
        "live": len(live_statuses),
        "replay": len(replayed_statuses),
        "different": len(wrong),
    }
    for e in wrong[:SHOWN]:
        verdict.problems.append(
            f"experience {e}: live {live_statuses.get(e)}, replay {replayed_statuses.get(e)}"
        )
    return verdict


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def outputs_of_export(path: Path, prefix: str) -> dict[str, list[dict[str, Any]]]:
    """The output topics' records of a ``guardian export`` file, values decoded, per suffix."""
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in OUTPUT_SUFFIXES}
    for line in read_jsonl(path):
        suffix = str(line["topic"]).removeprefix(prefix)
        if suffix in out and line.get("payload") is not None:
            out[suffix].append(orjson.loads(line["payload"]))
    return out


def guardian(env: dict[str, str], *args: str, timeout_s: float = 900.0) -> None:
    """``guardian ARGS``; a failure raises with its stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "guardian", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"guardian {' '.join(args)} exited {done.returncode}: {done.stderr.strip()[-2000:]}"
        )


def export_and_replay(env: dict[str, str], prefix: str, out: Path) -> Verdict:
    """Export the run's topics, replay its inputs with the rules, compare."""
    inputs, outputs, replay_dir = out / "inputs.jsonl", out / "outputs.jsonl", out / "replay"
    guardian(env, "export", "--out", str(inputs), "--topics", ",".join(INPUT_SUFFIXES))
    guardian(env, "export", "--out", str(outputs), "--topics", ",".join(OUTPUT_SUFFIXES))
    guardian(
        env,
        "replay",
        str(inputs),
        "--out",
        str(replay_dir),
        "--decisions",
        "rules",
        "--topic-prefix",
        prefix,
        "--no-report",
    )
    replayed = {k: read_jsonl(replay_dir / f"{k}.jsonl") for k in OUTPUT_SUFFIXES}
    summary = orjson.loads((replay_dir / "summary.json").read_bytes())
    verdict = compare(outputs_of_export(outputs, prefix), replayed, dict(summary.get("experiences", {})))
    verdict.counts["inputs"] = {"records": sum(1 for _ in inputs.read_bytes().splitlines())}
    return verdict

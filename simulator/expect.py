"""What one experience of a scenario must produce (:class:`Expect`), what the pipeline did produce
(:class:`Observed`), and :func:`check`, every way the second misses the first."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

STOP_AND_RETURN = frozenset({"security_patrol.stop", "movement.return_to_station"})
#: dead letter reasons whose letter must never carry a copy of the payload (docs/CONTRACTS.md §10)
NO_PAYLOAD_REASONS = frozenset({"not_json", "too_large", "privacy_violation", "fact_invalid"})


@dataclass(frozen=True)
class Expect:
    """What one experience of a scenario must produce."""

    status: str
    #: decision kinds in order
    decisions: tuple[str, ...] = ()
    #: reason codes that must appear, by decision index
    decision_reasons: Mapping[int, str] = field(default_factory=dict)
    #: allowed backends (None: any)
    backends: frozenset[str] | None = None
    #: each dispatch's set of "capability.operation", in order
    dispatches: tuple[frozenset[str], ...] = ()
    #: dispatches are local actions (decision_id null)
    local_dispatches: bool = False
    #: dead letters of the device, by reason (exact)
    dead_letters: Mapping[str, int] = field(default_factory=dict)
    #: timeline drops of the experience that must appear at least this often
    drops_min: Mapping[str, int] = field(default_factory=dict)
    #: physical evidence that must precede the end entry
    evidence_before_end: tuple[str, ...] = ("security.stopped", "movement.station_charging")
    #: the ask_user question names the area in words
    speaks_area: bool = False
    #: the scenario's forbidden canary value must appear in no output
    canary: bool = False
    #: a short description for tables
    story: str = ""
    #: the stage of the experience's first timeline entry ("goal"; "end" for a plan blocked at
    #: once; "act" for one that first asks the device or the user)
    opens_with: str = "goal"
    #: words the end entry's summary must hold (why it ended so)
    end_says: str = ""
    #: the spoken text holds one of these sentences
    says: tuple[str, ...] = ()
    #: "capability.operation" the device must never play (the pipeline blocked or left them out)
    never_played: tuple[str, ...] = ()


@dataclass
class Observed:
    """The pipeline's outputs about one experience (and its device's dead letters)."""

    status: str | None = None
    decisions: list[dict[str, Any]] = field(default_factory=list)
    dispatches: list[dict[str, Any]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: list[dict[str, Any]] = field(default_factory=list)
    #: output records delivered again with the same identity and other contents
    conflicts: list[str] = field(default_factory=list)
    #: "capability.operation" of every task event the device sent
    played: list[str] = field(default_factory=list)


def check(
    expect: Expect,
    seen: Observed,
    *,
    area_names: Mapping[str, str] | None = None,
    canary_leaked: bool = False,
    foreign_refs: Sequence[str] = (),
) -> list[str]:
    """Every way ``seen`` misses ``expect`` (empty: the scenario met its outcome)."""
    problems: list[str] = list(seen.conflicts)
    if seen.status != expect.status:
        problems.append(f"status {seen.status or 'active'} != {expect.status}")
    kinds = tuple(str(d.get("decision")) for d in seen.decisions)
    if kinds != expect.decisions:
        problems.append(f"decisions {list(kinds)} != {list(expect.decisions)}")
    for index, reason in expect.decision_reasons.items():
        if index < len(seen.decisions) and seen.decisions[index].get("reason_code") != reason:
            problems.append(f"decision {index} reason {seen.decisions[index].get('reason_code')} != {reason}")
    if expect.backends is not None:
        bad = sorted({str(d.get("backend")) for d in seen.decisions} - expect.backends)
        if bad:
            problems.append(f"decision backends {bad} not in {sorted(expect.backends)}")
    ops = tuple(
        frozenset(f"{r['capability']}.{r['operation']}" for r in d.get("requests", ()))
        for d in seen.dispatches
    )
    if ops != expect.dispatches:
        problems.append(f"dispatches {[sorted(o) for o in ops]} != {[sorted(o) for o in expect.dispatches]}")
    if expect.local_dispatches and any(d.get("decision_id") is not None for d in seen.dispatches):
        problems.append("a local dispatch carries a decision_id")
    letters = Counter(str(d.get("reason_code")) for d in seen.dead_letters)
    if dict(letters) != dict(expect.dead_letters):
        problems.append(f"dead letters {dict(sorted(letters.items()))} != {dict(expect.dead_letters)}")
    for d in seen.dead_letters:
        if d.get("reason_code") in NO_PAYLOAD_REASONS and d.get("payload") is not None:
            problems.append(f"a {d.get('reason_code')} dead letter carries the payload")
    drops = Counter(str(e.get("drop_reason")) for e in seen.timeline if e.get("stage") == "drop")
    for reason, least in expect.drops_min.items():
        if drops[reason] < least:
            problems.append(f"timeline drops {reason}: {drops[reason]} < {least}")
    problems.extend(_check_timeline(expect, seen))
    if expect.speaks_area:
        problems.extend(_check_speech(seen, area_names or {}))
    if expect.says:
        problems.extend(_check_says(expect, seen))
    played = sorted(set(expect.never_played) & set(seen.played))
    if played:
        problems.append(f"the device played {played}, which the pipeline never started or dispatched")
    if expect.canary and canary_leaked:
        problems.append("the canary value leaked into decisions, dispatch or timeline")
    if foreign_refs:
        problems.append(f"another device's event reached this experience: {sorted(foreign_refs)}")
    return problems


def _check_timeline(expect: Expect, seen: Observed) -> list[str]:
    entries = sorted(seen.timeline, key=lambda e: int(e.get("seq", 0)))
    if not entries:
        return ["no timeline"]
    problems: list[str] = []
    if entries[0].get("stage") != expect.opens_with:
        problems.append(f"timeline starts with {entries[0].get('stage')}, not {expect.opens_with}")
    ends = [i for i, e in enumerate(entries) if e.get("stage") == "end"]
    if seen.status is not None:
        if len(ends) != 1 or ends[0] != len(entries) - 1:
            problems.append("the end entry is not the last, single one")
        before = entries[: ends[0]] if ends else entries
        signals = {
            str(e.get("summary", "")).removeprefix("evidence: ").split(" ")[0]
            for e in before
            if e.get("stage") == "evidence"
        }
        missing = [s for s in expect.evidence_before_end if s not in signals]
        if missing:
            problems.append(f"ended without physical evidence {missing}")
        said = " ".join(str(entries[i].get("summary", "")) for i in ends)
        if expect.end_says not in said:
            problems.append(f"the end entry does not say {expect.end_says!r}: {said!r}")
    return problems


def _check_speech(seen: Observed, area_names: Mapping[str, str]) -> list[str]:
    texts = [str(d.get("tts") or "") for d in seen.dispatches if d.get("tts")]
    if not texts:
        return ["no spoken question"]
    problems: list[str] = []
    for text in texts:
        if not any(name in text for name in area_names.values()):
            problems.append("the spoken question names no area in words")
        if any(ch.isdigit() for ch in text) or "_" in text or "area" in text.lower().split():
            problems.append("the spoken question carries an ID or a raw key")
    return problems


def _check_says(expect: Expect, seen: Observed) -> list[str]:
    texts = [str(d.get("tts") or "") for d in seen.dispatches if d.get("tts")]
    if not any(sentence in text for text in texts for sentence in expect.says):
        return [f"no spoken text says one of {list(expect.says)}"]
    if any(ch.isdigit() or ch == "_" for text in texts for ch in text):
        return ["the spoken text carries an ID or a raw key"]
    return []

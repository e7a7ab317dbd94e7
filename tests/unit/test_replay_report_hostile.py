"""Hostile inputs against ``guardian replay``'s report (docs/CONTRACTS.md §12): deep nesting in raw
records and in recorded decisions, bands from refused records, free text of refused records on the
page, and the report's bounds (bands, dead-letter keys, recorded decisions, divergences)."""

from __future__ import annotations

import json
import re
import tracemalloc
from pathlib import Path
from typing import Any

import orjson
import pytest

from config.settings import Settings
from guardian.recorded import RecordedDecisions
from guardian.replay import replay_files
from report import render_report
from report.bands import BANDS_LANE_MAX, BANDS_PER_DEVICE, BandBuilder, DeviceStateChange
from report.lanes import DEAD_KEY_LANES_MAX, DETAIL_ROWS_MAX, build_lanes
from report.sources import FileRecords, ListRecords, Sources

ROOT = Path(__file__).resolve().parents[2]
T0 = 1785400000000
NET = "network.aws_iot_session_changed"
#: the example's devices: 0005 runs an experience from T0 to T0+7.4 s; 0006 from T0+60 s to T0+100.5 s
# with a network outage (disconnected 61.8 s, reconnecting 91.8 s, connected 95.44 s)
VICTIM = "airbot-0005"
FLAKY = "airbot-0006"


def settings() -> Settings:
    return Settings.from_env({})


def line(topic: str, offset: int, ts: int, key: str | None, payload: str | bytes) -> str:
    text = payload.decode() if isinstance(payload, bytes) else payload
    return orjson.dumps(
        {
            "topic": f"guardian.{topic}",
            "partition": 7,
            "offset": offset,
            "ts": ts,
            "key": key,
            "payload": text,
        }
    ).decode()


def network(device: str, event_id: str, at: int, connected: bool, **facts: Any) -> str:
    return json.dumps(
        {
            "event_id": event_id,
            "device_id": device,
            "type": NET,
            "source": "DeviceAgent.Test",
            "observed_at_ms": at,
            "freshness_ms": 0,
            "privacy_class": "semantic_only",
            "facts": {"connected": connected, **facts},
        }
    )


def replay(tmp_path: Path, extra: list[str], name: str = "in", mode: str | None = None) -> Path:
    base = (ROOT / "examples" / "incident.jsonl").read_text(encoding="utf-8").splitlines()
    source = tmp_path / f"{name}.jsonl"
    source.write_text("\n".join([*base, *extra]) + "\n", encoding="utf-8")
    out = tmp_path / f"out-{name}"
    replay_files([str(source)], out, settings=settings(), mode=mode)
    return out


def lane_html(out: Path, device: str) -> str:
    """The lane sections of ``device`` in the report (the example's lanes are drawn open)."""
    page = (out / "report.html").read_text(encoding="utf-8")
    sections = page.split('<section class="lane"')[1:]
    return "".join(s for s in sections if f'data-device="{device}"' in s.split(">", 1)[0])


def bands(out: Path, device: str) -> list[str]:
    return re.findall(r'<rect class="sband (sb-[a-z-]+)"', lane_html(out, device))


# --------------------------------------------------------------------------- deep nesting


def test_a_raw_observation_nested_past_a_thousand_levels_is_a_dead_letter_not_a_crash(tmp_path: Path) -> None:
    nested = "[" * 5_000 + "]" * 5_000
    deep = f'{{"event_id":"obs_deep","device_id":"{FLAKY}","type":"{NET}","facts":{{"a":{nested}}}}}'
    assert len(deep) < 11_000
    out = replay(tmp_path, [line("observations", 1, T0 + 70_000, FLAKY, deep)])
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["deadletter_reasons"]["not_json"] >= 1
    assert (out / "report.html").stat().st_size > 0


def _recorded(budget_after: str, trigger: str = "obs_airbot-0005_00001") -> str:
    decision = {
        "decision_id": "dec_recorded_1",
        "device_id": VICTIM,
        "experience_id": "exp_airbot-0005_1785400000000",
        "trigger_event_id": trigger,
        "decision": "return_to_station",
        "reason_code": "battery_low",
        "rationale": "Battery low; stopping and returning.",
        "backend": "rules",
        "state_etag": "e1",
        "budget_after": None,
    }
    return json.dumps(decision).replace('"budget_after": null', f'"budget_after": {budget_after}')


@pytest.mark.parametrize("depth", [300, 1_100])
def test_a_recorded_decision_nested_deep_is_a_counted_divergence_not_a_crash(
    tmp_path: Path, depth: int
) -> None:
    nested = "[" * depth + "]" * depth
    out = replay(tmp_path, [line("decisions", 0, T0 + 1_800, VICTIM, _recorded(nested))], mode="recorded")
    divergences = [orjson.loads(x) for x in (out / "divergences.jsonl").read_bytes().splitlines()]
    unreadable = [d for d in divergences if d["kind"] == "unreadable_recorded_decision"]
    assert unreadable == [
        {
            "device_id": None,
            "experience_id": None,
            "trigger_event_id": None,
            "kind": "unreadable_recorded_decision",
            "why": unreadable[0]["why"],
            "source_topic": "guardian.decisions",
            "partition": 7,
            "offset": 0,
        }
    ]
    assert "nesting" in unreadable[0]["why"] or "JSON" in unreadable[0]["why"]
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["divergences"] == len(divergences)
    assert "is unreadable" in (out / "report.html").read_text(encoding="utf-8")


# --------------------------------------------------------------------------- bands: only what was admitted


def test_a_key_mismatch_record_draws_no_band_in_the_lane_of_the_device_it_names(tmp_path: Path) -> None:
    forged = network(VICTIM, "obs_forged_1", T0 + 3_000, False)
    out = replay(tmp_path, [line("observations", 1, T0 + 3_000, FLAKY, forged)])
    dead = [orjson.loads(x) for x in (out / "deadletter.jsonl").read_bytes().splitlines()]
    assert any(d["reason_code"] == "key_mismatch" and d["event_id"] == "obs_forged_1" for d in dead)
    assert lane_html(out, VICTIM)  # the victim's lane is drawn …
    assert bands(out, VICTIM) == []  # … without a band


def test_a_duplicate_with_another_state_draws_no_band(tmp_path: Path) -> None:
    baseline = bands(replay(tmp_path, [], name="base"), FLAKY)
    assert baseline.count("sb-network-disconnected") == 2  # the outage: in the chart and on the strip
    # the device's first network record (connected, at 61.3 s) again, now saying disconnected
    again = network(FLAKY, "obs_airbot-0006_00001", T0 + 96_000, False)
    out = replay(tmp_path, [line("observations", 1, T0 + 96_000, FLAKY, again)], name="dup")
    drops = [orjson.loads(x) for x in (out / "timeline.jsonl").read_bytes().splitlines()]
    assert any(d["drop_reason"] == "duplicate" and d["at_ms"] == T0 + 96_000 for d in drops)
    assert bands(out, FLAKY) == baseline


def test_a_refused_records_free_text_event_id_never_reaches_the_report(tmp_path: Path) -> None:
    leak = network(FLAKY, "note: PIN is 4711", T0 + 96_000, False, bbox=[1, 2])
    out = replay(tmp_path, [line("observations", 1, T0 + 96_000, FLAKY, leak)])
    dead = [orjson.loads(x) for x in (out / "deadletter.jsonl").read_bytes().splitlines()]
    assert any(d["reason_code"] == "privacy_violation" and d["offset"] == 1 for d in dead)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "4711" not in page
    assert bands(out, FLAKY).count("sb-network-disconnected") == 2  # the outage only


def test_a_dead_letters_free_text_key_and_event_id_are_hashed_on_the_page() -> None:
    letter = {
        "reason_code": "schema_invalid",
        "source_topic": "guardian.observations",
        "partition": 0,
        "offset": 3,
        "key": "my PIN is 4711",
        "event_id": "call me at 555-0100 please",
        "detail": "missing field",
        "offending_paths": [],
        "payload": None,
        "received_at_ms": T0,
    }
    page = render_report(
        decisions=[], dispatches=[], timeline=[], dead_letters=[letter], statuses={}, on_demand=False
    )
    assert "4711" not in page and "555-0100" not in page
    assert "&lt;key:" in page  # shown by their hashed names


# --------------------------------------------------------------------------- bounds


def _flaps(n: int, device: str = FLAKY, start: int = T0) -> list[DeviceStateChange]:
    return [
        DeviceStateChange(
            device, "network", start + 10 * i, f"n{i}", "disconnected" if i % 2 else "connected"
        )
        for i in range(n)
    ]


def test_four_hundred_thousand_flaps_give_a_bounded_page_with_a_flapping_band() -> None:
    timeline = [
        {
            "device_id": FLAKY,
            "experience_id": None,
            "seq": i,
            "at_ms": T0 + t,
            "stage": "drop",
            "ref_id": f"o{i}",
            "summary": "x",
            "drop_reason": "debounced",
        }
        for i, t in enumerate((0, 4_000_000))
    ]
    builder = BandBuilder().add_all(_flaps(400_000))
    kept = builder.intervals()[FLAKY]
    assert len(kept) <= BANDS_PER_DEVICE
    assert sum(i.count for i in kept) == 200_000  # every stretch is in a band, merged or not
    page = render_report(
        decisions=[],
        dispatches=[],
        timeline=timeline,
        dead_letters=[],
        statuses={},
        device_states=_flaps(400_000),
        on_demand=False,
    )
    assert len(page) < 1_000_000
    drawn = re.findall(r'<rect class="sband (sb-[a-z-]+)"', page)
    assert 0 < len(drawn) <= 2 * BANDS_LANE_MAX  # the chart and the strip
    assert "sb-network-flapping" in drawn
    assert "network flapping (" in page and "stretches out of connected, merged)" in page


def _dead_letters(path: Path, keys: int) -> None:
    with path.open("wb") as fh:
        for i in range(keys):
            letter = {
                "reason_code": "not_json",
                "source_topic": "guardian.observations",
                "partition": 0,
                "offset": i,
                "key": f"key-{i:06d}",
                "event_id": None,
                "detail": "not JSON",
                "offending_paths": [],
                "payload": None,
                "received_at_ms": T0 + i,
            }
            fh.write(orjson.dumps(letter) + b"\n")


def _retained(out: Path) -> tuple[int, int, int]:
    """(lanes, handles kept, bytes the lanes and totals hold) of the report's model of ``out``."""
    sources = Sources(
        *(
            FileRecords(out / n)
            for n in (
                "decisions.jsonl",
                "dispatch.jsonl",
                "timeline.jsonl",
                "deadletter.jsonl",
                "divergences.jsonl",
            )
        )
    )
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        lanes, totals = build_lanes(sources, {})
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    handles = sum(len(lane.h_dead) + len(lane.h_div) for lane in lanes) + len(totals.unplaced)
    return len(lanes), handles, held


def test_the_report_model_does_not_grow_with_distinct_dead_letter_keys(tmp_path: Path) -> None:
    small, large = tmp_path / "small", tmp_path / "large"
    for folder, keys in ((small, 2_000), (large, 20_000)):
        folder.mkdir()
        _dead_letters(folder / "deadletter.jsonl", keys)
    lanes_s, handles_s, held_s = _retained(small)
    lanes_l, handles_l, held_l = _retained(large)
    assert lanes_s == lanes_l == DEAD_KEY_LANES_MAX + 1  # the last: "other keys"
    assert handles_s == handles_l
    assert held_l < held_s + 64 * 1024


def test_the_report_model_does_not_grow_with_divergences(tmp_path: Path) -> None:
    held = []
    for n in (2_000, 20_000):
        folder = tmp_path / f"d{n}"
        folder.mkdir()
        (folder / "divergences.jsonl").write_bytes(
            b"".join(
                orjson.dumps({"trigger_event_id": f"t{i}", "kind": "not_reproduced"}) + b"\n"
                for i in range(n)
            )
        )
        _, handles, size = _retained(folder)
        assert handles == DETAIL_ROWS_MAX
        held.append(size)
    assert held[1] < held[0] + 64 * 1024


def test_recorded_decisions_are_kept_on_disk_not_in_memory(tmp_path: Path) -> None:
    path = tmp_path / "recorded.sqlite"
    held = []
    with RecordedDecisions(path) as recorded:
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for n in range(20_000):
                value = _recorded("null", trigger=f"trigger_{n}").encode()
                recorded.add_value(value, "guardian.decisions", 0, n)
                if n + 1 in (2_000, 20_000):
                    held.append(tracemalloc.get_traced_memory()[0] - before)
        finally:
            tracemalloc.stop()
        assert recorded.readable() == 20_000
    assert held[1] < held[0] + 256 * 1024
    assert path.stat().st_size > 20_000 * 200  # they are in the file


def test_the_page_names_how_many_dead_letters_and_keys_were_folded() -> None:
    letters = [
        {
            "reason_code": "not_json",
            "source_topic": "guardian.observations",
            "partition": 0,
            "offset": i,
            "key": f"key-{i}",
            "event_id": None,
            "detail": "x",
            "payload": None,
            "received_at_ms": T0 + i,
        }
        for i in range(DEAD_KEY_LANES_MAX + 30)
    ]
    lanes, totals = build_lanes(Sources(*(ListRecords(x) for x in ([], [], [], letters, []))), {})
    other = [lane for lane in lanes if lane.device_id == "(other keys)"]
    assert len(other) == 1 and other[0].n_dead == 30
    assert totals.dead_letters == len(letters)


def test_free_text_in_a_recorded_decision_reaches_the_divergences_file_not_the_page(tmp_path: Path) -> None:
    recorded = _recorded("null").replace('"battery_low"', '"my PIN is 4711"')
    out = replay(tmp_path, [line("decisions", 0, T0 + 1_800, VICTIM, recorded)], mode="recorded")
    divergences = [orjson.loads(x) for x in (out / "divergences.jsonl").read_bytes().splitlines()]
    assert {"field": "reason_code", "recorded": "my PIN is 4711"}.items() <= divergences[0].items()
    assert any(d["kind"] == "invalid_recorded_decision" for d in divergences)
    page = (out / "report.html").read_text(encoding="utf-8")
    assert "reason_code: recorded &quot;&lt;key:" in page and "4711" not in page

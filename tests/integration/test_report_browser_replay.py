"""A real replay's report in headless Chromium: what an analyst looks for, at 400 px, Korean in a CJK font."""

# ruff: noqa: F811  (pytest fixtures imported from tests.integration.chromium_fixtures are test arguments)

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import orjson
import pytest

from config.settings import Settings
from guardian.cli import main as cli_main
from guardian.replay import InputRecord, replay_records
from tests.integration.chromium_fixtures import (
    DevTools,
    browser,  # noqa: F401  (the fixture)
    devtools,  # noqa: F401  (the fixture)
)
from tests.scenario_scripts import CANARY, build, hg12
from tests.streams import T0

pytestmark = [pytest.mark.browser, pytest.mark.own_broker]


def _kcat_lines(records: list[InputRecord]) -> bytes:
    return b"".join(
        orjson.dumps(
            {
                "topic": r.topic,
                "partition": r.partition,
                "offset": r.offset,
                "ts": r.ts,
                "key": None if r.key is None else r.key.decode(),
                "payload": None if r.value is None else r.value.decode(),
            }
        )
        + b"\n"
        for r in records
    )


#: device -> scenario of the real replay; each device gets its own partition
REAL = {
    "dev-03": "HG-03",
    "dev-05": "HG-05",
    "dev-06": "HG-06",
    "dev-07": "HG-07",
    "dev-08": "HG-08",
    "dev-11": "HG-11",
}


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``guardian replay`` of six stories and HG-12, reusing recorded decisions of which one was altered."""
    records: list[InputRecord] = []
    for i, (device, scenario) in enumerate(REAL.items()):
        script = build(scenario, device_id=device, t0=T0 + i * 100_000)
        records += [dataclasses.replace(r, partition=i) for r in script.records]
    a, b = hg12(t0=T0 + 700_000)
    records += [dataclasses.replace(r, partition=10) for r in a.records]
    records += [dataclasses.replace(r, partition=11) for r in b.records]
    # the decisions a live run recorded: what the rules decide, one of them altered
    recorded = replay_records(records, settings=Settings.from_env({})).outs["decisions"]
    altered = next(d for d in recorded if d["device_id"] == "dev-05")
    altered["state_etag"] = "e999"
    for offset, d in enumerate(recorded):
        records.append(
            InputRecord(
                "decisions", "guardian.decisions", 0, offset, d["decided_at_ms"], None, orjson.dumps(d)
            )
        )
    work = tmp_path_factory.mktemp("real")
    (work / "incident.jsonl").write_bytes(_kcat_lines(records))
    assert (
        cli_main(
            [
                "replay",
                str(work / "incident.jsonl"),
                "--out",
                str(work / "out"),
                "--topic-prefix",
                "guardian.",
            ]
        )
        == 0
    )
    return work / "out" / "report.html"


def _lane_of(device: str) -> str:
    """JS: the experience lane of ``device``."""
    selector = f'section.lane[data-device="{device}"]:not([data-experience=""])'
    return f"document.querySelector('{selector}')"


def test_real_replay_shows_mode_divergence_dead_letters_bands_and_triggers(
    devtools: DevTools, replayed: Path
) -> None:
    devtools.load(replayed.as_uri())
    banner = devtools.js("document.getElementById('replay-mode').textContent")
    assert "decisions recorded" in banner and "1 divergence" in banner
    # the altered decision is marked where it was taken, and nowhere else
    diverged = devtools.js(
        "Array.from(document.querySelectorAll('tr.diverged')).map(function (r) {"
        " return [r.closest('section.lane').getAttribute('data-device'), r.textContent]; })"
    )
    assert len(diverged) == 1 and diverged[0][0] == "dev-05"
    assert "state_etag" in diverged[0][1] and "e999" in diverged[0][1]
    # HG-11's dead letters in its lane: reason, source, detail; never a payload
    rows = devtools.js(_lane_of("dev-11") + ".querySelectorAll('table.deadletters tbody tr').length")
    assert rows == 5
    text = devtools.js(_lane_of("dev-11") + ".querySelector('table.deadletters').textContent")
    for reason in ("privacy_violation", "unknown_contract", "too_large", "not_json"):
        assert reason in text
    assert "guardian.observations [5] @0" in text and "forbidden key at facts.bbox" in text
    assert CANARY not in replayed.read_text(encoding="utf-8")
    # HG-12: device B's cross_device letters are in its lane, and in the lane of A's experience they name
    b_dead = devtools.js(
        "Array.from(document.querySelectorAll('section.lane[data-device=\"airbot-000B\"]'))"
        ".map(function (l) { return l.getAttribute('data-dead'); })"
    )
    assert "cross_device" in b_dead
    a_text = devtools.js(_lane_of("airbot-000A") + ".textContent")
    assert "from device airbot-000B" in a_text
    # HG-06: the 30 s outage is a visible band
    band = devtools.js(
        _lane_of("dev-06")
        + ".querySelector('svg.chart rect.sb-network-disconnected').getBoundingClientRect().width"
    )
    assert band > 100
    assert "network disconnected" in devtools.js(
        _lane_of("dev-06") + ".querySelector('ul.states').textContent"
    )
    assert "(30s)" in devtools.js(_lane_of("dev-06") + ".querySelector('ul.states').textContent")
    # HG-07: the pause and resume dispatches link, in their trigger column, to the voice session
    links = devtools.js(
        "Array.from(" + _lane_of("dev-07") + ".querySelectorAll('table.dispatches td.trig a'))"
        ".map(function (a) { return a.getAttribute('data-jump'); })"
    )
    assert len(links) == 2
    targets = [devtools.js(f"document.getElementById('{t}').textContent") for t in links]
    assert all("voice session active" in t for t in targets)
    assert devtools.js(_lane_of("dev-07") + ".querySelector('svg.chart rect.sb-voice-active') !== null")
    # a decision's trigger link opens the timeline and marks the trigger's entry
    jumped = devtools.js(
        "(function () { var a = " + _lane_of("dev-05") + ".querySelector('table.decisions a.jump');"
        " var d = a.closest('section.lane').querySelector('details.tbl'); d.open = false; a.click();"
        " var t = document.querySelector('.jumped');"
        " return [t.id === a.getAttribute('data-jump'), d.open, t.textContent]; }())"
    )
    assert jumped[0] and jumped[1] and "security.condition_changed" in jumped[2]


def test_real_replay_sorts_filters_and_shares_the_time_axis(devtools: DevTools, replayed: Path) -> None:
    def shown(fragment: str) -> list[str]:
        devtools.load(replayed.as_uri() + fragment)
        value = devtools.js(
            "Array.from(document.querySelectorAll('section.lane')).filter(function (l) { return !l.hidden; })"
            ".map(function (l) {"
            " return l.getAttribute('data-device') + '/' + l.getAttribute('data-status'); })"
        )
        return list(value)

    ordered = shown("#sort=severity")
    assert ordered[0] == "dev-08/aborted"
    assert ordered[1] == "dev-05/returned"  # the diverged lane
    assert {ordered[2], ordered[3]} <= {"dev-11/completed", "airbot-000B/active", "airbot-000A/completed"}
    assert shown("#sort=time")[0] != "dev-08/aborted"
    assert shown("#decision=abort") == ["dev-08/aborted"]
    assert shown("#decision=ask_user&backend=rules") == ["dev-03/returned"]
    assert shown("#drop=stale") == ["dev-06/completed"]
    assert shown("#dead=too_large") == ["dev-11/completed"]
    assert set(shown("#dead=cross_device")) == {"airbot-000B/active", "airbot-000A/completed"}
    assert set(shown("#backend=rules")) == {"dev-03/returned", "dev-05/returned", "dev-08/aborted"}
    assert len(shown("#backend=gemini")) == 8  # no such decision here: the filter is left unset
    # the shared axis: every lane's strip on one scale, lanes later in time drawn further right
    devtools.load(replayed.as_uri() + "#axis=shared")
    starts = devtools.js(
        "Array.from(document.querySelectorAll('section.lane svg.shared rect.span'))"
        ".map(function (r) { var b = r.getBoundingClientRect(); return [b.width > 0, b.left]; })"
    )
    assert len(starts) == 8 and all(visible for visible, _ in starts)
    devtools.load(replayed.as_uri())
    assert devtools.js("document.querySelector('section.lane svg.shared').getBoundingClientRect().width") == 0


def test_real_replay_is_usable_at_400_px_and_renders_korean(devtools: DevTools, replayed: Path) -> None:
    try:
        devtools.viewport(400, 900)
        devtools.load(replayed.as_uri())
        assert devtools.js("document.documentElement.scrollWidth") <= 400
        assert devtools.js("document.getElementById('f-dead').getBoundingClientRect().right") <= 400
        assert devtools.js("document.querySelector('section.lane').getBoundingClientRect().right") <= 400
    finally:
        devtools.viewport(1400, 1000)
    # the goal names the rooms in Korean: its glyphs come from a CJK font, not a fallback box
    devtools.js(
        "Array.from(document.querySelectorAll('td')).filter(function (td) {"
        " return /[\\uac00-\\ud7a3]/.test(td.textContent); })[0].id = 'korean-probe'"
    )
    fonts = devtools.fonts_of("#korean-probe")
    cjk = {name: n for name, n in fonts.items() if "CJK" in name}
    assert cjk, f"Korean rendered without a CJK font: {fonts} (install Debian's fonts-noto-cjk)"
    hangul = len(
        re.findall("[\uac00-\ud7a3]", devtools.js("document.getElementById('korean-probe').textContent"))
    )
    assert sum(cjk.values()) >= hangul

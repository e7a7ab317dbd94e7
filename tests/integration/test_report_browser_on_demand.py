"""Lanes drawn on demand in headless Chromium: opened, linked into, filtered, sorted, on the shared axis."""

# ruff: noqa: F811  (pytest fixtures imported from tests.integration.chromium_fixtures are test arguments)

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from report import render_report
from tests.integration.chromium_fixtures import (
    TIMEOUT_S,
    DevTools,
    browser,  # noqa: F401  (the fixture)
    devtools,  # noqa: F401  (the fixture)
)
from tests.unit.report_fixtures import EXP_ABORT, EXP_DONE, EXP_RET, SCRIPT, sample_records

pytestmark = [pytest.mark.browser, pytest.mark.own_broker]


@pytest.fixture(scope="module")
def on_demand_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sample records with every lane collapsed and carried compressed (as past OPEN_LANES_MAX)."""
    path = tmp_path_factory.mktemp("on-demand") / "report.html"
    page = render_report(**sample_records(), generated_note="browser test", on_demand=True)
    path.write_text(page, encoding="utf-8")
    return path


def _wait_for(devtools: DevTools, expression: str) -> Any:
    """Evaluate ``expression`` until it is truthy (the page draws some things after a frame)."""
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        value = devtools.js(expression)
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"never true in the page: {expression}")
        time.sleep(0.05)


def _exp_lane(exp: str) -> str:
    return f"document.querySelector('section.lane[data-experience=\"{exp}\"]')"


def test_a_collapsed_lane_is_drawn_when_opened(devtools: DevTools, on_demand_file: Path) -> None:
    devtools.load(on_demand_file.as_uri())
    assert devtools.js("document.querySelectorAll('section.lane').length") == 4
    assert devtools.js("document.querySelectorAll('svg.chart, table.entries, table.detail').length") == 0
    assert devtools.js("document.getElementById('f-count').textContent") == "4 of 4 lanes shown"
    # opening the aborted lane draws its chart, decisions, dispatches, dead letters and entry rows
    lane = _exp_lane(EXP_ABORT)
    devtools.js(lane + ".querySelector('details.lanebox').open = true")
    _wait_for(devtools, lane + ".querySelector('svg.chart') !== null")
    assert devtools.js(lane + ".querySelectorAll('table.entries tbody tr').length") == 12
    assert devtools.js(lane + ".querySelectorAll('table.deadletters tbody tr').length") == 3
    text = devtools.js(lane + ".textContent")
    assert "Someone unverified is in the living room." in text and "voice_content.speak" in text
    assert devtools.js(lane + ".querySelectorAll('svg.chart circle').length") == 12
    # the other lanes are still not drawn
    assert devtools.js("document.querySelectorAll('svg.chart').length") == 1
    # a record's text arrives as text: the script it holds is shown, never run
    done = _exp_lane(EXP_DONE)
    devtools.js(done + ".querySelector('details.lanebox').open = true")
    _wait_for(devtools, done + ".querySelector('table.entries') !== null")
    assert SCRIPT in devtools.js(done + ".textContent")
    assert devtools.js("document.querySelectorAll('script:not([type])').length") == 2
    assert devtools.js("document.documentElement.hasAttribute('data-blocked')") is False


def test_a_link_into_a_lane_not_drawn_yet_draws_it(devtools: DevTools, on_demand_file: Path) -> None:
    # EXP_RET is the second lane; its third entry is the battery-low observation
    devtools.load(on_demand_file.as_uri() + "#l2-e2")
    jumped = devtools.js(
        "(function () { var t = document.querySelector('.jumped');"
        " return t && [t.id, t.closest('details.lanebox').open, t.textContent]; }())"
    )
    assert jumped[0] == "l2-e2" and jumped[1] and "security.condition_changed" in jumped[2]
    # and its decision's trigger link, once drawn, jumps to the same entry
    assert (
        devtools.js(_exp_lane(EXP_RET) + ".querySelector('table.decisions a.jump').getAttribute('data-jump')")
        == "l2-e2"
    )


def test_on_demand_lanes_filter_sort_and_draw_their_strips_on_the_shared_axis(
    devtools: DevTools, on_demand_file: Path
) -> None:
    devtools.load(on_demand_file.as_uri() + "#status=aborted")
    shown = devtools.js(
        "Array.from(document.querySelectorAll('section.lane')).filter(function (l) { return !l.hidden; })"
        ".map(function (l) { return l.getAttribute('data-experience'); })"
    )
    assert shown == [EXP_ABORT]
    devtools.load(on_demand_file.as_uri() + "#sort=severity")
    assert devtools.js("document.querySelector('section.lane').getAttribute('data-experience')") == EXP_ABORT
    assert devtools.js("document.querySelectorAll('svg.shared rect.span').length") == 0
    devtools.load(on_demand_file.as_uri() + "#axis=shared")
    _wait_for(devtools, "document.querySelectorAll('section.lane svg.shared rect.span').length === 4")
    widths = devtools.js(
        "Array.from(document.querySelectorAll('section.lane svg.shared rect.span'))"
        ".map(function (r) { return r.getBoundingClientRect().width; })"
    )
    assert all(w > 0 for w in widths)
    # drawing the strips drew no lane body
    assert devtools.js("document.querySelectorAll('svg.chart').length") == 0

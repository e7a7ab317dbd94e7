"""The incident report in headless Chromium: the page drawn, its script run, its filters, no request sent."""

# ruff: noqa: F811  (pytest fixtures imported from tests.integration.chromium_fixtures are test arguments)

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import pytest

from report import render_report
from tests.integration.chromium_fixtures import (
    Browser,
    browser,  # noqa: F401  (the fixture)
)
from tests.unit.report_fixtures import DEV_B, EXP_ABORT, EXP_RET, Node, sample_records

pytestmark = [pytest.mark.browser, pytest.mark.own_broker]


LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:", "chrome:", "chrome-extension:", "devtools:")
# Requests the browser makes for itself (update checks, sign-in probes) have no initiating document.
BROWSER_INITIATED = "not an origin"
EXTERNAL_IMG = '<img src="http://example.invalid/pixel.png" alt="">'
CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>')


@pytest.fixture(scope="module")
def report_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "report.html"
    path.write_text(render_report(**sample_records(), generated_note="browser test"), encoding="utf-8")
    return path


def _lanes(dom: Node) -> list[Node]:
    return dom.find_all(lambda n: "lane" in n.classes)


def _root(dom: Node) -> Node:
    return next(n for n in dom.iter() if n.tag == "html")


def _count_text(dom: Node) -> str:
    return next(n for n in dom.iter() if n.attrs.get("id") == "f-count").text()


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def _page_requests(net_log: Path) -> list[str]:
    """URLs of network requests that a document started (the browser's own requests excluded)."""
    log = json.loads(net_log.read_text(encoding="utf-8"))
    types = {v: k for k, v in log["constants"]["logEventTypes"].items()}
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if types.get(event["type"]) != "URL_REQUEST_START_JOB" or "url" not in params:
            continue
        url = str(params["url"])
        if params.get("initiator") != BROWSER_INITIATED and not url.startswith(LOCAL_SCHEMES):
            urls.append(url)
    return urls


def test_screenshot_shows_a_real_page(browser: Browser, report_file: Path, tmp_path: Path) -> None:
    blank = tmp_path / "blank.html"
    blank.write_text("<!DOCTYPE html><title>blank</title>", encoding="utf-8")
    sizes = {}
    for name, page in (("shot", report_file), ("blank", blank)):
        shot = tmp_path / f"{name}.png"
        browser.run(f"--screenshot={shot}", "--window-size=1400,2000", url=page.as_uri())
        assert shot.exists(), f"no screenshot written for {name}"
        data = shot.read_bytes()
        assert _png_size(data) == (1400, 2000)
        sizes[name] = len(data)
    # a page of text, charts and colour compresses far worse than an empty one
    assert sizes["shot"] > 30_000
    assert sizes["shot"] > 5 * sizes["blank"], sizes


def test_lanes_are_present_after_the_script_ran(browser: Browser, report_file: Path) -> None:
    dom = browser.dump_dom(report_file)
    assert _root(dom).attrs.get("data-js") == "ready"
    lanes = _lanes(dom)
    experiences = {n.attrs["data-experience"] for n in lanes if n.attrs["data-experience"]}
    assert len(experiences) == len(sample_records()["statuses"]) == 3
    assert len(lanes) == 4  # plus one "no experience" lane
    assert not any("hidden" in n.attrs for n in lanes)
    assert _count_text(dom) == "4 of 4 lanes shown"
    assert len(dom.find_all(lambda n: n.tag == "svg" and "chart" in n.classes)) == 4


def test_filters_hide_and_show_lanes(browser: Browser, report_file: Path) -> None:
    dom = browser.dump_dom(report_file, f"#device={DEV_B}")
    shown = [n.attrs["data-experience"] for n in _lanes(dom) if "hidden" not in n.attrs]
    assert shown == [EXP_ABORT]
    assert _count_text(dom) == "1 of 4 lanes shown"

    dom = browser.dump_dom(report_file, "#q=GUARDIAN_002")
    shown = [n.attrs["data-experience"] for n in _lanes(dom) if "hidden" not in n.attrs]
    assert shown == [EXP_RET]

    dom = browser.dump_dom(report_file, "#status=aborted")
    shown = [n.attrs["data-experience"] for n in _lanes(dom) if "hidden" not in n.attrs]
    assert shown == [EXP_ABORT]


def test_no_request_leaves_the_page(browser: Browser, report_file: Path, tmp_path: Path) -> None:
    net_log = tmp_path / "report.netlog.json"
    dom = browser.dump_dom(report_file, "", f"--log-net-log={net_log}")
    assert _page_requests(net_log) == []
    assert "data-blocked" not in _root(dom).attrs, "the page tried to load something the CSP blocked"
    page = report_file.read_text(encoding="utf-8")
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:[a-z]+:)?//""", page, re.I)


def test_the_network_check_would_catch_a_request(browser: Browser, report_file: Path, tmp_path: Path) -> None:
    """Controls: without the CSP the net log sees an injected image; with it, the probe counts the block."""
    page = report_file.read_text(encoding="utf-8")
    assert CSP_META.search(page)

    leaky = tmp_path / "leaky.html"
    leaky.write_text(CSP_META.sub("", page).replace("<main>", "<main>" + EXTERNAL_IMG, 1), encoding="utf-8")
    net_log = tmp_path / "leaky.netlog.json"
    browser.dump_dom(leaky, "", f"--log-net-log={net_log}")
    assert "http://example.invalid/pixel.png" in _page_requests(net_log)

    guarded = tmp_path / "guarded.html"
    guarded.write_text(page.replace("<main>", "<main>" + EXTERNAL_IMG, 1), encoding="utf-8")
    net_log = tmp_path / "guarded.netlog.json"
    dom = browser.dump_dom(guarded, "", f"--log-net-log={net_log}")
    assert _page_requests(net_log) == []
    assert int(_root(dom).attrs.get("data-blocked", "0")) >= 1

"""The incident report in a real browser: headless Chromium renders it, runs its JS, and sends nothing;
on a real replay it shows what an analyst looks for, at 400 px too, with Korean in a CJK font.

Needs Debian's `chromium` and `fonts-noto-cjk` (run scripts/ensure-debian-tools chromium:chromium
fonts-noto-cjk). Missing Chromium or the font is a failure, not a skip.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.devtools import DevToolsPipe
from config.settings import Settings
from guardian.cli import main as cli_main
from guardian.replay import InputRecord, replay_records
from report import render_report
from tests.scenario_scripts import CANARY, build, hg12
from tests.streams import T0
from tests.unit.test_report import DEV_B, EXP_ABORT, EXP_DONE, EXP_RET, SCRIPT, Node, parse, sample_records

pytestmark = [pytest.mark.browser, pytest.mark.own_broker]

TIMEOUT_S = 120
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--no-pings",
    "--disable-domain-reliability",
    "--disable-features=NetworkTimeServiceQuerying,OptimizationHints,MediaRouter,Translate",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)
LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:", "chrome:", "chrome-extension:", "devtools:")
# Requests the browser makes for itself (update checks, sign-in probes) have no initiating document.
BROWSER_INITIATED = "not an origin"
EXTERNAL_IMG = '<img src="http://example.invalid/pixel.png" alt="">'
CSP_META = re.compile(r'<meta http-equiv="Content-Security-Policy"[^>]*>')


@dataclass(frozen=True)
class Run:
    stdout: str
    stderr: str


@dataclass(frozen=True)
class Browser:
    binary: str
    work: Path

    def run(self, *args: str, url: str) -> Run:
        """One Chromium invocation with a fresh profile; the whole process group is ended on timeout."""
        profile = self.work / f"profile-{uuid.uuid4().hex[:12]}"
        cmd = [self.binary, *FLAGS, f"--user-data-dir={profile}", *args, url]
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            out, err = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=10)
            pytest.fail(f"chromium did not finish within {TIMEOUT_S}s: {' '.join(cmd)}")
        assert proc.returncode == 0, f"chromium exited {proc.returncode}:\n{err[-2000:]}"
        return Run(out, err)

    def dump_dom(self, page: Path, fragment: str = "", *args: str) -> Node:
        run = self.run("--dump-dom", *args, url=page.as_uri() + fragment)
        assert "<section" in run.stdout, f"no DOM dumped:\n{run.stderr[-2000:]}"
        return parse(run.stdout)


def _chromium_binary() -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail(
            "headless Chromium is not installed: run scripts/ensure-debian-tools chromium:chromium "
            "(or: apt-get update && apt-get install -y chromium)",
            pytrace=False,
        )
    return binary


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    yield Browser(_chromium_binary(), tmp_path_factory.mktemp("chromium"))


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


# ------------------------------------------------------------------ a real replay, driven over DevTools


class DevTools(DevToolsPipe):
    """One headless Chromium driven through the DevTools protocol, with the page helpers the tests
    use."""

    def __init__(self, binary: str, work: Path) -> None:
        profile = work / f"profile-{uuid.uuid4().hex[:12]}"
        super().__init__(binary, profile, FLAGS, timeout_s=TIMEOUT_S)

    def open(self, width: int = 1400, height: int = 1000) -> None:
        target = self.send("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
        self.session = self.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, browser=True
        )["sessionId"]
        self.send("Page.enable")
        self.send("DOM.enable")
        self.send("CSS.enable")
        self.viewport(width, height)

    def viewport(self, width: int, height: int) -> None:
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def load(self, url: str) -> None:
        self.send("Page.navigate", {"url": "about:blank"})
        self.wait_event("Page.loadEventFired")
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        assert self.js("document.documentElement.getAttribute('data-js')") == "ready"

    def js(self, expression: str) -> Any:
        result = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def fonts_of(self, selector: str) -> dict[str, int]:
        """Platform font family -> glyphs it rendered, for the text of the first node matching selector."""
        root = self.send("DOM.getDocument", {"depth": 0})["root"]["nodeId"]
        node = self.send("DOM.querySelector", {"nodeId": root, "selector": selector})["nodeId"]
        assert node, f"no node matches {selector}"
        fonts = self.send("CSS.getPlatformFontsForNode", {"nodeId": node})["fonts"]
        return {str(f["familyName"]): int(f["glyphCount"]) for f in fonts}


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


@pytest.fixture(scope="module")
def devtools(browser: Browser) -> Iterator[DevTools]:
    tools = DevTools(browser.binary, browser.work)
    try:
        tools.open()
        yield tools
    finally:
        tools.close()


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


# ------------------------------------------------------------------ lanes drawn on demand


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

"""The live console in a real browser: a broker of this test, a worker and ``guardian console``;
stories played; Debian's headless Chromium (driven through the DevTools protocol) watches the page.

Asserts what an operator notices: each experience's lane appears and reaches its final status (the
one replay gives), a dead letter appears with its reason, the "disconnected" banner appears when
the broker stops and goes when it returns (with no duplicate lane after), a filter survives a
reload, the page logs no error and its policy blocks nothing, the pause button stops and resumes
updates, and a console restart is said on the page and followed by every lane once again; an
accessibility scan with axe-core (installed from npm into the cache, run in that browser) finds no
violation. It saves a screenshot (``console.png`` in the test's temporary directory).

Needs Debian's ``chromium``, ``npm`` and the Kafka jars; a missing one is a failure, not a skip.
"""

from __future__ import annotations

import asyncio
import base64
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from bench.devtools import BASE_FLAGS, DevToolsPipe
from config.settings import Settings
from guardian.kafka_local import LocalBroker, free_port
from guardian.replay import replay_records
from streams.admin import create_topics
from tests.conftest import make_guardian_env
from tests.live import WorkerProcess, produce_plans_first
from tests.scenario_scripts import build
from topics.names import TopicNames

pytestmark = [pytest.mark.kafka, pytest.mark.browser, pytest.mark.own_broker]

WAIT_S = 120.0
PARTITIONS = 4
STORIES = ("HG-01", "HG-03", "HG-05", "HG-06")
#: only the loopback address resolves: nothing leaves the machine
FLAGS = (
    *(f for f in BASE_FLAGS if "resolver" not in f),
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)
AXE_VERSION = "4"
CONSOLE = (sys.executable, "-m", "guardian", "console")


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = WAIT_S) -> Any:
    """Poll ``check`` until it returns a true value (bounded); fail naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: not within {timeout_s:.0f} s (last: {value!r})")
        time.sleep(0.5)


class Page(DevToolsPipe):
    def __init__(self, binary: str, work: Path) -> None:
        super().__init__(binary, work / f"profile-{uuid.uuid4().hex[:8]}", FLAGS, timeout_s=60)
        target = self.send("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
        self.session = self.send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, browser=True
        )["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": 1400, "height": 1400, "deviceScaleFactor": 1, "mobile": False},
        )

    def load(self, url: str) -> None:
        self.send("Page.navigate", {"url": url})
        self.wait_event("Page.loadEventFired")
        wait_until("the page's script ran", lambda: self.js("document.documentElement.dataset.ready") == "1")

    def js(self, expression: str, *, awaited: bool = False) -> Any:
        result = self.send(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": awaited}
        )
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

    def pump(self) -> None:
        """Read the events the browser sent meanwhile (errors are among them)."""
        self.js("1")

    def errors(self) -> list[dict[str, Any]]:
        found = []
        for event in self.events:
            method, params = event.get("method"), event.get("params", {})
            failed = method == "Runtime.exceptionThrown"
            if failed or (method == "Runtime.consoleAPICalled" and params.get("type") == "error"):
                found.append(params)
            elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
                found.append(params["entry"])
        return found

    def screenshot(self, path: Path) -> None:
        path.write_bytes(base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"]))


def _axe_source() -> str:
    """axe-core's browser build, installed from npm into the cache once."""
    cache = Path(os.environ.get("GUARDIAN_DATA_DIR") or Path.home() / ".cache" / "guardian") / "npm-axe"
    script = cache / "node_modules" / "axe-core" / "axe.min.js"
    if not script.is_file():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is not installed (apt-get install -y npm): it brings axe-core", pytrace=False)
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(cache), f"axe-core@{AXE_VERSION}"],
            check=True,
            timeout=300,
            capture_output=True,
        )
    return script.read_text(encoding="utf-8")


async def _send_not_json(bootstrap: str, topic: str, key: bytes) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=30_000)
    await producer.start()
    try:
        await asyncio.wait_for(await producer.send(topic, b"{not json", key=key), 60)
    finally:
        await producer.stop()


def test_the_console_follows_the_fleet_live(own_broker: LocalBroker, tmp_path: Path) -> None:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    if binary is None:
        pytest.fail("headless Chromium is not installed (apt-get install -y chromium)", pytrace=False)
    axe = _axe_source()
    bootstrap = own_broker.bootstrap()
    assert bootstrap is not None
    prefix = "console."
    names = TopicNames(prefix)
    asyncio.run(create_topics(bootstrap, names, PARTITIONS))
    env = make_guardian_env(bootstrap, prefix, PARTITIONS, tmp_path / "guardian-data")
    t0 = int(time.time() * 1000) - 300_000
    records = []
    for i, story in enumerate(STORIES):
        records += build(story, device_id=f"dev-{story.lower()}", prefix=prefix, t0=t0 + i * 7).records
    records.sort(key=lambda r: r.ts)
    want = dict(replay_records(records, settings=Settings.from_env({})).summary["experiences"])
    assert len(want) == len(STORIES)

    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    port = free_port()
    console_log = (tmp_path / "console.log").open("ab")

    def start_console() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*CONSOLE, "--from", "earliest", "--port", str(port), "--worker", worker.base_url],
            env=env,
            stdout=console_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    console = start_console()
    page = Page(binary, tmp_path)
    try:
        url = f"http://127.0.0.1:{port}/"
        wait_until("the console listens", lambda: _answers(url))
        page.load(url)
        produce_plans_first(bootstrap, names, records)
        asyncio.run(_send_not_json(bootstrap, names.observations, b"dev-hg-01"))

        def statuses() -> dict[str, str]:
            rows = page.js(
                "Array.from(document.querySelectorAll('div.exprow')).map(function (d) {"
                " return [d.querySelector('.exp').textContent, d.dataset.status]; })"
            )
            return {exp: status for exp, status in rows}

        wait_until("every lane reaches its final status", lambda: statuses().items() >= want.items())
        wait_until(
            "the dead letter appears with its reason",
            lambda: "not_json" in page.js("document.getElementById('overview').textContent"),
        )
        # a lane opens on the report's own drawing
        page.js("document.querySelector('div.exprow details').open = true")
        wait_until(
            "an opened lane is drawn", lambda: page.js("document.querySelectorAll('.lanehost svg').length")
        )

        # a filter is in the URL and survives a reload
        page.js(
            "var s = document.getElementById('f-status'); s.value = 'completed';"
            " s.dispatchEvent(new Event('change'))"
        )
        assert page.js("location.search") == "?status=completed"
        page.load(url + "?status=completed")
        assert page.js("document.getElementById('f-status').value") == "completed"
        wait_until("the lanes come back after the reload", lambda: statuses().items() >= want.items())
        shown = page.js("Array.from(document.querySelectorAll('div.exprow')).filter(d => !d.hidden).length")
        assert shown == sum(1 for s in want.values() if s == "completed")

        # the broker stops: the banner says since when; it returns: the banner goes, no lane twice
        before = page.js("document.querySelectorAll('div.exprow').length")
        own_broker.down()
        banner = wait_until(
            "the disconnected banner",
            lambda: page.js("var b = document.getElementById('banner'); !b.hidden && b.textContent"),
        )
        assert "Disconnected from the broker since" in banner
        own_broker.up(timeout_s=120)
        wait_until("the banner goes", lambda: page.js("document.getElementById('banner').hidden"))
        keys = page.js("Array.from(document.querySelectorAll('div.exprow')).map(d => d.dataset.key)")
        assert len(keys) == len(set(keys)) == before

        page.pump()
        assert page.errors() == []
        assert page.js("document.documentElement.getAttribute('data-blocked')") is None

        # paused, the page takes nothing; resumed, it catches up
        page.js("document.getElementById('pause').click()")
        assert page.js("!document.getElementById('paused').hidden")
        asyncio.run(_send_not_json(bootstrap, names.observations, b"dev-hg-03"))
        page.js("document.getElementById('pause').click()")
        assert page.js("document.getElementById('paused').hidden")
        wait_until(
            "the update missed while paused",
            lambda: page.js("document.querySelectorAll('tr.dlrow').length") == 2,
        )

        # the console restarts: the page says so meanwhile, then shows every lane once again
        _stop(console)
        banner = wait_until(
            "the console's banner",
            lambda: page.js("var b = document.getElementById('banner'); !b.hidden && b.textContent"),
        )
        assert "Disconnected from the console since" in banner
        console = start_console()
        wait_until("the banner goes", lambda: page.js("document.getElementById('banner').hidden"))
        wait_until("the lanes after the restart", lambda: statuses().items() >= want.items())
        keys = page.js("Array.from(document.querySelectorAll('div.exprow')).map(d => d.dataset.key)")
        # the dead letter sent while paused has its device's own lane ("d:dev-hg-03") besides
        assert len(keys) == len(set(keys)) == before + 1 and "d:dev-hg-03" in keys
        page.pump()
        # while it was down the browser logged its failed connections, and nothing else
        assert [e for e in page.errors() if not _refused(e)] == []

        page.js("document.querySelector('div.exprow details').open = true")
        wait_until(
            "the lane is drawn for the scan",
            lambda: page.js("document.querySelectorAll('.lanehost svg').length"),
        )
        page.screenshot(tmp_path / "console.png")
        page.js(axe)
        violations = page.js(
            "axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map("
            "v => v.id + ': ' + v.help + ' at ' + v.nodes.map(n => n.target.join(' ')).join(', ')))",
            awaited=True,
        )
        assert violations == [], "\n".join(violations)
    finally:
        page.close()
        _stop(console)
        console_log.close()
        worker.stop()
    assert console.returncode in (0, -15), (tmp_path / "console.log").read_text()


def _stop(console: subprocess.Popen[bytes]) -> None:
    if console.poll() is None:
        os.killpg(console.pid, 15)
        console.wait(timeout=30)


def _refused(entry: dict[str, Any]) -> bool:
    """A connection the browser could not open to the stopped console (its own network log)."""
    return entry.get("source") == "network" and "/events" in str(entry.get("url", ""))


def _answers(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url + "healthz", timeout=2) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False

"""Headless Chromium for the incident report's browser tests: one-shot runs, a DevTools session, fixtures."""

# Needs Debian's `chromium` and `fonts-noto-cjk` (run scripts/ensure-debian-tools chromium:chromium
# fonts-noto-cjk). Missing Chromium or the font is a failure, not a skip.

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from bench.devtools import DevToolsPipe
from tests.unit.report_fixtures import Node, parse

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


# ------------------------------------------------------------------ driven over DevTools


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


@pytest.fixture(scope="module")
def devtools(browser: Browser) -> Iterator[DevTools]:
    tools = DevTools(browser.binary, browser.work)
    try:
        tools.open()
        yield tools
    finally:
        tools.close()

"""Headless Chromium driven through the DevTools protocol over ``--remote-debugging-pipe``.

The browser reads commands on its fd 3 and answers on its fd 4, NUL-separated JSON. Used by the
report benchmark (how long a large report takes to open) and by the report's browser tests.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: flags every run uses: headless, no sandbox (root in CI), no GPU, and no name resolves
BASE_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-extensions",
    "--host-resolver-rules=MAP * ~NOTFOUND",
)


class DevToolsError(RuntimeError):
    """Chromium did not answer in time, closed its pipe, or answered a command with an error."""


class DevToolsPipe:
    """One headless Chromium process and its DevTools pipe."""

    def __init__(
        self, binary: str, profile: Path, flags: Sequence[str] = BASE_FLAGS, timeout_s: float = 300.0
    ) -> None:
        self.timeout_s = timeout_s
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # high, non-inheritable copies for the shell to move onto 3 and 4 in the child
        child_in, child_out = fcntl.fcntl(to_r, fcntl.F_DUPFD, 20), fcntl.fcntl(from_w, fcntl.F_DUPFD, 20)
        cmd = [binary, *flags, f"--user-data-dir={profile}", "--remote-debugging-pipe", "about:blank"]
        self.proc = subprocess.Popen(
            [
                "/bin/bash",
                "-c",
                f'exec "$@" 3<&{child_in} 4>&{child_out} {child_in}<&- {child_out}>&-',
                "sh",
                *cmd,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(child_in, child_out),
            start_new_session=True,
        )
        for fd in (to_r, from_w, child_in, child_out):
            os.close(fd)
        self.out, self.inp = to_w, from_r
        self.buffer = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        self.session = ""

    def close(self) -> None:
        os.close(self.out)
        os.close(self.inp)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.inp], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                raise DevToolsError(f"chromium did not answer within {self.timeout_s:g} s")
            chunk = os.read(self.inp, 1 << 16)
            if not chunk:
                raise DevToolsError("chromium closed its DevTools pipe")
            self.buffer += chunk
        message, self.buffer = self.buffer.split(b"\0", 1)
        value: dict[str, Any] = json.loads(message)
        return value

    def send(self, method: str, params: dict[str, Any] | None = None, *, browser: bool = False) -> Any:
        """Send one command (to the attached page unless ``browser``) and return its result."""
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if not browser:
            msg["sessionId"] = self.session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout_s
        while True:
            answer = self._read(deadline)
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise DevToolsError(f"{method}: {answer['error']}")
                return answer.get("result", {})
            self.events.append(answer)

    def wait_event(self, method: str) -> dict[str, Any]:
        """The next event named ``method`` (events received meanwhile are kept)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            for i, event in enumerate(self.events):
                if event.get("method") == method:
                    del self.events[i]
                    return event
            self.events.append(self._read(deadline))

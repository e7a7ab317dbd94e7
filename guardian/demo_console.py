"""The live console beside the demo's worker: ``guardian console`` as a subprocess on the demo's
topics, reading them from the start, its URL known (and printed) before anything else starts;
and the demo's ``--linger`` wait.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

STOP_TIMEOUT_S = 10.0


class ConsoleProcess:
    """``python -m guardian console`` with the demo's env, its output in a log file."""

    def __init__(self, host: str, port: int, log_path: Path) -> None:
        self.host, self.port, self.log_path = host, port, log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self, env: dict[str, str], worker_url: str) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        args = ["--from", "earliest", "--host", self.host, "--port", str(self.port)]
        if worker_url:
            args += ["--worker", worker_url]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "guardian", "console", *args],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None


def console_address(env: dict[str, str] | os._Environ[str], free_port: int) -> tuple[str, int]:
    """Where the demo's console listens: GUARDIAN_CONSOLE_HOST/PORT when set, else 127.0.0.1 and
    a free port (the default port may be taken by another console)."""
    host = env.get("GUARDIAN_CONSOLE_HOST", "").strip() or "127.0.0.1"
    port_text = env.get("GUARDIAN_CONSOLE_PORT", "").strip()
    return host, int(port_text) if port_text.isdigit() else free_port


def linger() -> None:
    """Wait until Ctrl-C (or SIGTERM, which the demo turns into one)."""
    with contextlib.suppress(KeyboardInterrupt):
        while True:
            time.sleep(3600)

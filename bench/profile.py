"""``guardian bench --profile``: where a measured process spends its CPU (py-spy, when installed).

py-spy (a sampling profiler, not a dependency of Guardian: ``pip install py-spy``) attaches to the
process for the measured phase and writes collapsed stacks; :func:`top` turns them into the
functions with the largest share of samples, by own time (``self``) and with what they call
(``total``). Idle samples (the event loop waiting) are left out, so the shares are of busy time.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def py_spy() -> str | None:
    """The py-spy executable (next to this Python first), or None."""
    here = Path(sys.executable).parent / "py-spy"
    if here.exists():
        return str(here)
    return shutil.which("py-spy")


class Profiler:
    """py-spy recording one process until :meth:`stop`."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.out = out
        self.proc: subprocess.Popen[bytes] | None = None
        exe = py_spy()
        if exe is None:
            return
        self.proc = subprocess.Popen(
            [exe, "record", "-p", str(pid), "-r", str(rate), "-f", "raw", "--nonblocking", "-o", str(out)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )

    def stop(self) -> dict[str, Any] | None:
        """Stop sampling; the top entries (None without py-spy or samples)."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        if not self.out.exists():
            return None
        return top(self.out.read_text(errors="replace").splitlines())


IDLE = ("select (selectors.py", "_run_once (asyncio/base_events.py", "poll (selectors.py")


def _frame(frame: str) -> str:
    # "function (path/file.py:123)" -> "function (path/file.py)"
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else name


def top(lines: list[str], n: int = 25) -> dict[str, Any]:
    """The ``n`` functions with most own samples and most inclusive samples, as shares of the busy
    samples (a stack whose innermost frame is the event loop's ``select`` is idle)."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    busy = idle = 0
    for line in lines:
        stack, _, count_s = line.rpartition(" ")
        try:
            count = int(count_s)
        except ValueError:
            continue
        frames = [_frame(f) for f in stack.split(";") if f]
        if not frames or frames[-1].startswith(IDLE) or "select (" in frames[-1]:
            idle += count
            continue
        busy += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    share = busy or 1
    return {
        "busy_samples": busy,
        "idle_samples": idle,
        "self": [(f, round(c / share, 3)) for f, c in own.most_common(n)],
        "total": [(f, round(c / share, 3)) for f, c in total.most_common(n + 15)],
    }


def describe(result: dict[str, Any], label: str) -> list[str]:
    lines = [
        f"profile of {label}: {result['busy_samples']} busy samples "
        f"({result['idle_samples']} idle left out); top by own time:"
    ]
    lines += [f"    {share:6.1%}  {frame}" for frame, share in result["self"]]
    lines.append("  top inclusive (with what they call):")
    lines += [f"    {share:6.1%}  {frame}" for frame, share in result["total"]]
    return lines

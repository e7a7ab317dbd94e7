"""``guardian replay`` as a user runs it: a subprocess free of the caller's ``GUARDIAN_*`` settings."""

from __future__ import annotations

import os
import subprocess
import sys


def replay(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if not k.startswith("GUARDIAN_") and k != "SOURCE_DATE_EPOCH"
    }
    return subprocess.run(
        [sys.executable, "-m", "guardian", "replay", *args],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )

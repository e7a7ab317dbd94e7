"""The Java that runs the local Kafka broker: ``JAVA_HOME``'s, else ``java`` on ``PATH``, checked to
be Java 17 or newer."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

from guardian.kafka_error import WAYS_OUT, BrokerError

MIN_JAVA = 17


def find_java(env: Mapping[str, str]) -> str:
    """The java executable, checked to be Java 17 or newer."""
    java: str | None = None
    home = env.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").is_file():
        java = str(Path(home) / "bin" / "java")
    if java is None:
        java = shutil.which("java", path=env.get("PATH", os.defpath))
    if java is None:
        raise BrokerError(f"Java is not on PATH (the local Kafka broker needs Java {MIN_JAVA}+): {WAYS_OUT}")
    try:
        result = subprocess.run(
            [java, "-version"],
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BrokerError(f"{java} -version did not answer ({exc}): {WAYS_OUT}") from exc
    major = java_major(result.stderr + result.stdout)
    if major is None or major < MIN_JAVA:
        found = f"Java {major}" if major is not None else "an unrecognised Java"
        raise BrokerError(f"{found} at {java}, the local Kafka broker needs Java {MIN_JAVA}+: {WAYS_OUT}")
    return java


def java_major(version_text: str) -> int | None:
    match = re.search(r'version "(\d+)(?:\.(\d+))?', version_text)
    if match is None:
        return None
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        return int(match.group(2))
    return major

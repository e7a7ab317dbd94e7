"""The local broker's failure messages, for real where cheap (no download, no broker start).

Each failure of ``guardian kafka ...`` must end with ONE line on stderr, no traceback, exit code 1, and
name a way out. A fake ``java`` (a shell script) stands in for Java where only its answers matter.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from config.exitcodes import Exit
from guardian.kafka_jars import mvn_reason
from guardian.kafka_java import java_major
from guardian.kafka_local import COMPLETE_MARKER, KAFKA_VERSION, free_port
from streams.admin import probe_broker, wait_for_broker
from tests.live import run_guardian

CLI_TIMEOUT_S = 120

FAKE_JAVA = """#!/bin/sh
# a stand-in for java: answers -version, StorageTool; the server dies at once
case "$*" in
  *-version*) echo 'openjdk version "{version}" 2025-01-01' >&2; exit 0 ;;
  *random-uuid*) echo 'q1Sh-9_ISia_zwGINzRvyQ'; exit 0 ;;
  *StorageTool*format*) echo 'Formatting metadata directory'; exit 0 ;;
  *kafka.Kafka*) echo '[2026-01-01 00:00:00,000] ERROR Exiting Kafka due to fatal exception'; exit 1 ;;
esac
exit 2
"""


def _bin_dir(tmp_path: Path, *, java_version: str | None = None) -> Path:
    """A PATH folder holding at most a fake java."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if java_version is not None:
        java = bin_dir / "java"
        java.write_text(FAKE_JAVA.format(version=java_version), encoding="utf-8")
        java.chmod(0o755)
    return bin_dir


def _env(tmp_path: Path, bin_dir: Path, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("GUARDIAN_") and k not in ("JAVA_HOME", "PATH", "XDG_CACHE_HOME")
    }
    env.update(
        PATH=str(bin_dir),
        GUARDIAN_DATA_DIR=str(tmp_path / "data"),
        GUARDIAN_KAFKA_JARS=str(tmp_path / "jars" / "libs"),
        XDG_CACHE_HOME=str(tmp_path / "cache"),
    )
    env.update(extra)
    return env


def _guardian(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return run_guardian(env, *args, timeout_s=CLI_TIMEOUT_S)


def _one_failure_line(result: subprocess.CompletedProcess[str], code: int = Exit.INTERNAL) -> str:
    """The single stderr line of a failed command (exit ``code``, no traceback)."""
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) >= 1
    assert lines[-1].startswith("guardian: ")
    return lines[-1]


def _assert_ways_out(line: str) -> None:
    assert "apt-get install openjdk-17-jre-headless maven" in line
    assert "docker compose up -d kafka" in line
    assert "GUARDIAN_KAFKA_BOOTSTRAP=127.0.0.1:9092" in line


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port something listens on."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        yield int(s.getsockname()[1])


@pytest.fixture
def foreign_process() -> Iterator[int]:
    """A live process that is not our broker (it must survive the stale-PID cleanup)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        stdin=subprocess.DEVNULL,
    )
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(timeout=10)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.DEVNULL)
    proc.wait(timeout=30)
    return proc.pid


def test_java_missing(tmp_path: Path) -> None:
    result = _guardian(_env(tmp_path, _bin_dir(tmp_path)), "kafka", "up")
    line = _one_failure_line(result)
    assert "Java is not on PATH" in line
    _assert_ways_out(line)
    assert result.stdout == ""


def test_java_too_old(tmp_path: Path) -> None:
    result = _guardian(_env(tmp_path, _bin_dir(tmp_path, java_version="11.0.2")), "kafka", "up")
    line = _one_failure_line(result)
    assert "Java 11 at " in line
    assert "needs Java 17+" in line
    _assert_ways_out(line)


def test_java_8_is_read_as_8(tmp_path: Path) -> None:
    result = _guardian(_env(tmp_path, _bin_dir(tmp_path, java_version="1.8.0_392")), "kafka", "up")
    assert "Java 8 at " in _one_failure_line(result)


def test_maven_missing_with_an_empty_jar_cache(tmp_path: Path) -> None:
    env = _env(tmp_path, _bin_dir(tmp_path, java_version="17.0.15"))
    for command in ("fetch", "up"):
        line = _one_failure_line(_guardian(env, "kafka", command))
        assert "Maven ('mvn') is not on PATH" in line
        assert str(tmp_path / "jars" / "libs") in line
        _assert_ways_out(line)


def test_busy_port(tmp_path: Path, busy_port: int) -> None:
    env = _env(tmp_path, _bin_dir(tmp_path, java_version="17.0.15"), GUARDIAN_KAFKA_PORT=str(busy_port))
    line = _one_failure_line(_guardian(env, "kafka", "up"))
    assert f"GUARDIAN_KAFKA_PORT={busy_port} is already in use" in line
    assert f"GUARDIAN_KAFKA_BOOTSTRAP=127.0.0.1:{busy_port}" in line


def test_port_not_a_number(tmp_path: Path) -> None:
    env = _env(tmp_path, _bin_dir(tmp_path, java_version="17.0.15"), GUARDIAN_KAFKA_PORT="ninety")
    line = _one_failure_line(_guardian(env, "kafka", "up"))
    assert "GUARDIAN_KAFKA_PORT must be a TCP port number" in line


def _write_pid(tmp_path: Path, content: str) -> Path:
    kafka_dir = tmp_path / "data" / "kafka"
    kafka_dir.mkdir(parents=True)
    (kafka_dir / "kafka.pid").write_text(content, encoding="utf-8")
    (kafka_dir / "bootstrap").write_text("127.0.0.1:1\n", encoding="utf-8")
    return kafka_dir


def test_stale_pid_of_a_dead_process_is_cleaned_by_status(tmp_path: Path) -> None:
    pid = _dead_pid()
    kafka_dir = _write_pid(tmp_path, f"{pid}\n")
    result = _guardian(_env(tmp_path, _bin_dir(tmp_path)), "kafka", "status")
    assert result.returncode == 3, result
    assert f"removed a stale PID file ({kafka_dir / 'kafka.pid'} names PID {pid}, which is not running)" in (
        result.stderr
    )
    assert "not running" in result.stdout
    assert not (kafka_dir / "kafka.pid").exists()
    assert not (kafka_dir / "bootstrap").exists()


def test_stale_pid_of_a_foreign_process_is_cleaned_and_up_goes_on(
    tmp_path: Path, foreign_process: int, busy_port: int
) -> None:
    """``up`` says it cleaned the PID file, then starts normally (here: up to the busy port)."""
    kafka_dir = _write_pid(tmp_path, f"{foreign_process}\n")
    env = _env(tmp_path, _bin_dir(tmp_path, java_version="17.0.15"), GUARDIAN_KAFKA_PORT=str(busy_port))
    result = _guardian(env, "kafka", "up")
    line = _one_failure_line(result)
    assert "is already in use" in line
    assert f"names PID {foreign_process}, which is not this broker's java); starting a new broker" in (
        result.stderr
    )
    assert not (kafka_dir / "kafka.pid").exists()
    os.kill(foreign_process, 0)  # still alive: never touched


def test_stale_pid_that_is_not_a_number(tmp_path: Path) -> None:
    kafka_dir = _write_pid(tmp_path, "garbage\n")
    result = _guardian(_env(tmp_path, _bin_dir(tmp_path)), "kafka", "down")
    assert result.returncode == 0, result
    assert "removed a stale PID file" in result.stderr
    assert "was not running" in result.stdout
    assert not (kafka_dir / "kafka.pid").exists()


def test_download_failure(tmp_path: Path) -> None:
    """mvn offline against an empty local repository cannot resolve anything."""
    if shutil.which("mvn") is None or shutil.which("java") is None:
        pytest.skip("needs mvn and java")
    env = _env(
        tmp_path,
        tmp_path,
        PATH=os.environ["PATH"],
        GUARDIAN_MAVEN_ARGS=f"-o -Dmaven.repo.local={tmp_path / 'm2'}",
    )
    line = _one_failure_line(_guardian(env, "kafka", "fetch"))
    assert f"downloading the Kafka {KAFKA_VERSION} jars with Maven failed (" in line
    reason = line.split("jars with Maven failed (", 1)[1].split("): check access", 1)[0]
    assert reason.startswith("No plugin found for prefix 'dependency'")  # mvn's own first [ERROR] line
    assert "retry 'guardian kafka fetch'" in line
    _assert_ways_out(line)
    jars = tmp_path / "jars"
    assert not (jars / "libs").exists()  # nothing half-made is taken for a complete download
    assert [p.name for p in jars.iterdir()] == []


def test_broker_exits_during_start(tmp_path: Path) -> None:
    libs = tmp_path / "jars" / "libs"
    libs.mkdir(parents=True)
    (libs / COMPLETE_MARKER).write_text("test\n", encoding="utf-8")
    env = _env(tmp_path, _bin_dir(tmp_path, java_version="17.0.15"))
    line = _one_failure_line(_guardian(env, "kafka", "up"))
    log = tmp_path / "data" / "kafka" / "logs" / "server.log"
    assert f"the Kafka broker exited during start (exit code 1); see the last lines of {log}" in line
    assert "ERROR Exiting Kafka due to fatal exception" in line
    assert not (tmp_path / "data" / "kafka" / "kafka.pid").exists()
    assert not (tmp_path / "data" / "kafka" / "bootstrap").exists()


@pytest.mark.parametrize(
    ("text", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"', 8),
        ("no version here", None),
    ],
)
def test_java_major(text: str, major: int | None) -> None:
    assert java_major(text) == major


def test_mvn_reason_takes_the_first_error() -> None:
    out = (
        "\x1b[1;31m[ERROR]\x1b[m Failed to execute goal on project x: Could not resolve dependencies\n"
        "[ERROR] -> [Help 1]\n"
    )
    assert mvn_reason(out, 1) == "Failed to execute goal on project x: Could not resolve dependencies"
    assert mvn_reason("", 3) == "mvn exit code 3"
    assert mvn_reason("[ERROR] No plugin found for prefix 'dependency' -> [Help 1]", 1) == (
        "No plugin found for prefix 'dependency'"
    )


def test_topics_create_without_a_broker_is_one_line(tmp_path: Path) -> None:
    env = _env(
        tmp_path,
        tmp_path,
        PATH=os.environ.get("PATH", ""),
        GUARDIAN_KAFKA_BOOTSTRAP=f"127.0.0.1:{free_port()}",
    )
    line = _one_failure_line(_guardian(env, "topics", "create"), Exit.BROKER_UNREACHABLE)
    assert "did not answer" in line
    assert "guardian kafka up" in line
    assert len([ln for ln in _guardian(env, "topics", "create").stderr.splitlines() if ln.strip()]) == 1


def test_topics_create_with_no_broker_configured(tmp_path: Path) -> None:
    result = _guardian(_env(tmp_path, tmp_path, PATH=os.environ.get("PATH", "")), "topics", "create")
    assert result.returncode == 2
    assert "guardian kafka up" in result.stderr


async def test_wait_for_broker_gives_up_in_time() -> None:
    address = f"127.0.0.1:{free_port()}"
    assert await probe_broker(address, 1.0) is False
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=f"no Kafka broker answered at {address}"):
        await asyncio.wait_for(wait_for_broker(address, 1.0), 10)
    assert time.monotonic() - started < 5

"""A worker's checks: faust's private parts, its settings, and a broker that does not answer (one line)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from config.exitcodes import Exit
from config.settings import Settings, SettingsError
from guardian.kafka_local import free_port
from streams.memory_broker import MemoryProducer
from streams.seam.check import check
from streams.seam.parts import SeamError
from streams.seam.reads import changelog_topic_names
from streams.seam.recovery import RecoveryWatch
from streams.seam.table_writes import RocksStores
from tests.unit.shell_fakes import shell_over


def test_a_missing_private_attribute_names_the_versions_and_the_attribute() -> None:
    with pytest.raises(SeamError) as err:
        RocksStores().dbs(SimpleNamespace(data=object()))
    text = str(err.value)
    assert "faust.stores.rocksdb.Store._dbs" in text
    assert "faust-streaming 0.15.3" in text and "aiokafka 0.14.0" in text
    with pytest.raises(SeamError, match=r"Recovery\.completed"):
        app = SimpleNamespace(tables=SimpleNamespace(recovery=SimpleNamespace()), consumer_generation_id=1)
        RecoveryWatch(app).state()


def test_the_seam_check_passes_on_the_pinned_versions(tmp_path: Path) -> None:
    from streams.worker import build_worker_app

    settings = Settings.from_env({"GUARDIAN_DATA_DIR": str(tmp_path), "GUARDIAN_TOPIC_PREFIX": "s."})
    app, shell = build_worker_app(settings, bootstrap="127.0.0.1:9", worker_id="w0")
    check(app, shell.tables.all())
    assert changelog_topic_names(shell.tables.all()) == [
        "s.worker-devices-changelog",
        "s.worker-seen-changelog",
        "s.worker-owners-changelog",
    ]


def test_the_dedup_sweep_without_a_store_is_an_error_not_zero(tmp_path: Path) -> None:
    shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
    shell.tables.seen = SimpleNamespace(data=object(), name="seen")
    with pytest.raises(SeamError):
        shell.sweep(0, 1_000)


def test_web_readiness_and_deferral_settings(tmp_path: Path) -> None:
    from streams.worker import build_worker_app

    s = Settings.from_env({})
    assert (s.web_port, s.web_host, s.ready_timeout_s, s.defer_state_s) == (6066, "127.0.0.1", 60.0, 2.0)
    s = Settings.from_env(
        {
            "GUARDIAN_WEB_PORT": "0",
            "GUARDIAN_WEB_HOST": "0.0.0.0",
            "GUARDIAN_READY_TIMEOUT_S": "5",
            "GUARDIAN_DEFER_STATE_S": "0",
            "GUARDIAN_DATA_DIR": str(tmp_path),
        }
    )
    assert (s.web_port, s.web_host, s.ready_timeout_s, s.defer_state_s) == (0, "0.0.0.0", 5.0, 0.0)
    app, shell = build_worker_app(s, bootstrap="127.0.0.1:9", worker_id="t")
    assert shell.batch.deferred.after_s == 0.0  # the worker's flushes never keep table writes back
    app.consumer._thread.thread_loop.close()
    for env, says in (
        ({"GUARDIAN_WEB_PORT": "http"}, "GUARDIAN_WEB_PORT must be a port number"),
        ({"GUARDIAN_WEB_PORT": "70000"}, "GUARDIAN_WEB_PORT must be between"),
        ({"GUARDIAN_READY_TIMEOUT_S": "0"}, "GUARDIAN_READY_TIMEOUT_S must be more than 0"),
        ({"GUARDIAN_DEFER_STATE_S": "soon"}, "GUARDIAN_DEFER_STATE_S must be a number of seconds"),
        ({"GUARDIAN_DEFER_STATE_S": "-1"}, "GUARDIAN_DEFER_STATE_S must be between 0 \\(off\\) and 60"),
        ({"GUARDIAN_DEFER_STATE_S": "nan"}, "GUARDIAN_DEFER_STATE_S must be between"),
    ):
        with pytest.raises(SettingsError, match=f"^{says}"):
            Settings.from_env(env)


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A port that accepts connections and never answers."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        s.listen(16)
        yield f"127.0.0.1:{s.getsockname()[1]}"


def _run(args: list[str], bootstrap: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "GUARDIAN_KAFKA_BOOTSTRAP": bootstrap,
        "GUARDIAN_DATA_DIR": str(tmp_path / "data"),
        "GUARDIAN_WEB_PORT": str(free_port()),
    }
    return subprocess.run(
        [sys.executable, "-m", "guardian", *args],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("command", [["worker"], ["export", "--out", "-"]])
@pytest.mark.parametrize("kind", ["refused", "silent"])
def test_no_broker_is_one_line_with_the_address_and_a_hint(
    command: list[str], kind: str, silent_broker: str, tmp_path: Path
) -> None:
    bootstrap = silent_broker if kind == "silent" else f"127.0.0.1:{free_port()}"
    done = _run(command, bootstrap, tmp_path)
    assert done.returncode == Exit.BROKER_UNREACHABLE, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, done.stderr
    assert bootstrap in lines[0] and "guardian kafka up" in lines[0]
    assert "\x1b" not in done.stderr + done.stdout

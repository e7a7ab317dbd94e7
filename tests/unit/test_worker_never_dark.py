"""A worker never goes dark: readiness says what is missing and tells a wait past its timeout once
(the worker keeps trying), faust's private parts are checked at start, bad control records are
told, metrics count delivered batches, and commands against a broker that does not answer end in
one line with the shared exit code."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP
from prometheus_client.parser import text_string_to_metric_families

from config.exitcodes import Exit
from config.settings import Settings, SettingsError
from guardian.kafka_local import free_port
from streams.health import Readiness
from streams.memory_broker import MemoryProducer
from streams.metrics import GuardianMetrics
from streams.seam.check import check
from streams.seam.parts import SeamError
from streams.seam.reads import FetchState, changelog_topic_names, fetch_states
from streams.seam.recovery import RecoveryWatch
from streams.seam.table_writes import RocksStores
from streams.stalls import InputWatch, WaitClock
from tests.unit.test_shell_flush import Acked, handed_over, shell_over
from topics.envelope import Out

# -- readiness ------------------------------------------------------------------------------------


class FakeEvent:
    def __init__(self, value: bool = False) -> None:
        self.value = value

    def is_set(self) -> bool:
        return self.value


def fake_app(*, completed: bool, remaining: int = 0, producer: bool = True, flowing: bool = True) -> Any:
    tp = TP("p.worker-devices-changelog", 0)
    recovery = SimpleNamespace(
        completed=FakeEvent(completed),
        active_highwaters={tp: 99},
        active_offsets={tp: 99 - remaining},
        _generation_id=1,
        signal_recovery_start=FakeEvent(False),
    )
    return SimpleNamespace(
        consumer_generation_id=1,
        tables=SimpleNamespace(recovery=recovery),
        producer=SimpleNamespace(_producer=SimpleNamespace(_closed=False) if producer else None),
        flow_control=SimpleNamespace(is_active=lambda: flowing),
        consumer=SimpleNamespace(
            assignment=lambda: {TP("p.plans", 0), TP("p.worker-owners-changelog", 0), TP("p.plans", 1)}
        ),
    )


def readiness_over(app: Any, timeout_s: float, on_timeout: Any, clock: WaitClock | None = None) -> Readiness:
    """Readiness of a fake app whose generation's recovery has ended if faust says so (the real
    objects: ``test_recovery_per_assignment``)."""
    watch = RecoveryWatch(app)
    if app.tables.recovery.completed.is_set():
        watch.on_rebalance_complete()
    return Readiness(app, timeout_s, on_timeout, watch, clock or WaitClock())


def test_readiness_names_what_is_missing() -> None:
    app = fake_app(completed=False, remaining=5, producer=False)
    readiness = readiness_over(app, 60.0, lambda reason: None)
    assert readiness.missing() == [
        "no partition assignment from the consumer group yet",
        "the Kafka producer is not running",
    ]
    readiness.on_assigned()
    assert readiness.missing()[0] == "table recovery not complete (5 changelog records to read)"
    app.tables.recovery.completed.value = True
    readiness.recovery.on_rebalance_complete()
    app.producer._producer = SimpleNamespace(_closed=False)
    app.flow_control.is_active = lambda: False
    assert readiness.missing() == ["the stream is suspended (a rebalance is in progress)"]
    app.flow_control.is_active = lambda: True
    assert readiness.missing() == []


def test_a_worker_never_assigned_says_so_once_per_wait_and_keeps_trying() -> None:
    reasons: list[str] = []
    t = [0.0]
    clock = WaitClock(monotonic=lambda: t[0])
    readiness = readiness_over(fake_app(completed=True), 5.0, reasons.append, clock)
    readiness.check(1.0)
    assert reasons == []
    readiness.check(6.0)
    readiness.check(7.0)  # said once
    assert len(reasons) == 1 and readiness.wait.timeouts == 1
    assert "not ready after 6 s" in reasons[0] and "GUARDIAN_READY_TIMEOUT_S=5), still trying" in reasons[0]
    assert "no partition assignment" in reasons[0]
    assert readiness.missing() == ["no partition assignment from the consumer group yet"]
    t[0] = 100.0
    readiness.on_assigned()  # the assignment comes after all: ready
    assert readiness.check(100.0) == [] and readiness.missing() == []
    readiness.on_revoked()  # a new wait, told again past the timeout
    readiness.check(101.0)
    assert len(reasons) == 1
    readiness.check(105.5)
    assert len(reasons) == 2 and readiness.wait.timeouts == 2


def test_a_recovery_that_moves_is_waited_for_and_one_that_stalls_is_not() -> None:
    reasons: list[str] = []
    app = fake_app(completed=False, remaining=50)
    readiness = readiness_over(app, 5.0, reasons.append)
    readiness.on_assigned()
    start = time.monotonic()
    tp = next(iter(app.tables.recovery.active_offsets))
    for step in range(1, 6):  # progress every 4 s: still waiting after 20 s
        app.tables.recovery.active_offsets[tp] += 5
        readiness.check(start + 4 * step)
    assert reasons == []
    readiness.check(start + 4 * 5 + 6)  # no progress for 6 s
    assert len(reasons) == 1 and "table recovery not complete" in reasons[0]
    assert reasons[0].endswith("; assigned partitions of p.plans, p.worker-owners-changelog")


def test_the_reason_names_the_topics_from_the_real_consumer() -> None:
    """The reason asks faust's own consumer (a fake that answered what faust's does not hid a
    crash: the watchdog died when it gave up on an assigned worker, which then never exited)."""
    from streams.app import GuardianApp
    from streams.seam.reads import assigned_topics

    app = GuardianApp("ready-topics", broker="kafka://127.0.0.1:1", store="memory://", web_enabled=False)
    try:
        assert assigned_topics(app.consumer) == []  # not started: no assignment yet
    finally:
        app.consumer._thread.thread_loop.close()  # type: ignore[attr-defined]


def test_ready_again_after_a_rebalance() -> None:
    reasons: list[str] = []
    app = fake_app(completed=True)
    readiness = readiness_over(app, 5.0, reasons.append)
    readiness.on_assigned()
    assert readiness.check(time.monotonic()) == []
    readiness.on_revoked()
    assert readiness.check(time.monotonic()) != []
    readiness.on_assigned()
    assert readiness.check(time.monotonic()) == []
    assert reasons == []


class Inputs:
    """An input partition as the watch sees it: the broker's end, the committed offset, the fetch."""

    def __init__(self) -> None:
        self.high, self.committed, self.position = 2500, None, 2500
        self.idle = True
        self.answered_ms: int | None = 0

    def lag(self) -> dict[tuple[str, int], tuple[int, int | None]]:
        return {("p.observations", 2): (self.high, self.committed), ("p.plans", 2): (10, 10)}

    def fetch(self) -> dict[tuple[str, int], FetchState]:
        return {
            ("p.observations", 2): FetchState(self.position, False, True, self.answered_ms),
            ("p.plans", 2): FetchState(10, False, True, self.answered_ms),
        }

    def watch(self) -> InputWatch:
        return InputWatch(self.lag, self.fetch, lambda: self.idle, after_s=30.0)


def test_a_partition_that_moves_or_waits_on_a_busy_pipeline_or_a_silent_broker_is_not_starved() -> None:
    inputs = Inputs()
    watch = inputs.watch()
    wall = 1_000_000
    inputs.answered_ms = wall
    assert watch.starved(0.0, wall) == []
    inputs.committed = 100  # committed meanwhile: it moves
    assert watch.starved(25.0, wall) == []
    assert watch.starved(50.0, wall) == []
    assert watch.starved(56.0, wall) != []  # 31 s without a commit
    inputs.idle = False  # the pipeline works (a backlog elsewhere): it gets there
    assert watch.starved(57.0, wall) == []
    inputs.idle = True
    assert watch.starved(58.0, wall + 31_000) == []  # no answer from the broker for 31 s
    assert watch.starved(58.0, wall + 29_000) != []
    inputs.committed = inputs.high  # read to its end: nothing to wait for
    assert watch.starved(90.0, wall) == []
    assert watch.starved(200.0, wall) == []
    inputs.committed = 100
    watch.starved(200.0, wall)
    watch.reset()  # partitions moved: the clock starts again
    assert watch.starved(220.0, wall) == []


def test_the_fetch_state_of_a_partition_reads_faust_and_aiokafka() -> None:
    """The seam reads where aiokafka's fetch stands and whether faust asks for the partition."""
    tp, other = TP("p.observations", 2), TP("p.plans", 2)
    state = SimpleNamespace(has_valid_position=True, position=2500, timestamp=123)
    fresh = SimpleNamespace(has_valid_position=False, position=None, timestamp=None)
    assignment = SimpleNamespace(tps={tp, other}, state_value={tp: state, other: fresh}.get)
    aio = SimpleNamespace(
        _subscription=SimpleNamespace(subscription=SimpleNamespace(assignment=assignment)),
        _fetcher=SimpleNamespace(_records={other: object()}),
    )
    consumer = SimpleNamespace(_thread=SimpleNamespace(_consumer=aio), _active_partitions={other})
    assert fetch_states(consumer) == {
        ("p.observations", 2): FetchState(2500, False, False, 123),
        ("p.plans", 2): FetchState(None, True, True, None),
    }
    consumer._thread._consumer = None  # not running
    assert fetch_states(consumer) == {}


# -- the seam -------------------------------------------------------------------------------------


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


# -- control records ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"op": "explode"}', "unknown op 'explode'"),
        (b'{"op": "verdict", "device_id": "d"}', "op 'verdict' without a usable"),
    ],
)
def test_a_bad_control_record_is_logged_and_counted(
    tmp_path: Path, raw: bytes, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    from topics.envelope import Coords

    shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
    shell.reports.metrics = GuardianMetrics()
    shell.control(raw, Coords("control", 2, 17), 1_000)
    assert said in caplog.text and "control:2:17" in caplog.text.replace(" ", "")
    assert shell.reports.metrics.irregular.control_rejected._value.get() == 1


# -- metrics --------------------------------------------------------------------------------------


def scrape(metrics: GuardianMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_a_batch_is_counted_once_delivered_and_never_when_dropped(tmp_path: Path) -> None:
    async def main() -> GuardianMetrics:
        producer = MemoryProducer(hold=True)
        shell, _ = shell_over(tmp_path, producer, Acked())
        shell.reports.metrics = shell.batch.delivery.metrics = metrics = GuardianMetrics()
        # a batch dropped by a rebalance is read again: not counted
        shell.batch.tally.inputs["observations"] += 1
        shell.emit([Out("deadletter", "d", {"reason_code": "not_json"})])
        shell.drop_unflushed()
        shell.batch.tally.inputs["observations"] += 2
        shell.emit(
            [
                Out("timeline", "d", {"stage": "drop", "drop_reason": "duplicate"}),
                Out("decisions", "d", {"decision": "return_to_station", "backend": "rules"}),
                Out("dispatch", "d", {"dispatch_id": "x"}),
            ],
            int(time.time() * 1000) - 50,
        )
        shell.batch.unacked = ["m1", "m2"]
        await shell.flush()
        await handed_over(producer)
        assert scrape(metrics).get(("guardian_input_records_total", (("topic", "observations"),))) is None
        for fut in producer.futures:
            fut.set_result(SimpleNamespace(offset=0))
        await asyncio.gather(*shell.batch.acking)
        return metrics

    found = scrape(asyncio.run(main()))
    assert found[("guardian_input_records_total", (("topic", "observations"),))] == 2
    assert found[("guardian_output_records_total", (("topic", "timeline"),))] == 1
    assert ("guardian_dead_letters_total", (("reason", "not_json"),)) not in found
    assert found[("guardian_timeline_drops_total", (("reason", "duplicate"),))] == 1
    key = ("guardian_decisions_total", (("backend", "rules"), ("decision", "return_to_station")))
    assert found[key] == 1
    assert found[("guardian_trigger_to_dispatch_seconds_count", ())] == 1
    assert found[("guardian_trigger_to_dispatch_seconds_bucket", (("le", "0.01"),))] == 0
    assert found[("guardian_batch_records_count", ())] == 1
    assert found[("guardian_flush_duration_seconds_count", ())] == 1
    assert found[("process_resident_memory_bytes", ())] > 0


# -- settings -------------------------------------------------------------------------------------


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


# -- commands against a broker that does not answer -----------------------------------------------


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

"""``guardian demo`` (``make demo``): the whole job on one machine, start to report.

1. a broker: ``GUARDIAN_KAFKA_BOOTSTRAP`` when set, else the local one (``guardian kafka up``;
   stopped at the end only if the demo started it);
2. every topic under a fresh prefix (``demo<timestamp><hex>.``), so reruns never collide;
3. a ``guardian worker`` subprocess on those topics;
4. the simulated fleet in this process, every scenario of docs/SCENARIOS.md round-robin (``--mix``),
   with a live table of experiences by phase and status;
5. the run's topics exported to ``OUT/topics.jsonl`` (the ``kcat -C -J`` format of docs/CONTRACTS.md §12);
6. ``guardian replay`` over that export into OUT (``decisions.jsonl`` … ``summary.json``,
   ``report.html``), compared with the live final statuses.

Everything it started is stopped on the way out, Ctrl-C included.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

import orjson
from aiokafka.errors import KafkaError

from config.exitcodes import Exit, sigterm_as_interrupt
from config.settings import Settings, SettingsError
from guardian.demo_console import ConsoleProcess, console_address, linger
from guardian.export import export_topics
from streams.admin import admin_client, create_topics, delete_topics
from topics.names import INPUT_SUFFIXES, TopicNames

BROKER_UP_TIMEOUT_S = 300.0
WORKER_STOP_TIMEOUT_S = 20.0
REQUEST_TIMEOUT_MS = 30_000
EXPORT_TIMEOUT_S = 300.0
METADATA_ATTEMPTS = 10


class DemoError(RuntimeError):
    """The demo cannot go on; the message says why and what to do."""


async def delete_prefixed_topics(bootstrap: str, prefix: str) -> int:
    """Delete every topic whose name starts with ``prefix`` (the run's and the worker's own)."""
    async with admin_client(bootstrap) as admin:
        found = [t for t in await admin.list_topics() if str(t).startswith(prefix)]
    await delete_topics(bootstrap, found, timeout_s=60.0)
    return len(found)


# ------------------------------------------------------------------------------------------------
# the worker subprocess
# ------------------------------------------------------------------------------------------------


class WorkerProcess:
    """``python -m guardian worker`` with its own env, its output in a log file."""

    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = env
        self.log_path = log_path
        self.metrics_url = ""
        if env.get("GUARDIAN_WEB_PORT", "") not in ("", "0"):
            host = env.get("GUARDIAN_WEB_HOST") or "127.0.0.1"
            self.metrics_url = f"http://{host}:{env['GUARDIAN_WEB_PORT']}/metrics"
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "guardian", "worker"],
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def stop(self, timeout_s: float = WORKER_STOP_TIMEOUT_S) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout_s``; the exit code (None if it never started)."""
        proc, self.proc = self.proc, None
        code: int | None = None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    proc.wait(timeout=10)
            code = proc.returncode
        if self._log is not None:
            self._log.close()
            self._log = None
        return code


def _tail(path: Path, lines: int = 15) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


# ------------------------------------------------------------------------------------------------
# the command
# ------------------------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(message, flush=True)


def _fresh_prefix() -> str:
    return f"demo{time.strftime('%Y%m%d%H%M%S')}{secrets.token_hex(2)}."


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """Broker, topics, worker, simulated fleet, export, replay and report; 0 if every scenario was OK.

    SIGINT and SIGTERM stop it cleanly: the worker, the run's topics and a broker it started go."""
    with sigterm_as_interrupt():
        return _demo(args, settings)


def _demo(args: argparse.Namespace, settings: Settings) -> int:
    from guardian.kafka_local import BrokerError, LocalBroker, free_port
    from guardian.replay import read_kcat_lines, replay_records, write_outputs
    from simulator.cli import LiveTable
    from simulator.fleet import FleetConfig, format_table
    from simulator.kafka import run_simulation

    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retried metadata races of fresh topics
    out_dir = Path(args.out).resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.monotonic()
    broker: Any = None
    worker: WorkerProcess | None = None
    work_dir = Path(tempfile.mkdtemp(prefix="guardian-demo-"))
    bootstrap: str | None = settings.bootstrap
    prefix = _fresh_prefix()
    names = TopicNames(prefix)
    topics_made = False
    code: int = Exit.INTERNAL
    console = ConsoleProcess(*console_address(os.environ, free_port()), out_dir / "console.log")
    _say(f"console: {console.url} (live, read-only; starts beside the worker)")
    try:
        if bootstrap is None:
            local = LocalBroker.from_settings(settings)
            _say("starting the local Kafka broker (the first run fetches its jars) ...")
            try:
                bootstrap = local.up(timeout_s=BROKER_UP_TIMEOUT_S)
            except BrokerError as exc:
                raise DemoError(str(exc)) from exc
            if local.started:
                broker = local
            _say(f"broker {bootstrap} ({'started' if local.started else 'already running'})")
        else:
            _say(f"broker {bootstrap} (GUARDIAN_KAFKA_BOOTSTRAP)")
        asyncio.run(create_topics(bootstrap, names, settings.partitions))
        topics_made = True
        _say(f"topics under prefix {prefix!r}, {settings.partitions} partitions each")

        env = dict(os.environ)
        env.update(
            GUARDIAN_WEB_PORT=os.environ.get("GUARDIAN_WEB_PORT") or str(free_port()),
            GUARDIAN_KAFKA_BOOTSTRAP=bootstrap,
            GUARDIAN_TOPIC_PREFIX=prefix,
            GUARDIAN_PARTITIONS=str(settings.partitions),
            GUARDIAN_DATA_DIR=str(work_dir),
            GUARDIAN_SUPERVISOR=settings.supervisor,
            GUARDIAN_LANGUAGE=settings.language,
        )
        worker = WorkerProcess(env, out_dir / "worker.log")
        worker.start()
        _say(f"worker started (log {out_dir / 'worker.log'})")
        if worker.metrics_url:
            ready_url = worker.metrics_url.removesuffix("metrics") + "ready"
            _say(f"worker metrics: {worker.metrics_url} (readiness: {ready_url})")
        console.start(env, worker.metrics_url.removesuffix("/metrics"))
        _say(f"console started: {console.url} (log {out_dir / 'console.log'})")

        config = FleetConfig(
            devices=args.devices,
            mix=True,
            seed=args.seed,
            speed=args.speed,
            timeout_s=args.timeout,
            rate=args.rate,
            patrol_seconds=args.patrol_seconds,
            device_prefix=f"demo{args.seed}-",
        )
        live = LiveTable()
        running = worker
        restarts: list[int] = []

        def tick(fleet: Any) -> None:
            exit_code = running.exited()
            if exit_code is not None:
                if restarts:
                    raise DemoError(f"the worker exited with code {exit_code}:\n{_tail(running.log_path)}")
                # its tables recover from their changelogs; the records it missed are still in Kafka
                restarts.append(exit_code)
                _say(f"the worker exited (code {exit_code}); starting it again")
                running.stop()
                running.start()
            live(fleet)

        _say(f"simulating {config.devices} devices, every scenario round-robin, {config.speed:g}x speed ...")
        t_fleet = time.monotonic()
        report = asyncio.run(run_simulation(config, bootstrap=bootstrap, names=names, on_tick=tick))
        fleet_s = time.monotonic() - t_fleet
        (out_dir / "simulation.json").write_bytes(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2))
        _say("")
        _say(format_table(report.rows, with_device=False))
        ok_rows = sum(1 for r in report.rows if r.ok)
        _say(
            f"{ok_rows}/{len(report.rows)} experiences met their scenario's expected outcome "
            f"in {fleet_s:.1f} s" + (" (TIMED OUT)" if report.timed_out else "")
        )
        for err in report.errors[:10]:
            _say(f"error: {err}")

        if not args.linger:
            worker.stop()
            worker = None

        export_path = out_dir / "topics.jsonl"
        n = asyncio.run(export_topics(bootstrap, names.contract_topics(), export_path))
        _say(f"exported {n} records to {export_path}")
        replay_settings = settings.with_overrides(topic_prefix=prefix)
        records = list(read_kcat_lines(export_path, names))
        inputs = sum(1 for r in records if r.suffix in INPUT_SUFFIXES)
        complete = inputs >= report.totals.get("records_sent", 0)
        if not complete:
            _say(
                f"warning: the export holds {inputs} input records, "
                f"the fleet sent {report.totals['records_sent']}"
            )
        result = replay_records(records, settings=replay_settings)
        write_outputs(result, out_dir)
        replayed: dict[str, str] = result.summary.get("experiences", {})
        same = sum(1 for r in report.rows if replayed.get(r.experience) == r.status)
        _say(
            f"replay: the same final status for {same}/{len(report.rows)} experiences, "
            f"{len(result.divergences)} decision divergences"
        )
        _say(f"report: {out_dir / 'report.html'}")
        _say(f"demo done in {time.monotonic() - t_start:.0f} s")
        code = 0 if report.ok and complete and same == len(report.rows) and not result.divergences else 1
        if args.linger:
            _say(f"lingering: broker, worker and console stay up ({console.url}); Ctrl-C to stop")
            linger()
    except (DemoError, SettingsError) as exc:
        print(f"guardian demo: {exc}", file=sys.stderr)
        code = Exit.INTERNAL
    except (KafkaError, OSError, TimeoutError) as exc:
        print(f"guardian demo: Kafka or I/O failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        code = Exit.BROKER_UNREACHABLE if isinstance(exc, (KafkaError, TimeoutError)) else Exit.INTERNAL
    finally:
        console.stop()
        _cleanup(
            worker, broker, bootstrap, prefix if topics_made and not args.keep_topics else None, work_dir
        )
    return code


def _cleanup(
    worker: WorkerProcess | None, broker: Any, bootstrap: str | None, prefix: str | None, work: Path
) -> None:
    """Stop what the demo started: the worker, the run's topics, the broker if it started it."""
    if worker is not None:
        worker.stop()
    if prefix is not None and bootstrap is not None:
        with contextlib.suppress(KafkaError, OSError, TimeoutError):
            asyncio.run(delete_prefixed_topics(bootstrap, prefix))
    if broker is not None:
        broker.down()
        _say("local broker stopped")
    shutil.rmtree(work, ignore_errors=True)

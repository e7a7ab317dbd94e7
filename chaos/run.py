"""One chaos run, start to verdict (see :mod:`chaos`)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from chaos import schedule
from chaos.cluster import TERM_GRACE_S, WorkerPool
from chaos.progress import ProgressWatch, pause_after, summarise
from chaos.verify import Verdict, export_and_replay, guardian
from config.settings import Settings
from guardian.kafka_local import LocalBroker
from streams.app import app_id
from topics.names import INPUT_SUFFIXES

#: after a rebalance, every partition with records moves again within this long (the scale shape)
PARTITION_MOVES_WITHIN_S = 60.0
#: after the broker is back, records flow again within this long (Kafka Streams' resilience test)
FLOWS_AFTER_BROKER_S = 120.0
#: the simulated fleets' own deadline (a wave caught by the broker's outage needs its 70 s more)
WAVE_TIMEOUT_S = 240.0
#: once the faults are over, how long the fleets still running may go on before they are stopped
#: (a device whose record the broker refused during its outage never ends its story)
WAVE_GRACE_S = 60.0
DRAIN_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ChaosConfig:
    seed: int
    duration_s: float
    out: Path
    shape: schedule.Shape = "storm"
    workers: int = 2
    partitions: int = 8
    wave_devices: int = 34
    wave_every_s: float = 30.0


@dataclass
class ChaosReport:
    config: ChaosConfig
    faults: list[dict[str, Any]] = field(default_factory=list)
    pauses: dict[str, dict[str, float | int | None]] = field(default_factory=dict)
    waves: list[int | None] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: workers started while the broker was stopped that gave up on it (exit 3, expected)
    broker_waits: int = 0
    verdict: Verdict | None = None

    @property
    def ok(self) -> bool:
        return not self.problems and self.verdict is not None and self.verdict.ok

    def to_json(self) -> dict[str, Any]:
        c = self.config
        return {
            "seed": c.seed,
            "shape": c.shape,
            "duration_s": c.duration_s,
            "workers": c.workers,
            "partitions": c.partitions,
            "ok": self.ok,
            "faults": self.faults,
            "pauses": self.pauses,
            "waves_exit_codes": self.waves,
            "broker_wait_exits": self.broker_waits,
            "problems": self.problems + (self.verdict.problems if self.verdict else []),
            "counts": self.verdict.counts if self.verdict else {},
        }


class ChaosRun:
    """The broker, the pool, the fleets and the faults of one seed."""

    def __init__(self, config: ChaosConfig, say: Callable[[str], None]) -> None:
        self.config = config
        self.say = say
        self.report = ChaosReport(config)
        self.faults = schedule.plan(config.seed, config.duration_s, config.workers, config.shape)
        self.prefix = f"chaos{config.seed}."
        self.broker = LocalBroker(config.out / "kafka")
        self.env: dict[str, str] = {}
        self.started = time.monotonic()
        self.pool: WorkerPool | None = None
        self.fault_times: list[tuple[schedule.Fault, float]] = []
        self.wave_procs: list[asyncio.subprocess.Process] = []

    def t(self) -> float:
        return time.monotonic() - self.started

    def log(self, message: str) -> None:
        self.say(f"[t+{self.t():6.1f}s] {message}")

    # ------------------------------------------------------------------ the run
    def run(self) -> ChaosReport:
        c = self.config
        c.out.mkdir(parents=True, exist_ok=True)
        for f in self.faults:
            self.say(f"  fault {f.describe()}")
        bootstrap = self.broker.up()
        try:
            self.env = {
                **os.environ,
                "GUARDIAN_KAFKA_BOOTSTRAP": bootstrap,
                "GUARDIAN_TOPIC_PREFIX": self.prefix,
                "GUARDIAN_PARTITIONS": str(c.partitions),
                "GUARDIAN_DATA_DIR": str(c.out / "data"),
            }
            guardian(self.env, "topics", "create", timeout_s=120)
            asyncio.run(self._live(bootstrap))
            self.log("exporting and replaying")
            self.report.verdict = export_and_replay(self.env, self.prefix, c.out)
        finally:
            if self.pool is not None:
                self.pool.stop_all()
            self.broker.down()
        (c.out / "chaos.json").write_bytes(orjson.dumps(self.report.to_json(), option=orjson.OPT_INDENT_2))
        return self.report

    async def _live(self, bootstrap: str) -> None:
        c = self.config
        self.started = time.monotonic()
        self.pool = WorkerPool(c.workers, self.env, c.out / "logs", c.out / "data" / "worker", self.log)
        self.pool.start_all()
        settings = Settings.from_env({"GUARDIAN_TOPIC_PREFIX": self.prefix})
        watch = ProgressWatch(
            bootstrap, app_id(settings), [self.prefix + s for s in INPUT_SUFFIXES], c.partitions
        )
        watch.started_at = self.started
        stop = asyncio.Event()
        watcher = asyncio.create_task(watch.run(stop))
        upkeep = asyncio.create_task(self._upkeep(stop))
        waves = asyncio.create_task(self._waves())
        try:
            await self._faults()
            await asyncio.sleep(max(0.0, c.duration_s - self.t()))
            self.pool.fill()
            self.log("faults over; every worker running; waiting for the fleets")
            self.report.waves = await self._end_waves(waves)
            await self._drain(watch)
        finally:
            stop.set()
            await asyncio.gather(watcher, upkeep, return_exceptions=True)
            if not waves.done():
                waves.cancel()
            for p in self.wave_procs:
                if p.returncode is None:
                    p.kill()
        self._judge(watch)
        with (self.config.out / "progress.jsonl").open("wb") as fh:
            for sample in watch.samples:
                row = {
                    "at_s": round(sample.at_s, 2),
                    "committed": {f"{t}[{p}]": o for (t, p), o in sorted(sample.committed.items())},
                    "ends": {f"{t}[{p}]": o for (t, p), o in sorted(sample.ends.items())},
                }
                fh.write(orjson.dumps(row) + b"\n")

    async def _upkeep(self, stop: asyncio.Event) -> None:
        assert self.pool is not None
        while not stop.is_set():
            self.pool.tick()
            await asyncio.sleep(0.2)

    async def _end_waves(self, waves: asyncio.Task[None]) -> list[int | None]:
        """The fleets' exit codes, once they ended or were stopped after :data:`WAVE_GRACE_S`."""
        await waves
        ends = [asyncio.create_task(p.wait()) for p in self.wave_procs]
        if ends:
            await asyncio.wait(ends, timeout=WAVE_GRACE_S)
        for p in self.wave_procs:
            if p.returncode is None:
                p.terminate()
        return [await p.wait() for p in self.wave_procs]

    async def _waves(self) -> None:
        """A fleet playing every story, started every ``wave_every_s`` for the run's duration."""
        c = self.config
        procs = self.wave_procs
        wave = 0
        while self.t() < c.duration_s or wave == 0:
            log = (c.out / "logs" / f"wave-{wave}.log").open("ab")
            procs.append(
                await asyncio.create_subprocess_exec(
                    sys.executable,
                    "-m",
                    "guardian",
                    "simulate",
                    "--devices",
                    str(c.wave_devices),
                    "--mix",
                    "--seed",
                    str(c.seed * 1000 + wave),
                    "--device-prefix",
                    f"s{c.seed}w{wave}-",
                    "--timeout",
                    str(WAVE_TIMEOUT_S),
                    env=self.env,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            log.close()
            self.log(f"wave {wave}: {c.wave_devices} devices")
            wave += 1
            await asyncio.sleep(c.wave_every_s)

    async def _faults(self) -> None:
        """Each fault at its time, each in a task of its own (a broker outage does not hold back the
        worker faults scheduled during it)."""
        await asyncio.gather(*(self._fault(f) for f in self.faults))

    async def _alive_slot(self, prefer: int) -> int | None:
        """A slot with a running, not stopped worker, waiting up to 30 s for a replacement."""
        assert self.pool is not None
        for _ in range(300):
            slot = self.pool.any_alive_slot(prefer)
            if slot is not None:
                return slot
            await asyncio.sleep(0.1)
        return None

    async def _fault(self, fault: schedule.Fault) -> None:
        assert self.pool is not None
        pool = self.pool
        await asyncio.sleep(max(0.0, fault.at_s - self.t()))
        at = self.t()
        self.fault_times.append((fault, at))
        entry: dict[str, Any] = {"at_s": round(at, 2), "kind": fault.kind}
        self.report.faults.append(entry)
        if fault.kind == "broker":
            self.log("broker: stopping")
            pool.broker_stopped()
            await asyncio.to_thread(self.broker.down)
            await asyncio.sleep(fault.hold_s)
            await asyncio.to_thread(self.broker.restart)
            pool.broker_back()
            self.log("broker: back")
        elif fault.kind == "stop":
            slot = await self._alive_slot(fault.slot)
            entry["worker"] = pool.stop(slot) if slot is not None else None
            self.log(f"SIGSTOP {entry['worker']} for {fault.hold_s:.0f} s")
            await asyncio.sleep(fault.hold_s)
            if slot is not None:
                pool.resume(slot)
                self.log(f"SIGCONT {entry['worker']}")
        elif fault.kind == "term":
            entry["worker"], entry["exit_code"] = await self._term(fault)
        else:
            killed: list[str | None] = []
            for i, gap in enumerate((0.0, *fault.gaps_s)):
                await asyncio.sleep(gap)
                slot = pool.any_alive_slot(fault.slot + i) if i else await self._alive_slot(fault.slot)
                if slot is not None:
                    killed.append(pool.kill(slot, fault.replace_after_s, fault.fresh_folder))
            entry["workers"] = killed
            self.log(f"SIGKILL {', '.join(str(k) for k in killed) or 'nobody (none alive)'}")

    async def _term(self, fault: schedule.Fault) -> tuple[str | None, int | None]:
        assert self.pool is not None
        slot = await self._alive_slot(fault.slot)
        worker = self.pool.term(slot) if slot is not None else None
        if slot is None or worker is None:
            return None, None
        self.log(f"SIGTERM {worker.worker_id}")
        gone_by = time.monotonic() + TERM_GRACE_S
        while worker.alive() and time.monotonic() < gone_by:  # noqa: ASYNC110 (a process, no event)
            await asyncio.sleep(0.1)
        if worker.alive():
            self.report.problems.append(
                f"worker {worker.worker_id} did not exit within {TERM_GRACE_S:.0f} s of SIGTERM"
            )
            self.pool.kill(slot, 0.0, False)
        code = worker.proc.returncode
        if code != 0:
            self.report.problems.append(f"worker {worker.worker_id} exited {code} on SIGTERM (expected 0)")
        self.pool.replace(slot, fault.replace_after_s, fault.fresh_folder)
        return worker.worker_id, code

    async def _drain(self, watch: ProgressWatch) -> None:
        """Until the group has committed every input record (two samples in a row)."""
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        zero = 0
        while time.monotonic() < deadline:
            zero = zero + 1 if watch.lag_now() == 0 else 0
            if zero >= 3:
                self.log("drained: every input record committed")
                return
            await asyncio.sleep(0.5)
        self.report.problems.append(
            f"the group did not commit every input record within {DRAIN_TIMEOUT_S:.0f} s "
            f"(lag {watch.lag_now()})"
        )

    def _judge(self, watch: ProgressWatch) -> None:
        assert self.pool is not None
        self.report.broker_waits = len(self.pool.broker_waits)
        for ex in self.pool.self_exits:
            self.report.problems.append(
                f"worker {ex.worker_id} exited by itself with {ex.code} at t+{ex.after_s:.0f}s"
            )
        pauses: dict[str, list[float | None]] = {}
        for fault, at in self.fault_times:
            pause = pause_after(watch.samples, at)
            pauses.setdefault(fault.kind, []).append(pause)
            if fault.kind == "broker":
                if pause is None or pause - fault.hold_s > FLOWS_AFTER_BROKER_S:
                    self.report.problems.append(
                        f"records did not flow again within {FLOWS_AFTER_BROKER_S:.0f} s "
                        "of the broker's return"
                    )
            elif self.config.shape == "scale" and (pause is None or pause > PARTITION_MOVES_WITHIN_S):
                self.report.problems.append(
                    f"after the {fault.kind} at t+{at:.0f}s a partition with records did not move within "
                    f"{PARTITION_MOVES_WITHIN_S:.0f} s ({pause})"
                )
        self.report.pauses = summarise(pauses)

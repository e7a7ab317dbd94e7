"""The processes of a chaos run: workers kept at their count, each fault applied to them.

:class:`WorkerPool` owns the workers' processes: which slot runs which worker, which exits it
caused (a SIGKILL, a SIGTERM) and which it did not (a worker that exited by itself, a failure of
the run), and the replacements it still has to start. A worker that starts while the run has the
broker stopped may give up on it as ``guardian worker`` says it does (exit 3 once no broker answered
within its start-up wait): that exit is the broker's outage, not the worker's, and
:func:`gave_up_on_stopped_broker` tells the two apart."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from guardian.kafka_local import free_port

#: how long a SIGTERMed worker may take to leave its group before it is killed
TERM_GRACE_S = 30.0
#: ``guardian worker``'s exit status when no Kafka broker answered within its start-up wait
EXIT_NO_BROKER = 3
#: that start-up wait (``streams.worker.BROKER_WAIT_S``, 20 s) and one last probe's timeout (5 s)
START_WAIT_S = 25.0


def gave_up_on_stopped_broker(
    code: int | None, started: float, exited: float, outages: list[tuple[float, float | None]]
) -> bool:
    """Whether a worker's exit is ``guardian worker`` giving up, as documented, on a broker the run
    had stopped: exit 3, and a broker outage (stopped at, back at or None) during its start-up wait.

    Any other exit, and exit 3 while the broker was up all through the wait, is a worker that
    exited by itself: a failure of the run (a worker never exits while the broker answers)."""
    if code != EXIT_NO_BROKER:
        return False
    wait_end = min(exited, started + START_WAIT_S)
    return any(down < wait_end and (back is None or back > started) for down, back in outages)


@dataclass
class WorkerProc:
    """One ``guardian worker`` process in its own process group, logging to a file."""

    worker_id: str
    proc: subprocess.Popen[bytes]
    log_path: Path
    web_port: int
    started_at: float = field(default_factory=time.monotonic)
    #: set when the pool itself ended or is ending this process (its exit is no failure)
    ended_by_us: bool = False
    stopped: bool = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, sig)

    def log_tail(self, lines: int = 25) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass(frozen=True)
class SelfExit:
    """A worker that exited when nothing of the run ended it."""

    worker_id: str
    code: int | None
    after_s: float
    log_tail: str


@dataclass
class WorkerPool:
    """``size`` worker slots on one group; a dead slot is refilled when its replacement is due."""

    size: int
    env: dict[str, str]
    logs: Path
    #: the workers' table folders (one per worker ID, below GUARDIAN_DATA_DIR)
    tables_dir: Path
    say: Callable[[str], None]
    started_at: float = field(default_factory=time.monotonic)
    slots: list[WorkerProc | None] = field(default_factory=list)
    #: slot -> (when its replacement starts, on a fresh table folder)
    due: dict[int, tuple[float, bool]] = field(default_factory=dict)
    self_exits: list[SelfExit] = field(default_factory=list)
    #: workers that gave up on the broker while the run had it stopped (expected; replaced)
    broker_waits: list[SelfExit] = field(default_factory=list)
    #: the broker's outages: (stopped at, back at or None while it is still down), monotonic
    outages: list[tuple[float, float | None]] = field(default_factory=list)
    starts: int = 0

    def start_all(self) -> None:
        self.slots = [None] * self.size
        for slot in range(self.size):
            self._start(slot, f"c{slot}")

    def _start(self, slot: int, worker_id: str) -> WorkerProc:
        self.starts += 1
        port = free_port()
        env = {**self.env, "GUARDIAN_WEB_PORT": str(port), "GUARDIAN_WEB_HOST": "127.0.0.1"}
        log_path = self.logs / f"worker-{worker_id}.log"
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "guardian", "worker", "--worker-id", worker_id, "--loglevel", "warn"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        worker = WorkerProc(worker_id, proc, log_path, port)
        self.slots[slot] = worker
        return worker

    def worker(self, slot: int) -> WorkerProc | None:
        worker = self.slots[slot % self.size]
        return worker if worker is not None and worker.alive() and not worker.stopped else None

    def any_alive_slot(self, prefer: int) -> int | None:
        for i in range(self.size):
            slot = (prefer + i) % self.size
            if self.worker(slot) is not None:
                return slot
        return None

    # ------------------------------------------------------------------ faults
    def kill(self, slot: int, replace_after_s: float, fresh: bool) -> str | None:
        worker = self.worker(slot)
        if worker is None:
            return None
        worker.ended_by_us = True
        worker.signal(signal.SIGKILL)
        worker.proc.wait(timeout=30)
        self.replace(slot, replace_after_s, fresh)
        return worker.worker_id

    def term(self, slot: int) -> WorkerProc | None:
        """SIGTERM: the worker leaves its group and exits; the caller waits, then :meth:`replace`."""
        worker = self.worker(slot)
        if worker is None:
            return None
        worker.ended_by_us = True
        worker.signal(signal.SIGTERM)
        return worker

    def stop(self, slot: int) -> str | None:
        worker = self.worker(slot)
        if worker is None:
            return None
        worker.signal(signal.SIGSTOP)
        worker.stopped = True
        return worker.worker_id

    def resume(self, slot: int) -> None:
        worker = self.slots[slot]
        if worker is not None and worker.stopped:
            worker.signal(signal.SIGCONT)
            worker.stopped = False

    def broker_stopped(self) -> None:
        self.outages.append((time.monotonic(), None))

    def broker_back(self) -> None:
        if self.outages and self.outages[-1][1] is None:
            self.outages[-1] = (self.outages[-1][0], time.monotonic())

    def replace(self, slot: int, after_s: float, fresh: bool) -> None:
        self.due[slot] = (time.monotonic() + after_s, fresh)

    # ------------------------------------------------------------------ upkeep
    def tick(self) -> None:
        """Notice workers that exited by themselves; start the replacements that are due."""
        now = time.monotonic()
        for slot, worker in enumerate(self.slots):
            if worker is None or worker.alive() or worker.ended_by_us:
                continue
            worker.ended_by_us = True  # noticed once
            exit_ = SelfExit(
                worker.worker_id, worker.proc.returncode, now - self.started_at, worker.log_tail()
            )
            if gave_up_on_stopped_broker(exit_.code, worker.started_at, now, self.outages):
                self.broker_waits.append(exit_)
                self.say(
                    f"worker {worker.worker_id} started while the broker was stopped and gave up on it "
                    f"(exit {exit_.code} after {now - worker.started_at:.0f} s, as documented); replaced"
                )
            else:
                self.self_exits.append(exit_)
                self.say(f"worker {worker.worker_id} EXITED BY ITSELF with {exit_.code}:\n{exit_.log_tail}")
            self.replace(slot, 2.0, False)
        for slot, (when, fresh) in sorted(self.due.items()):
            if now < when:
                continue
            del self.due[slot]
            old = self.slots[slot]
            worker_id = old.worker_id if old is not None else f"c{slot}"
            if fresh:  # the same identity on a machine that lost its disk: tables from the changelogs
                shutil.rmtree(self.tables_dir / worker_id, ignore_errors=True)
            self._start(slot, worker_id)
            self.say(f"worker {worker_id} started in slot {slot}" + (" (fresh tables)" if fresh else ""))

    def fill(self) -> None:
        """Every slot running now (stopped ones resumed, due replacements started at once)."""
        for slot in range(self.size):
            self.resume(slot)
            worker = self.slots[slot]
            if slot not in self.due and (worker is None or not worker.alive()):
                self.due[slot] = (0.0, False)
        self.due = {slot: (0.0, fresh) for slot, (_, fresh) in self.due.items()}
        self.tick()

    def stop_all(self) -> None:
        for worker in self.slots:
            if worker is None or not worker.alive():
                continue
            worker.ended_by_us = True
            if worker.stopped:
                worker.signal(signal.SIGCONT)
            worker.signal(signal.SIGTERM)
        for worker in self.slots:
            if worker is None:
                continue
            try:
                worker.proc.wait(timeout=TERM_GRACE_S)
            except subprocess.TimeoutExpired:
                worker.signal(signal.SIGKILL)
                worker.proc.wait(timeout=30)

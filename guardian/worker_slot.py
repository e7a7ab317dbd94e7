"""``guardian-worker``: a worker that takes the first free worker ID of a shared data folder.

Replicas of one container service (``docker compose up --scale worker=2``) share one data volume and
one environment, so ``GUARDIAN_WORKER_ID`` cannot tell them apart; two workers with one ID would open
the same RocksDB folder. ``guardian-worker [ARGS]`` claims the first slot ``w0``, ``w1``, … of
``$GUARDIAN_DATA_DIR/worker-slots`` that no running process holds (an exclusive ``flock`` on
``w<N>.lock``, inherited by the worker and released by the kernel when it ends, however it ends),
sets ``GUARDIAN_WORKER_ID`` to it, and becomes ``guardian worker ARGS``. A replica that is recreated
gets a free slot again, so the folders stay as many as the replicas. With ``GUARDIAN_WORKER_ID`` set,
it is ``guardian worker ARGS`` unchanged.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from config.exitcodes import Exit
from config.settings import Settings, SettingsError

SLOTS_FOLDER = "worker-slots"
#: more replicas than this on one data volume is a mistake, not a scale-out
MAX_SLOTS = 64


class NoFreeSlot(RuntimeError):
    """Every slot of the data folder is held by a running worker."""


def claim_slot(folder: Path, limit: int = MAX_SLOTS) -> tuple[str, int]:
    """The first free worker ID under ``folder`` and the open descriptor that holds its lock."""
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(limit):
        fd = os.open(folder / f"w{index}.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        return f"w{index}", fd
    raise NoFreeSlot(f"all {limit} worker slots of {folder} are held by running workers")


def data_folder(env: Mapping[str, str]) -> Path:
    """Where the worker keeps its data (``GUARDIAN_DATA_DIR`` or its default)."""
    return Settings.from_env(env).data_dir


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ)
    if not env.get("GUARDIAN_WORKER_ID", "").strip():
        try:
            worker_id, fd = claim_slot(data_folder(env) / SLOTS_FOLDER)
        except (NoFreeSlot, OSError, SettingsError) as exc:
            print(f"guardian-worker: {exc}", file=sys.stderr)
            return int(Exit.USAGE)
        os.set_inheritable(fd, True)  # the lock lives as long as the worker that inherits it
        env["GUARDIAN_WORKER_ID"] = worker_id
        print(f"guardian-worker: worker ID {worker_id}", file=sys.stderr, flush=True)
    os.execvpe("guardian", ["guardian", "worker", *args], env)


if __name__ == "__main__":
    sys.exit(main())

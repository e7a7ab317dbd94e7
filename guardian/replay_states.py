"""The network and voice states the pipeline admitted in a streamed replay (the report's bands):
each job spools them to a file in the temporary folder, never in ``--out``, and the report reads
them back from there."""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from report.bands import DeviceStateChange


def states_file(tmp: Path, out_dir: Path) -> Path:
    """Where a job spools its device-state changes: in the temporary folder, never in --out."""
    return tmp / f"states-{hashlib.sha256(str(out_dir).encode()).hexdigest()[:12]}"


def write_states(path: Path) -> tuple[Callable[[DeviceStateChange], None], Callable[[], None]]:
    """A sink spooling device-state changes to ``path`` (one pickled batch per 4,096), and its close."""
    fh = path.open("wb")
    batch: list[DeviceStateChange] = []

    def add(change: DeviceStateChange) -> None:
        batch.append(change)
        if len(batch) >= 4_096:
            pickle.dump(batch, fh, protocol=pickle.HIGHEST_PROTOCOL)
            batch.clear()

    def close() -> None:
        if batch:
            pickle.dump(batch, fh, protocol=pickle.HIGHEST_PROTOCOL)
        fh.close()

    return add, close


def read_states(paths: Iterable[Path]) -> Iterator[DeviceStateChange]:
    for path in paths:
        if not path.exists():
            continue
        with path.open("rb") as fh:
            while True:
                try:
                    batch: list[DeviceStateChange] = pickle.load(fh)
                except EOFError:
                    break
                yield from batch

"""Where ``guardian replay`` writes: its own files in ``--out``, staged and published whole (§12).

A replay writes every output into a fresh staging folder beside ``--out`` (on the same filesystem),
and only when it has succeeded are they renamed into ``--out``, replacing the previous run's. A
replay that fails (or is interrupted) leaves ``--out`` as it was and no staging folder behind.
Files in ``--out`` that are not Guardian's outputs are never touched, and an input file that is
one of them is refused before anything is read: publishing would replace it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path

#: Guardian's own files in ``--out``: replaced by a replay that succeeds, never anything else.
OUTPUT_FILES = (
    "decisions.jsonl",
    "dispatch.jsonl",
    "timeline.jsonl",
    "deadletter.jsonl",
    "divergences.jsonl",
    "summary.json",
    "report.html",
)
_STAGE_PREFIX = ".guardian-replay-"


class OutputError(Exception):
    """``--out`` cannot be used: it cannot be created or written, or an input is one of its outputs.
    The message names the path and why; choose another ``--out`` or move the file."""


def input_conflict(files: Iterable[str], out_dir: Path) -> str | None:
    """Why an input cannot be read into ``out_dir``, or None: an input that is (by name, link or
    the very same file) one of the outputs a successful replay would replace there."""
    outputs = [out_dir / name for name in OUTPUT_FILES]
    for name in files:
        if name == "-":
            continue
        clash = next((p for p in outputs if _same_file(Path(name), p)), None)
        if clash is not None:
            return (
                f"{name} is --out's {clash.name}, which the replay would replace: move the input "
                f"out of {out_dir} or choose another --out"
            )
    return None


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (or cannot be looked at): not the same file
        return False


def clear_outputs(out_dir: Path) -> None:
    """Remove Guardian's own output files from ``out_dir`` (nothing else)."""
    for name in OUTPUT_FILES:
        with contextlib.suppress(FileNotFoundError):
            (out_dir / name).unlink()


@contextlib.contextmanager
def staged_outputs(out_dir: Path) -> Iterator[Path]:
    """A fresh, empty folder to write the outputs into; published into ``out_dir`` when the block
    ends normally, discarded when it raises. Raises OutputError when ``out_dir`` cannot be used."""
    created = _make_dirs(out_dir)
    try:
        _check_outputs_are_files(out_dir)
        stage = _stage_beside(out_dir)
    except BaseException:
        _remove_empty(created)
        raise
    try:
        yield stage
        _publish(stage, out_dir)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        _remove_empty(created)
        raise
    shutil.rmtree(stage, ignore_errors=True)


def _make_dirs(out_dir: Path) -> list[Path]:
    """Create ``out_dir`` (and missing parents); the folders created, innermost first."""
    missing: list[Path] = []
    path = Path(os.path.abspath(out_dir))
    while not path.exists() and path != path.parent:
        missing.append(path)
        path = path.parent
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"--out {out_dir}: cannot create it: {exc.strerror or exc}") from exc
    return missing


def _remove_empty(created: list[Path]) -> None:
    for path in created:
        try:
            path.rmdir()
        except OSError:
            return


def _check_outputs_are_files(out_dir: Path) -> None:
    for name in OUTPUT_FILES:
        path = out_dir / name
        if path.is_dir() and not path.is_symlink():
            raise OutputError(f"--out {out_dir}: {name} there is a folder; move it away")


def _stage_beside(out_dir: Path) -> Path:
    """A new staging folder on ``out_dir``'s filesystem: beside it when its parent may be written
    (``--out`` holds nothing of a run in progress), else inside it (hidden)."""
    try:
        device = out_dir.stat().st_dev
    except OSError as exc:
        raise OutputError(f"--out {out_dir}: {exc.strerror or exc}") from exc
    parent = Path(os.path.abspath(out_dir)).parent
    problem: OSError | None = None
    for where in (parent, out_dir):
        try:
            stage = Path(tempfile.mkdtemp(prefix=_STAGE_PREFIX, dir=where))
        except OSError as exc:
            problem = exc
            continue
        if stage.stat().st_dev == device:
            return stage
        stage.rmdir()  # another filesystem (``--out`` is a mount point): renames would fail
    reason = problem.strerror if problem is not None and problem.strerror else "not writable"
    raise OutputError(f"--out {out_dir}: cannot write there: {reason}")


def _publish(stage: Path, out_dir: Path) -> None:
    """Replace the previous outputs in ``out_dir`` by those in ``stage``, every one or none: the
    previous ones are moved aside first and put back if a rename fails."""
    aside = stage / ".previous"
    aside.mkdir()
    moved_aside: list[str] = []
    moved_in: list[str] = []
    try:
        for name in OUTPUT_FILES:
            if os.path.lexists(out_dir / name):
                os.replace(out_dir / name, aside / name)
                moved_aside.append(name)
        for name in OUTPUT_FILES:
            if (stage / name).exists():
                os.replace(stage / name, out_dir / name)
                moved_in.append(name)
    except OSError as exc:
        for name in moved_in:
            with contextlib.suppress(OSError):
                os.replace(out_dir / name, stage / name)
        for name in moved_aside:
            with contextlib.suppress(OSError):
                os.replace(aside / name, out_dir / name)
        raise OutputError(f"--out {out_dir}: cannot write there: {exc.strerror or exc}") from exc

"""Small checks of paths a command will write to, made before it starts (a one-line usage error
then, rather than a traceback once the work is done)."""

from __future__ import annotations

from pathlib import Path


def blocking_file(path: Path) -> Path | None:
    """The existing file (not a folder) that stands where a folder above ``path`` is needed, if
    any: ``path`` could never be created."""
    for parent in Path(path).absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None

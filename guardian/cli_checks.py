"""Checks of the command line made outside the parser: paths a command will write to (checked
before it starts: a one-line usage error then, rather than a traceback once the work is done),
and which failures are a bad setting or configuration file (exit 2, README "Exit codes")."""

from __future__ import annotations

from pathlib import Path


def blocking_file(path: Path) -> Path | None:
    """The existing file (not a folder) that stands where a folder above ``path`` is needed, if
    any: ``path`` could never be created."""
    for parent in Path(path).absolute().parents:
        if parent.exists():
            return None if parent.is_dir() else parent
    return None


def check_creatable(text: str) -> None:
    """Raise ValueError when the file or folder ``text`` could never be created."""
    if (blocker := blocking_file(Path(text))) is not None:
        raise ValueError(f"{text} cannot be created: {blocker} is a file")


def configuration_problem(exc: ValueError) -> str | None:
    """The one-line message of a bad setting or a broken registry file; None for anything else."""
    from config.settings import SettingsError
    from topics.registry import RegistryError

    if isinstance(exc, RegistryError):
        return f"broken registry: {exc}"
    return str(exc) if isinstance(exc, SettingsError) else None

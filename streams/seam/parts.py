"""How the seam reaches below faust's, mode's, aiokafka's and rocksdict's public surface: by name,
through :func:`part_of`, and a missing part stops the worker with the installed versions and the
part's name (:class:`SeamError`; never a silent fallback). The versions verified are pinned in
``pyproject.toml``; :func:`streams.seam.check.check` runs at start-up.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any


class SeamError(RuntimeError):
    """faust (or mode, aiokafka, rocksdict) lacks something Guardian relies on: the installed
    versions differ from the ones verified (pinned in ``pyproject.toml``)."""


def library_versions() -> str:
    """``faust-streaming X, mode-streaming Y, aiokafka Z, rocksdict W`` as installed."""
    found = []
    for dist in ("faust-streaming", "mode-streaming", "aiokafka", "rocksdict"):
        try:
            found.append(f"{dist} {version(dist)}")
        except PackageNotFoundError:
            found.append(f"{dist} (not installed)")
    return ", ".join(found)


def missing_part(what: str) -> SeamError:
    return SeamError(
        f"Guardian cannot run on the installed {library_versions()}: {what} is missing "
        "(install the versions pinned in pyproject.toml)"
    )


def part_of(obj: Any, name: str, where: str) -> Any:
    try:
        return getattr(obj, name)
    except AttributeError:
        raise missing_part(f"{where}.{name}") from None

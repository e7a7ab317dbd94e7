"""What a replay's ``summary.json`` and report say they were made from (§12 ``made_from``).

The input files (as named on the command line, with their sizes), the input records' range of
Kafka timestamps, the Guardian version and when the replay ran. The last is the one wall-clock
value of a replay's outputs; ``SOURCE_DATE_EPOCH`` (seconds since the epoch, the reproducible-builds
convention) replaces it, so that two replays of the same input can be compared byte for byte.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Mapping
from importlib import metadata
from typing import Any

from config.settings import SettingsError


def guardian_version() -> str:
    try:
        return metadata.version("guardian")
    except metadata.PackageNotFoundError:
        return "unknown"


def _utc(ms: int) -> str:
    return (
        dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def made_at(env: Mapping[str, str]) -> str:
    """When the replay ran (UTC, ISO 8601): ``SOURCE_DATE_EPOCH`` when set, else now."""
    text = env.get("SOURCE_DATE_EPOCH")
    if text is None or text == "":
        return _utc(int(time.time() * 1000))
    if not text.isdigit() or int(text) >= 2**53 // 1000:
        raise SettingsError(f"SOURCE_DATE_EPOCH={text!r}: expected whole seconds since the epoch")
    return _utc(int(text) * 1000)


def made_from(
    files: list[str], records: int, first_ms: int | None, last_ms: int | None, *, at: str
) -> dict[str, Any]:
    """The ``made_from`` object of ``summary.json``."""
    inputs: list[dict[str, Any]] = []
    for name in files:
        size: int | None = None
        if name != "-":
            try:
                size = os.stat(name).st_size
            except OSError:
                size = None
        inputs.append({"file": name, "bytes": size})
    return {
        "inputs": inputs,
        "records": records,
        "first_record_at": None if first_ms is None else _utc(first_ms),
        "last_record_at": None if last_ms is None else _utc(last_ms),
        "guardian_version": guardian_version(),
        "made_at": at,
    }


def describe(made: Mapping[str, Any]) -> str:
    """One sentence for the report: what it was made from, by which version, when."""
    names = ", ".join("standard input" if i["file"] == "-" else str(i["file"]) for i in made["inputs"])
    span = (
        f"records from {made['first_record_at']} to {made['last_record_at']}"
        if made["first_record_at"] is not None
        else "no records"
    )
    return (
        f"Replayed from {names} ({made['records']:,} input records; {span}) "
        f"by Guardian {made['guardian_version']} at {made['made_at']}."
    )

"""JSON Schema export of every record type (``guardian schema export DIR``).

One file per record, named after the topic it travels on (``observation.schema.json`` …). The
schemas describe the records as validated on input (``mode="validation"``); outputs use the same
shapes, with ``depends_on`` (dispatch requests) and ``status`` (timeline) left out when unset.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel

from topics.records import (
    DeadLetter,
    Decision,
    DeviceContext,
    Dispatch,
    ExperiencePlan,
    Observation,
    TaskEvent,
    TimelineEntry,
)

#: File stem -> record model.
SCHEMAS: dict[str, type[BaseModel]] = {
    "experience-plan": ExperiencePlan,
    "observation": Observation,
    "task-event": TaskEvent,
    "device-context": DeviceContext,
    "decision": Decision,
    "dispatch": Dispatch,
    "timeline-entry": TimelineEntry,
    "dead-letter": DeadLetter,
}


def export_schemas(directory: Path | str) -> list[Path]:
    """Write one ``<name>.schema.json`` per record type into ``directory`` (created if needed)
    and return the paths written, in a stable order."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    for name, model in SCHEMAS.items():
        schema: dict[str, Any] = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            **model.model_json_schema(mode="validation"),
        }
        path = out / f"{name}.schema.json"
        path.write_bytes(orjson.dumps(schema, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n")
        written.append(path)
    return written


def cmd_schema_export(args: argparse.Namespace, settings: object) -> int:
    """``guardian schema export DIR``: print the files written; exit 2 (a bad argument) when DIR
    cannot be written."""
    del settings
    try:
        paths = export_schemas(args.dir)
    except OSError as exc:
        print(f"guardian schema export: cannot write to {args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2  # config.exitcodes.Exit.USAGE (topics imports nothing of config)
    for path in paths:
        print(path)
    return 0


__all__ = ["SCHEMAS", "cmd_schema_export", "export_schemas"]

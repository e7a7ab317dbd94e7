"""The arguments of the ``guardian`` commands that work on exported records and their schemas:
``replay``, ``export``, ``schema`` and ``context``."""

from __future__ import annotations

import argparse

from guardian.cli_parser import Parser, add_command, bootstrap_opt, language_opt, prefix_opt, supervisor_opt
from guardian.cli_values import checked, csv_of, identifier, int_at_least, new_dir, new_file

#: Topic suffixes ``guardian export --topics`` accepts (the contract's topics).
EXPORT_TOPICS = (
    "plans",
    "device-context",
    "task-events",
    "observations",
    "decisions",
    "dispatch",
    "timeline",
    "deadletter",
)


def add_replay(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian replay``."""
    replay = add_command(
        sub,
        "replay",
        "replay exported topics through the pipeline, offline",
        "Run exported topic contents (kcat -C -J lines, as 'guardian export' writes) through the "
        "pipeline's logic without a broker, and write decisions.jsonl, dispatch.jsonl, "
        "timeline.jsonl, deadletter.jsonl, summary.json, divergences.jsonl and report.html to --out.",
    )
    prefix_opt(replay)
    supervisor_opt(replay, "the model backend of --decisions model")
    language_opt(replay, "language of spoken text in the replayed dispatches")
    replay.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="kcat -C -J file(s); '-' reads standard input; gzip-compressed input is read as such",
    )
    replay.add_argument(
        "--out",
        required=True,
        type=checked("a directory", new_dir),
        metavar="DIR",
        help="output directory (created if missing; Guardian's own output files in it are replaced "
        "when the replay succeeds, nothing else; required)",
    )
    replay.add_argument(
        "--jobs",
        type=int_at_least(1),
        default=1,
        metavar="N",
        help="processes, each replaying a share of the devices, with the same outputs; at most the "
        "CPUs available (more is lowered, with a warning); default: 1",
    )
    replay.add_argument(
        "--no-report",
        action="store_true",
        help="write the outputs and summary.json but not report.html",
    )
    replay.add_argument(
        "--decisions",
        choices=["recorded", "rules", "model"],
        default=None,
        help="'recorded': reuse the input's decisions and report divergences; 'rules': recompute "
        "them by the deterministic rules; 'model': ask the configured model again; default: "
        "recorded when the input holds decisions, else rules",
    )


def add_export(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian export``."""
    export = add_command(
        sub,
        "export",
        "write topic contents in the kcat -C -J format",
        "Write the records of the contract's topics for a time range (Kafka timestamps) in the "
        "kcat -C -J format that 'guardian replay' reads.",
    )
    bootstrap_opt(export)
    prefix_opt(export)
    export.add_argument(
        "--out",
        required=True,
        type=checked("a file", new_file),
        metavar="FILE",
        help="output file, '-' for standard output (required)",
    )
    export.add_argument(
        "--since-ms",
        type=int_at_least(0),
        default=None,
        metavar="T",
        help="first Kafka timestamp (ms since the epoch, inclusive); default: the beginning",
    )
    export.add_argument(
        "--until-ms",
        type=int_at_least(0),
        default=None,
        metavar="T",
        help="last Kafka timestamp (ms, inclusive); default: now",
    )
    export.add_argument(
        "--device",
        default=None,
        type=checked("an ID", identifier),
        metavar="ID",
        help="only this device's records; default: every device",
    )
    export.add_argument(
        "--topics",
        default=None,
        type=csv_of(EXPORT_TOPICS),
        metavar="SUFFIX,…",
        help=f"topic suffixes to export, from {', '.join(EXPORT_TOPICS)}; default: all of them",
    )


def add_schema(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian schema export``."""
    schema = add_command(sub, "schema", "JSON Schemas of the records", "JSON Schemas of the records.")
    ssub = schema.add_subparsers(dest="schema_command", required=True, metavar="ACTION")
    sexp = add_command(
        ssub,
        "export",
        "write one JSON Schema per record type",
        "Write one JSON Schema file per record type into DIR.",
    )
    sexp.add_argument(
        "dir",
        type=checked("a directory", new_dir),
        metavar="DIR",
        help="output directory (created if missing)",
    )


def add_context(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian context summary``."""
    context = add_command(sub, "context", "device context v2", "Device context v2 tools.")
    csub = context.add_subparsers(dest="context_command", required=True, metavar="ACTION")
    csum = add_command(
        csub,
        "summary",
        "print the planner summary of a device's context from a replay file",
        "Run the input records of kcat -C -J file(s) through the pipeline's logic, as 'guardian "
        "replay' does, and print the planner summary (planner_context_summary.v2) of one device's "
        "context as JSON: what a planner or the model saw.",
    )
    prefix_opt(csum)
    csum.add_argument("files", nargs="+", metavar="FILE", help="kcat -C -J file(s)")
    csum.add_argument(
        "--device", required=True, type=checked("an ID", identifier), metavar="ID", help="the device"
    )
    csum.add_argument(
        "--at-ms",
        type=int_at_least(0),
        default=None,
        metavar="T",
        help="as of this receive time (ms since the epoch); default: the device's last record",
    )

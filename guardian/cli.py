"""The ``guardian`` command line (docs/CONTRACTS.md §13).

Each subcommand lives in its own module and is imported only when it runs, so a broken optional
part never stops the others and ``guardian --help`` stays fast. Every argument is checked here
before a command runs: a bad one is a one-line message and exit status 2. The arguments of each
command are declared in ``guardian.cli_args_live``, ``guardian.cli_args_data`` and
``guardian.cli_args_runs``.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from bench.parts import PARTS as BENCH_PARTS
from config.exitcodes import Exit
from config.settings import Settings
from guardian import cli_args_data, cli_args_live, cli_args_runs
from guardian.cli_args_data import EXPORT_TOPICS
from guardian.cli_checks import configuration_problem
from guardian.cli_parser import USAGE, Parser

__all__ = [
    "BENCH_PARTS",
    "COMMANDS",
    "EXPORT_TOPICS",
    "USAGE",
    "build_parser",
    "main",
    "parse",
    "settings_from_args",
]

#: subcommand path -> "module:function"; the function takes (args, settings) and returns an exit code.
COMMANDS: dict[str, str] = {
    "kafka up": "guardian.kafka_cmd:cmd_up",
    "kafka down": "guardian.kafka_cmd:cmd_down",
    "kafka status": "guardian.kafka_cmd:cmd_status",
    "kafka fetch": "guardian.kafka_cmd:cmd_fetch",
    "topics create": "streams.admin:cmd_topics_create",
    "worker": "streams.worker:cmd_worker",
    "start": "guardian.start:cmd_start",
    "simulate": "simulator.cli:cmd_simulate",
    "replay": "guardian.replay_cmd:cmd_replay",
    "export": "guardian.export:cmd_export",
    "bench": "bench.cli:cmd_bench",
    "schema export": "topics.schema:cmd_schema_export",
    "demo": "guardian.demo:cmd_demo",
    "context summary": "guardian.context_cmd:cmd_context_summary",
    "console": "console.command:cmd_console",
}


def build_parser() -> Parser:
    parser = Parser(
        prog="guardian",
        description="Guardian: the cloud supervisor of a fleet of home robots. It reads what devices "
        "send on Kafka, decides, and dispatches; 'guardian COMMAND --help' describes each command.",
        epilog="Exit status: 0 success; 2 a usage error (a bad flag or value); other non-zero "
        "values: see each command and the README.",
    )
    parser.add_argument("--version", action="version", version=f"guardian {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    cli_args_live.add_kafka(sub)
    cli_args_live.add_topics(sub)
    cli_args_live.add_worker(sub)
    cli_args_live.add_start(sub)
    cli_args_live.add_simulate(sub)
    cli_args_data.add_replay(sub)
    cli_args_data.add_export(sub)
    cli_args_runs.add_bench(sub)
    cli_args_data.add_schema(sub)
    cli_args_live.add_console(sub)
    cli_args_data.add_context(sub)
    cli_args_runs.add_demo(sub)
    return parser


def _version() -> str:
    try:
        return metadata.version("guardian")
    except metadata.PackageNotFoundError:
        return "unknown"


def _command_key(args: argparse.Namespace) -> str:
    key = args.command
    for sub in ("kafka_command", "topics_command", "schema_command", "context_command"):
        value = getattr(args, sub, None)
        if value:
            key = f"{key} {value}"
    return str(key)


def _cross_checks(args: argparse.Namespace) -> tuple[int, str] | None:
    """(exit code, message) of the first check of two arguments or an input file that fails."""
    for name in getattr(args, "files", None) or ():
        if name == "-":
            continue
        path = Path(name)
        if not path.exists():
            return Exit.BAD_INPUT, f"{name}: no such file"
        if path.is_dir():
            return Exit.BAD_INPUT, f"{name} is a directory; name a kcat -C -J file"
    since, until = getattr(args, "since_ms", None), getattr(args, "until_ms", None)
    if since is not None and until is not None and since > until:
        return USAGE, f"--since-ms {since} is after --until-ms {until}"
    return None


def settings_from_args(args: argparse.Namespace) -> Settings:
    base = Settings.from_env()
    return base.with_overrides(
        bootstrap=getattr(args, "bootstrap", None),
        topic_prefix=getattr(args, "topic_prefix", None),
        partitions=getattr(args, "partitions", None),
        data_dir=None if getattr(args, "data_dir", None) is None else Path(args.data_dir),
        supervisor=getattr(args, "supervisor", None),
        language=getattr(args, "language", None),
    )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The checked arguments; a usage error prints one line and raises SystemExit(2)."""
    args, extras = build_parser().parse_known_args(argv)
    if getattr(args, "command", None) == "simulate":
        # '--scenario HG-05 HG-07,HG-08' gives [['HG-05'], ['HG-07', 'HG-08']]: flatten
        args.scenario = [s for group in args.scenario for s in group]
    problem = _cross_checks(args)
    if extras:
        problem = USAGE, f"{' '.join(extras)}: not an option of this command"
    if problem is not None:
        prog = f"guardian {_command_key(args)}"
        hint = f" (see '{prog} --help')" if problem[0] == USAGE else ""
        print(f"{prog}: {problem[1]}{hint}", file=sys.stderr)
        raise SystemExit(problem[0])
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    key = _command_key(args)
    target = COMMANDS[key]
    module_name, func_name = target.split(":")
    try:
        settings = settings_from_args(args)
        func = getattr(importlib.import_module(module_name), func_name)
        return int(func(args, settings))
    except ValueError as exc:  # a bad setting, or a broken configuration file (the registry's)
        if (problem := configuration_problem(exc)) is None:
            raise
        print(f"guardian: {problem}", file=sys.stderr)
        return USAGE
    except KeyboardInterrupt:
        return 130

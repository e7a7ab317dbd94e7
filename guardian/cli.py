"""The ``guardian`` command line (CONTRACTS.md §13).

Each subcommand lives in its own module and is imported only when it runs, so a broken optional
part never stops the others and ``guardian --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from guardian.settings import Settings, SettingsError

#: subcommand path -> "module:function"; the function takes (args, settings) and returns an exit code.
COMMANDS: dict[str, str] = {
    "kafka up": "guardian.kafka_local:cmd_up",
    "kafka down": "guardian.kafka_local:cmd_down",
    "kafka status": "guardian.kafka_local:cmd_status",
    "kafka fetch": "guardian.kafka_local:cmd_fetch",
    "topics create": "guardian.admin:cmd_topics_create",
    "worker": "streams.worker:cmd_worker",
    "start": "guardian.start:cmd_start",
    "simulate": "simulator.cli:cmd_simulate",
    "replay": "guardian.replay:cmd_replay",
    "export": "guardian.export:cmd_export",
    "bench": "bench.cli:cmd_bench",
    "schema export": "topics.schema:cmd_schema_export",
    "demo": "guardian.demo:cmd_demo",
}


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap", help="broker address(es); default GUARDIAN_KAFKA_BOOTSTRAP or the local broker"
    )
    p.add_argument("--topic-prefix", help="topic name prefix; default GUARDIAN_TOPIC_PREFIX or 'guardian.'")
    p.add_argument(
        "--partitions", type=int, help="partitions of every topic; default GUARDIAN_PARTITIONS or 8"
    )
    p.add_argument("--data-dir", help="tables and local broker data; default GUARDIAN_DATA_DIR")
    p.add_argument("--supervisor", choices=["rules", "gemini"], help="decision backend; default rules")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="guardian", description="Guardian: the cloud supervisor of home robots."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    kafka = sub.add_parser("kafka", help="a local single-node Apache Kafka broker (KRaft)")
    ksub = kafka.add_subparsers(dest="kafka_command", required=True)
    for name, text in (
        ("up", "assemble (once) and start the local broker; prints the bootstrap address"),
        ("down", "stop the local broker this machine started"),
        ("status", "is the local broker running, and where"),
        ("fetch", "only download the broker's jars from Maven Central (no start)"),
    ):
        kp = ksub.add_parser(name, help=text)
        _common(kp)

    topics = sub.add_parser("topics", help="topic administration")
    tsub = topics.add_subparsers(dest="topics_command", required=True)
    _common(tsub.add_parser("create", help="create every topic of the contract (idempotent)"))

    worker = sub.add_parser("worker", help="run the pipeline (a faust worker)")
    _common(worker)
    worker.add_argument("--worker-id", default=None, help="name of this worker's local table folder")
    worker.add_argument("--loglevel", default="warn", choices=["crit", "error", "warn", "info", "debug"])

    start = sub.add_parser("start", help="publish the Adaptive Home Guardian plan for one device")
    _common(start)
    start.add_argument("--device", required=True)
    start.add_argument("--areas", default="2,3,6", help="comma-separated area IDs (default 2,3,6)")
    start.add_argument("--experience-id", default=None)
    start.add_argument("--max-decisions", type=int, default=3)

    sim = sub.add_parser("simulate", help="a fleet of simulated devices on the broker")
    _common(sim)
    sim.add_argument("--devices", type=int, default=20)
    sim.add_argument("--scenario", action="append", default=[], help="scenario id(s), e.g. HG-05; repeatable")
    sim.add_argument("--mix", action="store_true", help="a mix of every scenario across the fleet")
    sim.add_argument("--seed", type=int, default=7)
    sim.add_argument("--speed", type=float, default=1.0, help="time compression factor")
    sim.add_argument("--timeout", type=float, default=300.0, help="give up after this many seconds")
    sim.add_argument("--summary-json", default=None, help="write the fleet's final table as JSON here")
    sim.add_argument("--rate", type=float, default=2.0, help="observations per simulated s, patrolling")
    sim.add_argument("--patrol-seconds", type=float, default=10.0, help="simulated seconds per area's patrol")
    sim.add_argument("--device-prefix", default=None, help="device ID prefix (default sim<seed>-)")
    sim.add_argument("--progress", action="store_true", help="show a live table of experiences by phase")

    replay = sub.add_parser("replay", help="replay exported topics through the pipeline, offline")
    _common(replay)
    replay.add_argument("files", nargs="+", help="kcat -C -J files ('-' for stdin; .gz or plain)")
    replay.add_argument("--out", required=True)
    replay.add_argument("--decisions", choices=["recorded", "rules", "model"], default=None)
    replay.add_argument("--language", choices=["ko", "en"], default=None)
    replay.add_argument(
        "--jobs", type=int, default=1, help="processes, each replaying a share of the devices (default 1)"
    )
    replay.add_argument(
        "--no-report", action="store_true", help="write the outputs and summary.json, not report.html"
    )

    export = sub.add_parser("export", help="write topic contents in the kcat -J format")
    _common(export)
    export.add_argument("--out", required=True, help="output file ('-' for stdout)")
    export.add_argument("--since-ms", type=int, default=None)
    export.add_argument("--until-ms", type=int, default=None)
    export.add_argument("--device", default=None)
    export.add_argument("--topics", default=None, help="comma-separated suffixes (default: every topic)")

    bench = sub.add_parser("bench", help="the benchmark (throughput, latency, memory, baselines)")
    _common(bench)
    bench.add_argument("--quick", action="store_true")
    bench.add_argument("--out", default="out/bench")
    bench.add_argument(
        "--only",
        default=None,
        help=(
            "comma-separated parts: pipeline,latency,passthrough,faust,broker,core,gate,replay (default: all)"
        ),
    )
    bench.add_argument("--devices", type=int, default=None, help="devices of the fleet (default 10000)")
    bench.add_argument("--records", type=int, default=None, help="observations in the throughput run")
    bench.add_argument(
        "--rate", type=float, default=None, help="steady load of the latency run (default: max / 4)"
    )

    schema = sub.add_parser("schema", help="JSON Schemas of the records")
    ssub = schema.add_subparsers(dest="schema_command", required=True)
    sexp = ssub.add_parser("export", help="write one JSON Schema per record type")
    sexp.add_argument("dir")

    demo = sub.add_parser("demo", help="the whole job: broker, worker, simulated fleet, report")
    _common(demo)
    demo.add_argument("--devices", type=int, default=20)
    demo.add_argument("--out", default="out/demo")
    demo.add_argument("--seed", type=int, default=7)
    demo.add_argument("--speed", type=float, default=2.0, help="time compression of the simulated fleet")
    demo.add_argument("--timeout", type=float, default=300.0, help="give up on the fleet after this many s")
    demo.add_argument("--rate", type=float, default=2.0, help="routine observations per simulated second")
    demo.add_argument("--patrol-seconds", type=float, default=10.0, help="simulated seconds per area")
    demo.add_argument("--keep-topics", action="store_true", help="keep the run's topics on the broker")
    return parser


def _command_key(args: argparse.Namespace) -> str:
    key = args.command
    for sub in ("kafka_command", "topics_command", "schema_command"):
        value = getattr(args, sub, None)
        if value:
            key = f"{key} {value}"
    return str(key)


def settings_from_args(args: argparse.Namespace) -> Settings:
    base = Settings.from_env()
    return base.with_overrides(
        bootstrap=getattr(args, "bootstrap", None),
        topic_prefix=getattr(args, "topic_prefix", None),
        partitions=getattr(args, "partitions", None),
        data_dir=(
            None if getattr(args, "data_dir", None) is None else __import__("pathlib").Path(args.data_dir)
        ),
        supervisor=getattr(args, "supervisor", None),
        language=getattr(args, "language", None),
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    key = _command_key(args)
    target = COMMANDS[key]
    module_name, func_name = target.split(":")
    try:
        settings = settings_from_args(args)
        func = getattr(importlib.import_module(module_name), func_name)
        return int(func(args, settings))
    except SettingsError as exc:
        print(f"guardian: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130

"""The ``guardian`` command line (docs/CONTRACTS.md §13).

Each subcommand lives in its own module and is imported only when it runs, so a broken optional
part never stops the others and ``guardian --help`` stays fast. Every argument is checked here
before a command runs: a bad one is a one-line message and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import NoReturn

from config.exitcodes import Exit
from config.settings import Settings
from guardian.cli_checks import check_creatable, configuration_problem
from guardian.console_opts import add_console_options

#: Exit status of a usage error (a bad flag or value).
USAGE = 2

#: subcommand path -> "module:function"; the function takes (args, settings) and returns an exit code.
COMMANDS: dict[str, str] = {
    "kafka up": "guardian.kafka_local:cmd_up",
    "kafka down": "guardian.kafka_local:cmd_down",
    "kafka status": "guardian.kafka_local:cmd_status",
    "kafka fetch": "guardian.kafka_local:cmd_fetch",
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

_ID = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
_TOPIC_PREFIX = re.compile(r"[A-Za-z0-9._-]{0,200}")
_HOST_PORT = re.compile(r"\[?[A-Za-z0-9_.:-]+\]?:(\d{1,5})")
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
BENCH_PARTS = (
    "pipeline",
    "latency",
    "passthrough",
    "faust",
    "broker",
    "core",
    "gate",
    "replay",
    "scaleout",
    "console",
)


class _Parser(argparse.ArgumentParser):
    """An argparse parser whose errors are one line: ``guardian replay: --out: ... (see --help)``."""

    def error(self, message: str) -> NoReturn:
        self.exit(USAGE, f"{self.prog}: {message} (see '{self.prog} --help')\n")


# --------------------------------------------------------------------------- value checks


def _checked(kind: str, check: Callable[[str], object]) -> Callable[[str], object]:
    def convert(text: str) -> object:
        try:
            return check(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc) or f"not {kind}: {text!r}") from None

    convert.__name__ = kind  # argparse names the type in its messages
    return convert


def _int_at_least(low: int) -> Callable[[str], object]:
    def check(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"{text!r} is not a whole number") from None
        if value < low:
            raise ValueError(f"{value} is below {low}")
        return value

    return _checked(f"a whole number >= {low}", check)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise ValueError(f"{text} must be a number above 0")
    return value


def _identifier(text: str) -> str:
    if not _ID.fullmatch(text):
        raise ValueError(f"{text!r} is not an ID (1-128 characters of A-Z a-z 0-9 _ . : -)")
    return text


def _bootstrap(text: str) -> str:
    for part in text.split(","):
        m = _HOST_PORT.fullmatch(part.strip())
        if m is None or not 0 < int(m.group(1)) < 65536:
            raise ValueError(f"{part.strip()!r} is not HOST:PORT")
    return text


def _topic_prefix(text: str) -> str:
    if not _TOPIC_PREFIX.fullmatch(text):
        raise ValueError(f"{text!r} is not a topic prefix (letters, digits, '.', '_', '-')")
    return text


def _csv_of(allowed: Sequence[str]) -> Callable[[str], object]:
    def check(text: str) -> str:
        items = [s.strip() for s in text.split(",") if s.strip()]
        unknown = [s for s in items if s not in allowed]
        if not items or unknown:
            raise ValueError(f"{text!r}: choose from {', '.join(allowed)}")
        return ",".join(items)

    return _checked("a comma-separated list", check)


def _worker_counts(text: str) -> str:
    counts = [int(s) for s in text.split(",") if s.strip()]
    if not counts or not all(1 <= n <= 16 for n in counts):
        raise ValueError(f"{text!r}: worker counts from 1 to 16")
    return ",".join(str(n) for n in counts)


def _scenario(text: str) -> list[str]:
    ids = [s.strip().upper() for s in text.split(",") if s.strip()]
    if not ids or not all(re.fullmatch(r"HG-\d{2}(-[A-Z])?", s) for s in ids):
        raise ValueError(f"{text!r} is not a scenario ID such as HG-05")
    return ids


def _new_dir(text: str) -> str:
    """A directory to write into: it may exist (as a directory) or not yet."""
    if not text.strip():
        raise ValueError("needs a directory")
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{text} exists and is not a directory")
    check_creatable(text)
    return text


def _new_file(text: str) -> str:
    """A file to write ('-': standard output): not an existing directory."""
    if not text.strip():
        raise ValueError("needs a file name, or '-' for standard output")
    if text != "-" and Path(text).is_dir():
        raise ValueError(f"{text} is a directory; name a file")
    if text != "-":
        check_creatable(text)
    return text


# ------------------------------------------------------------------ options, where they mean something


def _bootstrap_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bootstrap",
        type=_checked("HOST:PORT", _bootstrap),
        metavar="HOST:PORT[,…]",
        help="Kafka broker address(es); default: GUARDIAN_KAFKA_BOOTSTRAP, else the local broker "
        "of 'guardian kafka up'",
    )


def _prefix_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--topic-prefix",
        type=_checked("a topic prefix", _topic_prefix),
        metavar="PREFIX",
        help="prefix of every topic name; default: GUARDIAN_TOPIC_PREFIX, else 'guardian.'",
    )


def _partitions_opt(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--partitions",
        type=_int_at_least(1),
        metavar="N",
        help="partitions of every topic (at least 1); default: GUARDIAN_PARTITIONS, else 8",
    )


def _data_dir_opt(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--data-dir",
        type=_checked("a directory", _new_dir),
        metavar="DIR",
        help=f"{what}; default: GUARDIAN_DATA_DIR, else ~/.cache/guardian",
    )


def _supervisor_opt(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument(
        "--supervisor",
        choices=["rules", "gemini"],
        help=f"{what}: 'rules' (deterministic) or 'gemini'; default: GUARDIAN_SUPERVISOR, else rules",
    )


def _language_opt(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--language", choices=["ko", "en"], help=f"{what}; default: GUARDIAN_LANGUAGE, else ko")


def _sub(sub: argparse._SubParsersAction[_Parser], name: str, summary: str, description: str) -> _Parser:
    parser: _Parser = sub.add_parser(name, help=summary, description=description)
    return parser


def build_parser() -> _Parser:
    parser = _Parser(
        prog="guardian",
        description="Guardian: the cloud supervisor of a fleet of home robots. It reads what devices "
        "send on Kafka, decides, and dispatches; 'guardian COMMAND --help' describes each command.",
        epilog="Exit status: 0 success; 2 a usage error (a bad flag or value); other non-zero "
        "values: see each command and the README.",
    )
    parser.add_argument("--version", action="version", version=f"guardian {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    kafka = _sub(
        sub,
        "kafka",
        "a local single-node Apache Kafka broker (KRaft)",
        "A local single-node Apache Kafka 4.1 broker for development, demos and tests, assembled "
        "from Maven Central (needs Java 17 and Maven) into the data directory.",
    )
    ksub = kafka.add_subparsers(dest="kafka_command", required=True, metavar="ACTION")
    for name, summary, description in (
        (
            "up",
            "start the local broker (idempotent); prints its address",
            "Assemble the broker's jars once, start it in the background if it is not running, "
            "and print its bootstrap address.",
        ),
        ("down", "stop the local broker", "Stop the local broker this data directory started."),
        (
            "status",
            "is the local broker running, and where",
            "Say whether the local broker runs, and its address.",
        ),
        (
            "fetch",
            "only download the broker's jars (no start)",
            "Download the broker's jars from Maven Central into the data directory, without starting it.",
        ),
    ):
        _data_dir_opt(_sub(ksub, name, summary, description), "where the broker's jars and data live")

    topics = _sub(sub, "topics", "topic administration", "Topic administration.")
    tsub = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = _sub(
        tsub,
        "create",
        "create every topic (idempotent)",
        "Create every topic of the contract plus Guardian's control topic, all with the same "
        "partition count; a topic that exists with another count is an error.",
    )
    _bootstrap_opt(create)
    _prefix_opt(create)
    _partitions_opt(create)

    worker = _sub(
        sub,
        "worker",
        "run the pipeline (a faust worker)",
        "Run the pipeline: read the input topics, judge every record, write decisions, dispatches, "
        "timeline entries and dead letters. Several workers share one consumer group.",
    )
    _bootstrap_opt(worker)
    _prefix_opt(worker)
    _partitions_opt(worker)
    _data_dir_opt(worker, "where the worker keeps its RocksDB tables")
    _supervisor_opt(worker, "who decides")
    worker.add_argument(
        "--worker-id",
        type=_checked("an ID", _identifier),
        metavar="ID",
        help="names this worker's local table folder (give each worker on one machine its own); "
        "default: GUARDIAN_WORKER_ID, else w0",
    )
    worker.add_argument(
        "--loglevel",
        default="warn",
        choices=["crit", "error", "warn", "info", "debug"],
        help="faust's log level; default: warn",
    )

    start = _sub(
        sub,
        "start",
        "publish the Adaptive Home Guardian plan for one device",
        "Publish the Adaptive Home Guardian plan (patrol the areas, handle what happens, return to "
        "the station) for one device, and print its experience ID.",
    )
    _bootstrap_opt(start)
    _prefix_opt(start)
    _language_opt(start, "language of the default room names (Korean or English)")
    start.add_argument(
        "--device",
        required=True,
        type=_checked("an ID", _identifier),
        metavar="ID",
        help="the device (required)",
    )
    start.add_argument(
        "--areas", default="2,3,6", metavar="ID,ID,…", help="the area IDs to patrol, in order; default: 2,3,6"
    )
    start.add_argument(
        "--area-names",
        default=None,
        metavar="ID=NAME,…",
        help="the household's room names, e.g. '2=Living room,3=Bedroom' (or a JSON object when a "
        "name holds a comma); default: the names of --language for areas 2-7",
    )
    start.add_argument(
        "--experience-id",
        default=None,
        type=_checked("an ID", _identifier),
        metavar="ID",
        help="the experience's ID; default: exp_DEVICE_MILLISECONDS",
    )
    start.add_argument(
        "--max-decisions", type=_int_at_least(0), default=3, metavar="N", help="decision budget; default: 3"
    )

    sim = _sub(
        sub,
        "simulate",
        "a fleet of simulated devices on the broker",
        "A fleet of simulated devices: each gets a plan, sends observations and task events, obeys "
        "dispatches, and plays a story of docs/SCENARIOS.md; exits 0 when every story ends as expected.",
    )
    _bootstrap_opt(sim)
    _prefix_opt(sim)
    sim.add_argument(
        "--devices", type=_int_at_least(1), default=20, metavar="N", help="fleet size; default: 20"
    )
    sim.add_argument(
        "--scenario",
        action="extend",
        nargs="+",
        type=_checked("a scenario ID", _scenario),
        default=[],
        metavar="HG-NN",
        help="scenario ID(s) the fleet plays, e.g. '--scenario HG-05 HG-07' (repeatable; commas work "
        "too); default: every story, as --mix",
    )
    sim.add_argument("--mix", action="store_true", help="every story round-robin, then the other cases")
    sim.add_argument("--seed", type=_int_at_least(0), default=7, metavar="N", help="random seed; default: 7")
    sim.add_argument(
        "--speed",
        type=_checked("a number", _positive_float),
        default=1.0,
        metavar="X",
        help="time compression factor; default: 1",
    )
    sim.add_argument(
        "--timeout",
        type=_checked("a number", _positive_float),
        default=300.0,
        metavar="S",
        help="give up after this many seconds; default: 300",
    )
    sim.add_argument(
        "--summary-json",
        default=None,
        type=_checked("a file", _new_file),
        metavar="FILE",
        help="also write the fleet's final table as JSON here",
    )
    sim.add_argument(
        "--rate",
        type=_checked("a number", _positive_float),
        default=2.0,
        metavar="R",
        help="routine observations per simulated second while patrolling; default: 2",
    )
    sim.add_argument(
        "--patrol-seconds",
        type=_checked("a number", _positive_float),
        default=10.0,
        metavar="S",
        help="simulated seconds per area's patrol; default: 10",
    )
    sim.add_argument(
        "--device-prefix",
        default=None,
        type=_checked("an ID", _identifier),
        metavar="TEXT",
        help="device ID prefix; default: sim<seed>-",
    )
    sim.add_argument("--progress", action="store_true", help="show a live table of experiences by phase")
    sim.add_argument(
        "--no-device-context",
        action="store_true",
        help="devices send no device_context.v2 snapshots (default: they do)",
    )

    replay = _sub(
        sub,
        "replay",
        "replay exported topics through the pipeline, offline",
        "Run exported topic contents (kcat -C -J lines, as 'guardian export' writes) through the "
        "pipeline's logic without a broker, and write decisions.jsonl, dispatch.jsonl, "
        "timeline.jsonl, deadletter.jsonl, summary.json, divergences.jsonl and report.html to --out.",
    )
    _prefix_opt(replay)
    _supervisor_opt(replay, "the model backend of --decisions model")
    _language_opt(replay, "language of spoken text in the replayed dispatches")
    replay.add_argument(
        "files",
        nargs="+",
        metavar="FILE",
        help="kcat -C -J file(s); '-' reads standard input; gzip-compressed input is read as such",
    )
    replay.add_argument(
        "--out",
        required=True,
        type=_checked("a directory", _new_dir),
        metavar="DIR",
        help="output directory (created if missing; Guardian's own output files in it are replaced "
        "when the replay succeeds, nothing else; required)",
    )
    replay.add_argument(
        "--jobs",
        type=_int_at_least(1),
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

    export = _sub(
        sub,
        "export",
        "write topic contents in the kcat -C -J format",
        "Write the records of the contract's topics for a time range (Kafka timestamps) in the "
        "kcat -C -J format that 'guardian replay' reads.",
    )
    _bootstrap_opt(export)
    _prefix_opt(export)
    export.add_argument(
        "--out",
        required=True,
        type=_checked("a file", _new_file),
        metavar="FILE",
        help="output file, '-' for standard output (required)",
    )
    export.add_argument(
        "--since-ms",
        type=_int_at_least(0),
        default=None,
        metavar="T",
        help="first Kafka timestamp (ms since the epoch, inclusive); default: the beginning",
    )
    export.add_argument(
        "--until-ms",
        type=_int_at_least(0),
        default=None,
        metavar="T",
        help="last Kafka timestamp (ms, inclusive); default: now",
    )
    export.add_argument(
        "--device",
        default=None,
        type=_checked("an ID", _identifier),
        metavar="ID",
        help="only this device's records; default: every device",
    )
    export.add_argument(
        "--topics",
        default=None,
        type=_csv_of(EXPORT_TOPICS),
        metavar="SUFFIX,…",
        help=f"topic suffixes to export, from {', '.join(EXPORT_TOPICS)}; default: all of them",
    )

    bench = _sub(
        sub,
        "bench",
        "the benchmark (throughput, latency, memory, baselines)",
        "Measure throughput, trigger-to-dispatch latency and memory of a worker against Kafka's own "
        "tools and a raw consumer in the same run; writes OUT/bench.json, bench.svg, results.json.",
    )
    _bootstrap_opt(bench)
    _prefix_opt(bench)
    _partitions_opt(bench)
    bench.add_argument("--quick", action="store_true", help="2,000 devices instead of 10,000 (a few minutes)")
    bench.add_argument(
        "--out",
        default="out/bench",
        type=_checked("a directory", _new_dir),
        metavar="DIR",
        help="default: out/bench",
    )
    bench.add_argument(
        "--only",
        default=None,
        type=_csv_of(BENCH_PARTS),
        metavar="PART,…",
        help=f"parts to run, from {', '.join(BENCH_PARTS)}; default: all",
    )
    bench.add_argument(
        "--devices",
        type=_int_at_least(1),
        default=None,
        metavar="N",
        help="fleet size; default: 10000 (2000 with --quick)",
    )
    bench.add_argument(
        "--records",
        type=_int_at_least(1),
        default=None,
        metavar="N",
        help="observations in the throughput run; default: set by the fleet size",
    )
    bench.add_argument(
        "--rate",
        type=_checked("a number", _positive_float),
        default=None,
        metavar="R",
        help="steady load of the latency run, observations/s; default: a quarter of the measured maximum",
    )
    bench.add_argument(
        "--workers",
        default="1,2,4",
        type=_checked("a comma-separated list of worker counts (1 to 16)", _worker_counts),
        metavar="N,…",
        help="worker counts of the scaleout part, each in one group on the same topics; default: 1,2,4",
    )
    bench.add_argument(
        "--profile",
        action="store_true",
        help="sample the measured worker and the inbox floor with py-spy (when installed); top entries "
        "in the output and OUT/bench.json",
    )

    schema = _sub(sub, "schema", "JSON Schemas of the records", "JSON Schemas of the records.")
    ssub = schema.add_subparsers(dest="schema_command", required=True, metavar="ACTION")
    sexp = _sub(
        ssub,
        "export",
        "write one JSON Schema per record type",
        "Write one JSON Schema file per record type into DIR.",
    )
    sexp.add_argument(
        "dir",
        type=_checked("a directory", _new_dir),
        metavar="DIR",
        help="output directory (created if missing)",
    )

    console = _sub(
        sub, "console", "serve the live fleet console", "Serve the live fleet console (read-only)."
    )
    _bootstrap_opt(console)
    _prefix_opt(console)
    add_console_options(console)

    context = _sub(sub, "context", "device context v2", "Device context v2 tools.")
    csub = context.add_subparsers(dest="context_command", required=True, metavar="ACTION")
    csum = _sub(
        csub,
        "summary",
        "print the planner summary of a device's context from a replay file",
        "Run the input records of kcat -C -J file(s) through the pipeline's logic, as 'guardian "
        "replay' does, and print the planner summary (planner_context_summary.v2) of one device's "
        "context as JSON: what a planner or the model saw.",
    )
    _prefix_opt(csum)
    csum.add_argument("files", nargs="+", metavar="FILE", help="kcat -C -J file(s)")
    csum.add_argument(
        "--device", required=True, type=_checked("an ID", _identifier), metavar="ID", help="the device"
    )
    csum.add_argument(
        "--at-ms",
        type=_int_at_least(0),
        default=None,
        metavar="T",
        help="as of this receive time (ms since the epoch); default: the device's last record",
    )

    demo = _sub(
        sub,
        "demo",
        "the whole job: broker, worker, simulated fleet, report",
        "The whole job on one machine: a local broker, topics, a worker, a simulated fleet playing "
        "every story, then export, replay and report into --out; what 'make demo' runs.",
    )
    _bootstrap_opt(demo)
    _partitions_opt(demo)
    _data_dir_opt(demo, "where the local broker and the worker keep their data")
    _supervisor_opt(demo, "who decides")
    demo.add_argument(
        "--devices", type=_int_at_least(1), default=20, metavar="N", help="fleet size; default: 20"
    )
    demo.add_argument(
        "--out",
        default="out/demo",
        type=_checked("a directory", _new_dir),
        metavar="DIR",
        help="default: out/demo",
    )
    demo.add_argument("--seed", type=_int_at_least(0), default=7, metavar="N", help="random seed; default: 7")
    demo.add_argument(
        "--speed",
        type=_checked("a number", _positive_float),
        default=2.0,
        metavar="X",
        help="time compression of the simulated fleet; default: 2",
    )
    demo.add_argument(
        "--timeout",
        type=_checked("a number", _positive_float),
        default=300.0,
        metavar="S",
        help="give up on the fleet after this many seconds; default: 300",
    )
    demo.add_argument(
        "--rate",
        type=_checked("a number", _positive_float),
        default=2.0,
        metavar="R",
        help="routine observations per simulated second; default: 2",
    )
    demo.add_argument(
        "--patrol-seconds",
        type=_checked("a number", _positive_float),
        default=10.0,
        metavar="S",
        help="simulated seconds per area; default: 10",
    )
    demo.add_argument("--keep-topics", action="store_true", help="keep the run's topics on the broker")
    demo.add_argument(
        "--linger",
        action="store_true",
        help="keep the broker, the worker and the console up after the summary, until Ctrl-C",
    )
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

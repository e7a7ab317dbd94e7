"""The arguments of the ``guardian`` commands that run or serve the live system on a broker:
``kafka``, ``topics``, ``worker``, ``start``, ``simulate`` and ``console``."""

from __future__ import annotations

import argparse

from guardian.cli_parser import (
    Parser,
    add_command,
    bootstrap_opt,
    data_dir_opt,
    language_opt,
    partitions_opt,
    prefix_opt,
    supervisor_opt,
)
from guardian.cli_values import checked, identifier, int_at_least, new_file, positive_float, scenario
from guardian.console_opts import add_console_options


def add_kafka(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian kafka up|down|status|fetch``."""
    kafka = add_command(
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
        data_dir_opt(add_command(ksub, name, summary, description), "where the broker's jars and data live")


def add_topics(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian topics create``."""
    topics = add_command(sub, "topics", "topic administration", "Topic administration.")
    tsub = topics.add_subparsers(dest="topics_command", required=True, metavar="ACTION")
    create = add_command(
        tsub,
        "create",
        "create every topic (idempotent)",
        "Create every topic of the contract plus Guardian's control topic, all with the same "
        "partition count; a topic that exists with another count is an error.",
    )
    bootstrap_opt(create)
    prefix_opt(create)
    partitions_opt(create)


def add_worker(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian worker``."""
    worker = add_command(
        sub,
        "worker",
        "run the pipeline (a faust worker)",
        "Run the pipeline: read the input topics, judge every record, write decisions, dispatches, "
        "timeline entries and dead letters. Several workers share one consumer group.",
    )
    bootstrap_opt(worker)
    prefix_opt(worker)
    partitions_opt(worker)
    data_dir_opt(worker, "where the worker keeps its RocksDB tables")
    supervisor_opt(worker, "who decides")
    worker.add_argument(
        "--worker-id",
        type=checked("an ID", identifier),
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


def add_start(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian start``."""
    start = add_command(
        sub,
        "start",
        "publish the Adaptive Home Guardian plan for one device",
        "Publish the Adaptive Home Guardian plan (patrol the areas, handle what happens, return to "
        "the station) for one device, and print its experience ID.",
    )
    bootstrap_opt(start)
    prefix_opt(start)
    language_opt(start, "language of the default room names (Korean or English)")
    start.add_argument(
        "--device",
        required=True,
        type=checked("an ID", identifier),
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
        type=checked("an ID", identifier),
        metavar="ID",
        help="the experience's ID; default: exp_DEVICE_MILLISECONDS",
    )
    start.add_argument(
        "--max-decisions", type=int_at_least(0), default=3, metavar="N", help="decision budget; default: 3"
    )


def add_simulate(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian simulate``."""
    sim = add_command(
        sub,
        "simulate",
        "a fleet of simulated devices on the broker",
        "A fleet of simulated devices: each gets a plan, sends observations and task events, obeys "
        "dispatches, and plays a story of docs/SCENARIOS.md; exits 0 when every story ends as expected.",
    )
    bootstrap_opt(sim)
    prefix_opt(sim)
    sim.add_argument(
        "--devices", type=int_at_least(1), default=20, metavar="N", help="fleet size; default: 20"
    )
    sim.add_argument(
        "--scenario",
        action="extend",
        nargs="+",
        type=checked("a scenario ID", scenario),
        default=[],
        metavar="HG-NN",
        help="scenario ID(s) the fleet plays, e.g. '--scenario HG-05 HG-07' (repeatable; commas work "
        "too); default: every story, as --mix",
    )
    sim.add_argument("--mix", action="store_true", help="every story round-robin, then the other cases")
    sim.add_argument("--seed", type=int_at_least(0), default=7, metavar="N", help="random seed; default: 7")
    sim.add_argument(
        "--speed",
        type=checked("a number", positive_float),
        default=1.0,
        metavar="X",
        help="time compression factor; default: 1",
    )
    sim.add_argument(
        "--timeout",
        type=checked("a number", positive_float),
        default=300.0,
        metavar="S",
        help="give up after this many seconds; default: 300",
    )
    sim.add_argument(
        "--summary-json",
        default=None,
        type=checked("a file", new_file),
        metavar="FILE",
        help="also write the fleet's final table as JSON here",
    )
    sim.add_argument(
        "--rate",
        type=checked("a number", positive_float),
        default=2.0,
        metavar="R",
        help="routine observations per simulated second while patrolling; default: 2",
    )
    sim.add_argument(
        "--patrol-seconds",
        type=checked("a number", positive_float),
        default=10.0,
        metavar="S",
        help="simulated seconds per area's patrol; default: 10",
    )
    sim.add_argument(
        "--device-prefix",
        default=None,
        type=checked("an ID", identifier),
        metavar="TEXT",
        help="device ID prefix; default: sim<seed>-",
    )
    sim.add_argument("--progress", action="store_true", help="show a live table of experiences by phase")
    sim.add_argument(
        "--no-device-context",
        action="store_true",
        help="devices send no device_context.v2 snapshots (default: they do)",
    )


def add_console(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian console``."""
    console = add_command(
        sub, "console", "serve the live fleet console", "Serve the live fleet console (read-only)."
    )
    bootstrap_opt(console)
    prefix_opt(console)
    add_console_options(console)

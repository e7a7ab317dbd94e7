"""The arguments of the ``guardian`` commands that run the whole system end to end: ``bench`` and
``demo``."""

from __future__ import annotations

import argparse

from bench.parts import PARTS as BENCH_PARTS
from guardian.cli_parser import (
    Parser,
    add_command,
    bootstrap_opt,
    data_dir_opt,
    partitions_opt,
    prefix_opt,
    supervisor_opt,
)
from guardian.cli_values import checked, csv_of, int_at_least, new_dir, positive_float, worker_counts


def add_bench(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian bench``."""
    bench = add_command(
        sub,
        "bench",
        "the benchmark (throughput, latency, memory, baselines)",
        "Measure throughput, trigger-to-dispatch latency and memory of a worker against Kafka's own "
        "tools and a raw consumer in the same run; writes OUT/bench.json, bench.svg, results.json.",
    )
    bootstrap_opt(bench)
    prefix_opt(bench)
    partitions_opt(bench)
    bench.add_argument("--quick", action="store_true", help="2,000 devices instead of 10,000 (a few minutes)")
    bench.add_argument(
        "--out",
        default="out/bench",
        type=checked("a directory", new_dir),
        metavar="DIR",
        help="default: out/bench",
    )
    bench.add_argument(
        "--only",
        default=None,
        type=csv_of(BENCH_PARTS),
        metavar="PART,…",
        help=f"parts to run, from {', '.join(BENCH_PARTS)}; default: all",
    )
    bench.add_argument(
        "--devices",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="fleet size; default: 10000 (2000 with --quick)",
    )
    bench.add_argument(
        "--records",
        type=int_at_least(1),
        default=None,
        metavar="N",
        help="observations in the throughput run; default: set by the fleet size",
    )
    bench.add_argument(
        "--rate",
        type=checked("a number", positive_float),
        default=None,
        metavar="R",
        help="steady load of the latency run, observations/s; default: a quarter of the measured maximum",
    )
    bench.add_argument(
        "--workers",
        default="1,2,4",
        type=checked("a comma-separated list of worker counts (1 to 16)", worker_counts),
        metavar="N,…",
        help="worker counts of the scaleout part, each in one group on the same topics; default: 1,2,4",
    )
    bench.add_argument(
        "--profile",
        action="store_true",
        help="sample the measured worker and the inbox floor with py-spy (when installed); top entries "
        "in the output and OUT/bench.json",
    )


def add_demo(sub: argparse._SubParsersAction[Parser]) -> None:
    """``guardian demo``."""
    demo = add_command(
        sub,
        "demo",
        "the whole job: broker, worker, simulated fleet, report",
        "The whole job on one machine: a local broker, topics, a worker, a simulated fleet playing "
        "every story, then export, replay and report into --out; what 'make demo' runs.",
    )
    bootstrap_opt(demo)
    partitions_opt(demo)
    data_dir_opt(demo, "where the local broker and the worker keep their data")
    supervisor_opt(demo, "who decides")
    demo.add_argument(
        "--devices", type=int_at_least(1), default=20, metavar="N", help="fleet size; default: 20"
    )
    demo.add_argument(
        "--out",
        default="out/demo",
        type=checked("a directory", new_dir),
        metavar="DIR",
        help="default: out/demo",
    )
    demo.add_argument("--seed", type=int_at_least(0), default=7, metavar="N", help="random seed; default: 7")
    demo.add_argument(
        "--speed",
        type=checked("a number", positive_float),
        default=2.0,
        metavar="X",
        help="time compression of the simulated fleet; default: 2",
    )
    demo.add_argument(
        "--timeout",
        type=checked("a number", positive_float),
        default=300.0,
        metavar="S",
        help="give up on the fleet after this many seconds; default: 300",
    )
    demo.add_argument(
        "--rate",
        type=checked("a number", positive_float),
        default=2.0,
        metavar="R",
        help="routine observations per simulated second; default: 2",
    )
    demo.add_argument(
        "--patrol-seconds",
        type=checked("a number", positive_float),
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

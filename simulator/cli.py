"""``guardian simulate``: a fleet of simulated devices on the broker, and its final table."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from pathlib import Path
from typing import TextIO

import orjson
from aiokafka.errors import KafkaError

from config.exitcodes import Exit
from config.settings import Settings
from simulator.fleet import Fleet, FleetConfig, FleetReport, format_progress, format_table
from simulator.outbox import TransportError
from simulator.scenarios import SCENARIO_IDS
from topics.names import TopicNames

#: Brokers refuse records more than this far in the future by default (Kafka 4).
FUTURE_LIMIT_S = 3600.0


class LiveTable:
    """Redraws the progress table in place on a terminal, or prints one summary line otherwise."""

    def __init__(self, out: TextIO | None = None, *, every_s: float = 1.0) -> None:
        self.out = out if out is not None else sys.stdout
        self.tty = self.out.isatty()
        self.drawn = 0
        self.ticks = 0
        self.every = max(1, round(5.0 / every_s)) if not self.tty else 1

    def __call__(self, fleet: Fleet) -> None:
        self.ticks += 1
        lines = format_progress(fleet)
        if self.tty:
            if self.drawn:
                self.out.write(f"\x1b[{self.drawn}F\x1b[J")
            self.out.write("\n".join(lines) + "\n")
            self.drawn = len(lines)
        elif self.ticks % self.every == 1 or self.every == 1:
            self.out.write(lines[-1] + "\n")
        self.out.flush()


def config_from_args(args: argparse.Namespace) -> FleetConfig:
    scenarios = tuple(s.upper() for s in args.scenario or ())
    for s in scenarios:
        if s not in SCENARIO_IDS:
            raise ValueError(f"unknown scenario {s!r}: use one of {', '.join(SCENARIO_IDS)}")
    return FleetConfig(
        devices=args.devices,
        scenarios=scenarios,
        mix=bool(args.mix),
        seed=args.seed,
        speed=args.speed,
        timeout_s=args.timeout,
        rate=args.rate,
        patrol_seconds=args.patrol_seconds,
        device_prefix=args.device_prefix,
        device_context=not getattr(args, "no_device_context", False),
    )


def warn_future(config: FleetConfig, out: TextIO) -> None:
    lead = (config.speed - 1.0) * config.timeout_s
    if lead > FUTURE_LIMIT_S * 0.8:
        out.write(
            f"guardian simulate: at --speed {config.speed:g} for up to {config.timeout_s:.0f} s "
            "the simulated clock may run "
            f"{lead / 60:.0f} min ahead; brokers refuse timestamps over 1 h ahead by default "
            "(log.message.timestamp.after.max.ms)\n"
        )


def write_summary(report: FleetReport, path: str | None) -> None:
    if path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(orjson.dumps(report.to_json(), option=orjson.OPT_INDENT_2))


def cmd_simulate(args: argparse.Namespace, settings: Settings) -> int:
    """Run the fleet; exit 0 only if every scenario met its expected outcome."""
    try:
        config = config_from_args(args)
    except ValueError as exc:
        print(f"guardian simulate: {exc}", file=sys.stderr)
        return 2
    bootstrap = settings.resolve_bootstrap()
    names = TopicNames(settings.topic_prefix)
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retried metadata races; errors surface here
    warn_future(config, sys.stderr)
    from simulator.kafka import run_simulation

    live = LiveTable() if args.progress else None
    print(
        f"simulating {config.devices} device(s) on {bootstrap} (prefix {names.prefix!r}), "
        f"seed {config.seed}, speed {config.speed:g}x",
        flush=True,
    )
    try:
        report = asyncio.run(run_simulation(config, bootstrap=bootstrap, names=names, on_tick=live))
    except (TransportError, KafkaError, OSError, TimeoutError) as exc:
        print(f"guardian simulate: {type(exc).__name__}: {exc}", file=sys.stderr)
        return Exit.BROKER_UNREACHABLE
    print(format_table(report.rows))
    failed = sum(1 for r in report.rows if not r.ok)
    print(
        f"{len(report.rows) - failed}/{len(report.rows)} OK in {report.wall_s:.1f} s "
        f"({report.sim_s:.0f} s simulated)" + (" — TIMED OUT" if report.timed_out else "")
    )
    for err in report.errors[:10]:
        print(f"error: {err}", file=sys.stderr)
    write_summary(report, args.summary_json)
    return 0 if report.ok else 1

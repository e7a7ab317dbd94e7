"""``python -m chaos --seed N --duration S [--shape storm|scale]``: one seeded chaos run.

It prints its seed first (a run without ``--seed`` takes one from the clock), every fault as it
happens, the pauses per kind of fault, the comparison with replay, and ``chaos: PASS`` or ``chaos:
FAIL`` with the reasons; exit 0 only on a pass. ``--out`` keeps the broker's and the workers'
logs, the export, the replay and ``chaos.json``."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

from chaos.run import ChaosConfig, ChaosRun


def parse(argv: list[str] | None = None) -> ChaosConfig:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=None, help="the run's seed; default: from the clock")
    p.add_argument(
        "--duration", type=float, default=240.0, metavar="S", help="seconds of faults and load; default 240"
    )
    p.add_argument(
        "--shape",
        choices=("storm", "scale"),
        default="storm",
        help="storm: 2 workers, every kind of fault; scale: 4 workers, kills",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="workers kept running; default 2 (storm) or 4 (scale)"
    )
    p.add_argument("--partitions", type=int, default=8)
    p.add_argument(
        "--wave-devices",
        type=int,
        default=34,
        help="devices per simulated fleet (`--mix`); default 34: every story and case, then ten more",
    )
    p.add_argument(
        "--wave-every", type=float, default=30.0, metavar="S", help="a new fleet every S seconds; default 30"
    )
    p.add_argument(
        "--out", type=Path, default=None, help="the run's folder; default out/chaos/<shape>-<seed>"
    )
    a = p.parse_args(argv)
    seed = a.seed if a.seed is not None else int(time.time()) % 100_000
    if a.duration <= 0 or a.partitions < 1 or (a.workers is not None and a.workers < 1):
        p.error("--duration, --partitions and --workers must be positive")
    return ChaosConfig(
        seed=seed,
        duration_s=a.duration,
        out=a.out or Path("out/chaos") / f"{a.shape}-{seed}",
        shape=a.shape,
        workers=a.workers or (2 if a.shape == "storm" else 4),
        partitions=a.partitions,
        wave_devices=a.wave_devices,
        wave_every_s=a.wave_every,
    )


def main(argv: list[str] | None = None) -> int:
    config = parse(argv)
    # the watch's clients retry through the broker's outage: their connection errors are expected
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)

    def say(line: str) -> None:
        print(line, flush=True)

    say(
        f"chaos: seed {config.seed}, shape {config.shape}, {config.workers} workers, "
        f"{config.partitions} partitions, "
        f"{config.duration_s:.0f} s (rerun: python -m chaos --seed {config.seed} --shape {config.shape} "
        f"--duration {config.duration_s:g})"
    )
    report = ChaosRun(config, say).run()
    for kind, p in report.pauses.items():
        say(
            f"pause after {kind}: {p['faults']} fault(s), median {p['median_s']} s, worst {p['worst_s']} s"
            + (f", {p['unended']} never ended" if p["unended"] else "")
        )
    if report.broker_waits:
        say(f"workers that started while the broker was stopped and gave up on it: {report.broker_waits}")
    if report.verdict is not None:
        for kind, counts in report.verdict.counts.items():
            say(f"{kind}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    problems = report.problems + (report.verdict.problems if report.verdict else [])
    for problem in problems:
        say(f"problem: {problem}")
    say(f"chaos: {'PASS' if report.ok else 'FAIL'} seed {config.seed} ({config.out / 'chaos.json'})")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""``guardian bench --only console``: the live console following the bench's outputs.

The bench's fleet (:mod:`bench.replay_bench`'s generated export of ``devices`` devices) is replayed
(rules, one job, no report) into output files; a child process then feeds those outputs, the four
output topics interleaved in turns of 500 records as a reader of every partition takes them, to
the console's core (:class:`console.state.ConsoleState` with its default bounds), merging and
rendering the overview every 5,000 records as the server does every 0.5 s. Its wall time gives
the records/s, ``VmHWM`` its peak RSS. The Kafka fetch and the page are not in it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.replay_bench import PEAK_MB_CODE, REPLAY_CODE, run_child, write_input

RECORDS_FULL = 1_000_000
RECORDS_QUICK = 100_000

_CONSOLE = (
    """
import sys, time, orjson
"""
    + PEAK_MB_CODE
    + """
from itertools import zip_longest
from pathlib import Path
from console.render import overview_fragment
from console.state import ConsoleState

out = Path(sys.argv[1])
kinds = {"timeline": "timeline.jsonl", "decisions": "decisions.jsonl", "dispatch": "dispatch.jsonl",
         "deadletter": "deadletter.jsonl"}
lines = {k: (out / f).read_bytes().splitlines() for k, f in kinds.items()}
turns = []
for k, ls in lines.items():
    turns.append([(k, ls[i:i + 500]) for i in range(0, len(ls), 500)])
state = ConsoleState()
n = 0
t = time.perf_counter()
for group in zip_longest(*turns):
    for item in group:
        if item is None:
            continue
        kind, chunk = item
        for value in chunk:
            state.add(kind, n % 8, n, 1785400000000 + n, None, value)
            n += 1
            if n % 5000 == 0:
                state.flush()
                overview_fragment(state, [])
state.flush()
wall = time.perf_counter() - t
print(orjson.dumps({"records": n, "wall_s": wall, "rss_mb": peak_mb(), "lanes": len(state.lanes),
                    "refused": sum(state.bad.values())}).decode())
"""
)


def run_console_bench(records: int, devices: int) -> dict[str, Any]:
    """Replay the bench's fleet, then time the console's core over its outputs."""
    with tempfile.TemporaryDirectory(prefix="guardian-bench-console-") as tmp_name:
        tmp = Path(tmp_name)
        source = tmp / "fleet.jsonl"
        write_input(source, records, devices)
        out = tmp / "out"
        run_child(REPLAY_CODE, str(source), str(out), "1")
        res = run_child(_CONSOLE, str(out))
    return {
        "input_records": records,
        "devices": devices,
        "records": res["records"],
        "wall_s": res["wall_s"],
        "records_per_s": res["records"] / res["wall_s"] if res["wall_s"] > 0 else 0.0,
        "rss_mb": res["rss_mb"],
        "lanes_held": res["lanes"],
        "refused": res["refused"],
    }


def console_part(results: dict[str, Any], devices: int, *, quick: bool) -> None:
    """The bench's ``console`` part: its figures into ``results["console"]``, one line printed."""
    con = results["console"] = run_console_bench(RECORDS_QUICK if quick else RECORDS_FULL, devices)
    print(
        f"console: {con['records']:,} output records of {con['devices']:,} devices at "
        f"{con['records_per_s']:,.0f} rec/s, peak RSS {con['rss_mb']:.0f} MB, "
        f"{con['lanes_held']:,} lanes held",
        flush=True,
    )

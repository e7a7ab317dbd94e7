"""``guardian bench --only replay``: ``guardian replay`` over a generated export of a fleet.

The input is :mod:`bench.workload`'s mix (every device's plan and ``security.started``, then
observations round robin: 80% state-only, 5% promoted, 5% duplicates, 5% stale, 5% invalid) as
``kcat -C -J`` lines, laid out as an export is: partition by partition (a device's partition is a
hash of its key), each in offset order, so timestamps interleave across the file and replay has to
sort it. The replay (``--decisions rules``, one job, no report) runs in a child process; its wall
time gives the records/s and its ``ru_maxrss`` the peak RSS. The report is timed in a second child
(its memory is that of the report, which reads every output).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
import zlib
from itertools import chain
from pathlib import Path
from typing import Any

import orjson

from bench.workload import device_ids, measured_records, setup_end, setup_records
from guardian.export import kcat_line
from topics.names import TopicNames

T0 = 1785400000000
PARTITIONS = 8
#: input records of the replay part (full run, ``--quick``)
RECORDS_FULL = 1_000_000
RECORDS_QUICK = 100_000


def write_input(path: Path, records: int, devices: int, prefix: str = "guardian.") -> int:
    """Write ``records`` input records for ``devices`` devices to ``path``; how many bytes."""
    names = TopicNames(prefix)
    devs = device_ids(devices)
    setup = setup_records(names, devs, T0)
    measured = measured_records(names, devs, T0, setup_end(devs, T0), max(0, records - len(setup)))
    offsets: dict[tuple[str, int], int] = {}
    parts = [path.with_name(f"{path.name}.p{p}") for p in range(PARTITIONS)]
    handles = [p.open("wb") for p in parts]
    try:
        for rec in chain(setup[:records], measured):
            p = zlib.crc32(rec.key) % PARTITIONS
            off = offsets.get((rec.topic, p), 0)
            offsets[(rec.topic, p)] = off + 1
            handles[p].write(kcat_line(rec.topic, p, off, rec.ts, rec.key, rec.value) + b"\n")
    finally:
        for h in handles:
            h.close()
    with path.open("wb") as out:
        for part in parts:
            with part.open("rb") as fh:
                while chunk := fh.read(1 << 20):
                    out.write(chunk)
            part.unlink()
    return path.stat().st_size


#: the child's own peak RSS in MB: ``VmHWM`` of its memory (``ru_maxrss`` of a process started by
#: fork and exec keeps the peak of the process that forked it: the bench, which generated the input)
PEAK_MB_CODE = """
def peak_mb():
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
"""


def run_child(code: str, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=3600, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"replay bench child failed: {done.stderr[-2000:]}")
    result: dict[str, Any] = orjson.loads(done.stdout.strip().splitlines()[-1])
    return result


REPLAY_CODE = (
    """
import resource, sys, time, orjson
"""
    + PEAK_MB_CODE
    + """
from pathlib import Path
from guardian.replay import replay_files
from config.settings import Settings
t = time.perf_counter()
done = replay_files([sys.argv[1]], Path(sys.argv[2]), settings=Settings.from_env({}), mode="rules",
                    jobs=int(sys.argv[3]), report=False)
wall = time.perf_counter() - t
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
print(orjson.dumps({"records": done.records, "wall_s": wall,
                    "cpu_s": me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                    "rss_mb": peak_mb(), "jobs_rss_mb": kids.ru_maxrss / 1024 if int(sys.argv[3]) > 1 else 0,
                    "counts": done.summary["counts"]}).decode())
"""
)

_REPORT = (
    """
import resource, sys, time, orjson
"""
    + PEAK_MB_CODE
    + """
from pathlib import Path
from guardian.replay import write_report
t = time.perf_counter()
path = write_report(Path(sys.argv[1]))
wall = time.perf_counter() - t
print(orjson.dumps({"wall_s": wall, "rss_mb": peak_mb(),
                    "mb": path.stat().st_size / 1e6 if path else None}).decode())
"""
)


def run_replay_bench(records: int, devices: int, *, jobs: int = 1, report: bool = True) -> dict[str, Any]:
    """Generate the input, replay it, time the report; ``records_per_s``, ``rss_mb`` and the rest."""
    with tempfile.TemporaryDirectory(prefix="guardian-bench-replay-") as tmp_name:
        tmp = Path(tmp_name)
        source = tmp / "fleet.jsonl"
        t = time.perf_counter()
        size = write_input(source, records, devices)
        generated_s = time.perf_counter() - t
        out = tmp / "out"
        res = run_child(REPLAY_CODE, str(source), str(out), str(jobs))
        result: dict[str, Any] = {
            "records": res["records"],
            "devices": devices,
            "jobs": jobs,
            "input_mb": size / 1e6,
            "generate_s": generated_s,
            "wall_s": res["wall_s"],
            "records_per_s": res["records"] / res["wall_s"],
            "records_per_cpu_s": res["records"] / res["cpu_s"] if res["cpu_s"] else None,
            "rss_mb": max(res["rss_mb"], res["jobs_rss_mb"]),
            "counts": res["counts"],
        }
        if report:
            rep = run_child(_REPORT, str(out))
            result["report"] = rep
    return result


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    print(orjson.dumps(run_replay_bench(n, max(1, n // 100)), option=orjson.OPT_INDENT_2).decode())

"""``guardian bench --only scaleout --workers 1,2,4``: N workers in one consumer group on the same topics.

For each N, on topics of its own (a fresh prefix: fresh group, tables and changelogs), the setup
records and the measured observations of a fleet are produced; one worker starts, and once it
commits the other N-1 join its group, so the run shows what a join costs while records flow. The
group's committed offsets are polled to the end:

- ``records_per_s``: the aggregate rate, all committed records over the time from the first commit
  to the last (joins and rebalances included); ``steady_records_per_s``: after the last pause;
- ``rebalance_pause_s``: the longest time the group committed nothing after the others started
  (their start-up, the rebalances, the tables recovered by the new owners);
- ``rss_mb``: each worker's peak RSS (``VmHWM``) at the end;
- correctness: every output record is read back and compared with what ``guardian replay`` makes
  of the same input records, read back from the run's input topics (topic prefixes taken out; a
  live worker runs the very core replay runs, so any difference is a fault of the live path):
  ``missing`` and ``unexpected`` must be 0, for one worker as for several; ``duplicates`` counts
  the extra copies at-least-once delivery wrote across rebalances (same IDs, same place in a
  device's timeline).

On a machine with fewer cores than workers the aggregate cannot grow: the part shows correctness
and the cost of rebalancing; throughput per core is the pipeline part's figure.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import ConsumerRecord, TopicPartition

from bench import kafka_ops
from bench.sizes import Sizes
from bench.workload import device_ids, measured_records, setup_end, setup_records
from config.settings import Settings
from topics.names import TopicNames


class Run(Protocol):
    """What this part needs of the bench's run (``bench.run.Run``)."""

    bootstrap: str
    settings: Settings
    sizes: Sizes
    out: Path
    work: Path
    t0: int

    @property
    def partitions(self) -> int: ...

    def say(self, text: str) -> None: ...

    def spawn(self, worker: kafka_ops.Worker) -> kafka_ops.Worker: ...

    def stop_all(self) -> None: ...

    def worker_env(self) -> dict[str, str]: ...


#: the output topics read back for the correctness check
OUTPUTS = ("decisions", "dispatch", "timeline", "deadletter")
SCALE_TIMEOUT_S = 900.0


def identity(kind: str, value: dict[str, Any], prefix: str) -> str:
    """What makes an output record the same output in another run: its ID (decisions, dispatches),
    its place in a device's story (timeline), its cause and reason (dead letters)."""
    if kind == "decisions":
        return f"decision {value.get('decision_id')}"
    if kind == "dispatch":
        return f"dispatch {value.get('dispatch_id')}"
    if kind == "timeline":
        parts = (value.get(k) for k in ("device_id", "experience_id", "seq", "stage", "ref_id"))
        return "timeline " + "|".join(map(str, parts))
    topic = str(value.get("source_topic", "")).removeprefix(prefix)
    where = (topic, value.get("partition"), value.get("offset"), value.get("reason_code"))
    return "deadletter " + "|".join(map(str, where))


async def read_topics(
    bootstrap: str, topics: list[str], partitions: int, take: Callable[[str, ConsumerRecord[Any, Any]], None]
) -> None:
    """Every record on ``topics`` (to their end offsets now), each handed to ``take(topic, record)``."""
    ends = await kafka_ops.end_offsets(bootstrap, topics, partitions)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, enable_auto_commit=False, request_timeout_ms=30_000
    )
    async with kafka_ops.deadline(f"reading back {topics}", 300):
        await consumer.start()
        try:
            tps = [TopicPartition(t, p) for t in topics for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            left = {tp for tp in tps if ends[(tp.topic, tp.partition)] > 0}
            while left:
                batch = await consumer.getmany(timeout_ms=500, max_records=10_000)
                for tp, msgs in batch.items():
                    for m in msgs:
                        take(tp.topic, m)
                    if msgs and msgs[-1].offset + 1 >= ends[(tp.topic, tp.partition)]:
                        left.discard(tp)
        finally:
            await consumer.stop()


async def read_outputs(bootstrap: str, names: TopicNames, partitions: int) -> Counter[str]:
    """Every output record's :func:`identity` -> how many copies are on the output topics."""
    seen: Counter[str] = Counter()

    def take(topic: str, m: ConsumerRecord[Any, Any]) -> None:
        kind = topic[len(names.prefix) :]
        seen[identity(kind, orjson.loads(m.value or b"{}"), names.prefix)] += 1

    await read_topics(bootstrap, [getattr(names, kind) for kind in OUTPUTS], partitions, take)
    return seen


def replayed_outputs(run: Run, names: TopicNames) -> Counter[str]:
    """What ``guardian replay`` makes of the input records on ``names``' topics, by :func:`identity`
    (one each: the expected outputs)."""
    from guardian.replay import InputRecord, replay_records

    records: list[InputRecord] = []

    def take(topic: str, m: ConsumerRecord[Any, Any]) -> None:
        suffix = names.suffix_of(topic)
        assert suffix is not None
        records.append(InputRecord(suffix, topic, m.partition, m.offset, m.timestamp, m.key, m.value))

    inputs = [getattr(names, attr) for attr in ("plans", "task_events", "observations", "device_context")]
    asyncio.run(read_topics(run.bootstrap, inputs, run.partitions, take))
    settings = replace(run.settings, topic_prefix=names.prefix)
    result = replay_records(records, settings=settings, mode="rules")
    return Counter(
        {identity(kind, value, names.prefix): 1 for kind, values in result.outs.items() for value in values}
    )


def run_scaleout(run: Run, counts: list[int]) -> dict[str, Any]:
    """Run the part for each worker count in ``counts``; the results by count."""
    from streams.admin import create_topics, delete_topics, worker_topics

    sizes = run.sizes
    devices = device_ids(sizes.devices)
    results: dict[str, Any] = {}
    baseline: Counter[str] | None = None
    for n in counts:
        names = TopicNames(f"{run.settings.topic_prefix}scale-{uuid.uuid4().hex[:6]}-w{n}.")
        asyncio.run(create_topics(run.bootstrap, names, run.partitions))
        try:
            t0 = run.t0
            records = setup_records(names, devices, t0)
            end = setup_end(devices, t0)
            measured = list(measured_records(names, devices, t0, end, sizes.records))
            asyncio.run(kafka_ops.produce(run.bootstrap, [*records, *measured]))
            total = len(records) + len(measured)
            run.say(f"scale-out, {n} worker(s): {total} records on {names.prefix}*")
            if baseline is None:  # every count gets the same records: replayed once
                baseline = replayed_outputs(run, names)
            res = _one(run, names, n, total)
            outputs = asyncio.run(read_outputs(run.bootstrap, names, run.partitions))
            res["outputs"] = sum(outputs.values())
            missing = sorted(k for k in baseline if k not in outputs)
            unexpected = sorted(k for k in outputs if k not in baseline)
            res["missing"], res["unexpected"] = len(missing), len(unexpected)
            # a few of each, to see what differs (their kinds and IDs)
            res["missing_examples"], res["unexpected_examples"] = missing[:5], unexpected[:5]
            res["duplicates_by_kind"] = dict(
                Counter(k.split(" ", 1)[0] for k, c in outputs.items() for _ in range(c - 1))
            )
            res["duplicates"] = sum(c - 1 for c in outputs.values())
            results[str(n)] = res
            run.say(
                f"scale-out, {n} worker(s): {res['records_per_s']:,.0f} rec/s aggregate "
                f"({res['steady_records_per_s']:,.0f} after the last pause), longest pause "
                f"{res['rebalance_pause_s']:.1f} s, peak RSS per worker "
                f"{', '.join(f'{r:.0f}' for r in res['rss_mb'])} MB; outputs {res['outputs']}: "
                f"{res['missing']} missing, {res['unexpected']} unexpected, {res['duplicates']} extra copies"
            )
        finally:
            run.stop_all()
            asyncio.run(delete_topics(run.bootstrap, worker_topics(names), timeout_s=60))
    return results


def _one(run: Run, names: TopicNames, n: int, total: int) -> dict[str, Any]:
    from streams.app import app_id

    group = app_id(replace(run.settings, topic_prefix=names.prefix))
    env = run.worker_env()
    env.pop("GUARDIAN_LATENCY_TRACE", None)
    env.update(GUARDIAN_TOPIC_PREFIX=names.prefix, GUARDIAN_DATA_DIR=str(run.work / f"scale-{n}"))
    workers = [
        kafka_ops.Worker(dict(env), run.out / f"scale-{n}-w{i}.log", worker_id=f"scale{i}") for i in range(n)
    ]
    run.spawn(workers[0])
    samples = asyncio.run(_watch(run, workers, group, names, total))
    joined_at = samples["joined_at"]
    points: list[tuple[float, int]] = samples["points"]
    rss = [(kafka_ops.proc_status(w.pid, "VmHWM") or 0) / 2**20 for w in workers]
    (t_first, c_first), (t_last, c_last) = points[0], points[-1]
    pause, pause_end = 0.0, t_first
    for (t_a, _), (t_b, _) in itertools.pairwise(points):
        if t_b >= (joined_at or t_last) and t_b - t_a > pause:
            pause, pause_end = t_b - t_a, t_b
    steady = [p for p in points if p[0] >= pause_end] if n > 1 else points
    steady_rate = (
        (steady[-1][1] - steady[0][1]) / (steady[-1][0] - steady[0][0])
        if len(steady) >= 2 and steady[-1][0] > steady[0][0]
        else 0.0
    )
    for w in workers:
        w.stop()
    return {
        "workers": n,
        "records": total,
        "records_per_s": (c_last - c_first) / (t_last - t_first) if t_last > t_first else 0.0,
        "steady_records_per_s": steady_rate,
        "rebalance_pause_s": pause if n > 1 else 0.0,
        "rss_mb": rss,
    }


async def _watch(
    run: Run, workers: list[kafka_ops.Worker], group: str, names: TopicNames, total: int
) -> dict[str, Any]:
    """Commit progress of the group over every input topic; starts the other workers once the
    first one commits."""
    inputs = [names.plans, names.task_events, names.observations, names.device_context]
    points: list[tuple[float, int]] = []
    joined_at: float | None = None
    deadline = time.monotonic() + SCALE_TIMEOUT_S
    last = -1
    async with kafka_ops.GroupWatch(run.bootstrap, group) as watch:
        while True:
            committed = sum((await watch.committed(inputs)).values())
            now = time.monotonic()
            if committed != last and committed > 0:
                points.append((now, committed))
                last = committed
                if joined_at is None and len(workers) > 1:
                    joined_at = now
                    for w in workers[1:]:
                        run.spawn(w)
            if committed >= total:
                if len(points) < 2:
                    points.insert(0, (now - 1e-3, 0))
                return {"points": points, "joined_at": joined_at}
            for w in workers:
                if w.proc is not None and not w.alive():
                    raise RuntimeError(f"worker {w.worker_id} exited:\n{w.log_tail()}")
            if now > deadline:
                raise TimeoutError(
                    f"waited {SCALE_TIMEOUT_S:.0f} s for group {group}: {committed} of {total} committed"
                )
            await asyncio.sleep(0.1)

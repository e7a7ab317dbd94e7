"""Faults from the broker under load: a restart (docs/SCENARIOS.md HG-22), a flood of poison records."""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from bench import kafka_ops
from bench.workload import device_ids, measured_records, setup_end, setup_records
from guardian.kafka_local import LocalBroker
from guardian.replay import InputRecord, replay_records
from streams.admin import create_topics
from streams.app import app_id
from tests.conftest import make_guardian_env
from tests.live import WorkerProcess, collect, produce
from tests.reliability.fault_load import (
    LOAD_DEVICES,
    SETTINGS,
    collect_all,
    compare,
    lag_returns_to_zero,
    load,
    produce_in_order,
    some_decisions,
)
from topics.names import TopicNames

pytestmark = [pytest.mark.reliability, pytest.mark.kafka]

#: long enough for a steady commit slope at the worker's speed: behind a backlog the worker
#: commits with its devices' state, every 2 s, so a run must span several such steps (about ten
#: seconds; with 60,000 records a run of 3-4 s gave two or three commits, and the clean and the
#: poisoned run's rates varied by a quarter either way)
FLOOD_RECORDS = 150_000


def test_hg22_broker_restart_under_load(own_broker: LocalBroker, tmp_path: Path) -> None:
    bootstrap = own_broker.bootstrap()
    assert bootstrap is not None
    partitions = 4
    prefix = "hg22."
    names = TopicNames(prefix)
    asyncio.run(create_topics(bootstrap, names, partitions))
    env = make_guardian_env(bootstrap, prefix, partitions, tmp_path / "guardian-data")
    records = load(prefix, int(time.time() * 1000) - 600_000)
    replayed = replay_records(records, settings=SETTINGS)
    half = len(records) // 2
    worker = WorkerProcess(env, tmp_path / "worker.log").start()
    try:
        asyncio.run(produce_in_order(bootstrap, records[:half]))
        asyncio.run(collect(bootstrap, names, some_decisions(10), timeout_s=120, settle_s=0.3))
        again = own_broker.restart(timeout_s=120)
        assert again == bootstrap
        assert worker.alive(), worker.log_tail()
        asyncio.run(produce_in_order(bootstrap, records[half:]))
        live = collect_all(bootstrap, names, replayed, timeout_s=300)
        compare(live, replayed, owner_index_may_lag=True)
        lag_returns_to_zero(bootstrap, prefix, partitions, timeout_s=120)
        assert worker.alive(), "the worker did not survive the broker restart:\n" + worker.log_tail()
    finally:
        worker.stop()


POISON = (b"\xff\xfe not utf-8", b"[]", b'{"event_id": 1}', b"not json at all")


def _throughput(
    bootstrap: str, env: dict[str, str], prefix: str, partitions: int, log: Path, expected: int
) -> float:
    """Records/s of one worker over the observations already on the topic (commit slope)."""
    names = TopicNames(prefix)
    group = app_id(replace(SETTINGS, topic_prefix=prefix))
    worker = WorkerProcess(env, log).start()

    async def watch() -> float:
        ends = await kafka_ops.end_offsets(bootstrap, [names.observations], partitions)
        target = sum(ends.values())
        assert target == expected
        samples: list[tuple[float, int]] = []
        deadline = time.monotonic() + 300
        async with kafka_ops.GroupWatch(bootstrap, group) as w:
            while True:
                committed = sum((await w.committed([names.observations])).values())
                if committed > 0 and (not samples or committed != samples[-1][1]):
                    samples.append((time.monotonic(), committed))
                if committed >= target:
                    break
                assert time.monotonic() < deadline, worker.log_tail()
                await asyncio.sleep(0.1)
        (t0, c0), (t1, c1) = samples[0], samples[-1]
        return (c1 - c0) / (t1 - t0) if t1 > t0 and c1 > c0 else float("nan")

    try:
        return asyncio.run(watch())
    finally:
        worker.stop()


def test_poison_flood_keeps_throughput_and_dead_letters_everything(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    partitions = 4
    t0 = int(time.time() * 1000) - 600_000
    devs = device_ids(LOAD_DEVICES, prefix="flood")
    rates: dict[str, float] = {}
    for run in ("clean", "poison"):
        prefix = f"flood{os.getpid()}{run}."
        names = TopicNames(prefix)
        asyncio.run(create_topics(kafka_bootstrap, names, partitions))
        env = make_guardian_env(kafka_bootstrap, prefix, partitions, tmp_path / f"data-{run}")
        setup = setup_records(names, devs, t0)
        clean = [
            r
            for r in measured_records(names, devs, t0, setup_end(devs, t0), FLOOD_RECORDS)
            if b"bbox" not in r.value
        ]
        inputs: list[InputRecord] = []
        for n, rec in enumerate(setup + clean):
            suffix = names.suffix_of(rec.topic)
            assert suffix is not None
            inputs.append(InputRecord(suffix, rec.topic, 0, n, rec.ts, rec.key, rec.value))
            if run == "poison" and suffix == "observations" and n % 9 == 0:
                junk = POISON[n % len(POISON)]
                inputs.append(InputRecord(suffix, rec.topic, 0, 10**7 + n, rec.ts, rec.key, junk))
        n_obs = sum(1 for r in inputs if r.suffix == "observations")
        n_poison = sum(1 for r in inputs if r.value in POISON)
        asyncio.run(produce(kafka_bootstrap, inputs))
        rates[run] = _throughput(kafka_bootstrap, env, prefix, partitions, tmp_path / f"{run}.log", n_obs)
        if run == "poison":
            assert n_poison / n_obs >= 0.09
            replayed = replay_records(inputs, settings=SETTINGS)
            want = len(replayed.outs["deadletter"])
            live = asyncio.run(
                collect(
                    kafka_bootstrap,
                    names,
                    lambda out, want=want: len(out.values["deadletter"]) >= want,
                    timeout_s=120,
                    settle_s=2.0,
                )
            )
            letters = live.values["deadletter"]
            assert len(letters) == len(replayed.outs["deadletter"])
            poison_letters = [d for d in letters if d["reason_code"] in ("not_json", "schema_invalid")]
            assert len(poison_letters) >= n_poison
    (tmp_path / "rates.json").write_bytes(orjson.dumps(rates))
    print(f"poison flood: clean {rates['clean']:,.0f} rec/s, 10% poison {rates['poison']:,.0f} rec/s")
    assert rates["poison"] >= 0.8 * rates["clean"], rates

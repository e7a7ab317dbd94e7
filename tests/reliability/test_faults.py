"""Fault injection under load (docs/SCENARIOS.md HG-21, HG-22): worker SIGKILL, broker restart, a second
worker joining and leaving the consumer group, and a flood of poison records.

The load is every scripted scenario (``tests.scenario_scripts``) on several devices each, plus the
benchmark's fleet mix (``bench.workload``: 80% state-only observations, 5% promoted, 5% duplicates,
5% stale, 5% invalid) over a few hundred devices. The expected outcome of every run is
``guardian.replay.replay_records`` over the very same records: each promoted trigger has exactly
one decision, no decision or dispatch ID is published with two contents, every experience ends in
replay's status, every invalid record has its dead letter, and the consumer group's lag returns to
zero.

Run with ``make reliability`` (``pytest -m reliability``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from bench import kafka_ops
from bench.workload import device_ids, measured_records, setup_end, setup_records
from config.settings import Settings
from guardian.kafka_local import LocalBroker
from guardian.replay import InputRecord, ReplayResult, replay_records
from streams.admin import create_topics
from streams.app import app_id
from tests.conftest import make_guardian_env
from tests.live import Outputs, WorkerProcess, assert_single_content, collect, group_members, produce
from tests.scenario_scripts import SCENARIOS, build, hg12
from topics.names import INPUT_SUFFIXES, TopicNames

pytestmark = [pytest.mark.reliability, pytest.mark.kafka]

SETTINGS = Settings.from_env({})
#: scenario repetitions (devices per scenario) and the fleet-mix load of every fault test
REPEATS = 4
LOAD_DEVICES = 300
LOAD_RECORDS = 6_000
#: long enough for a steady commit slope at the worker's speed: behind a backlog the worker
#: commits with its devices' state, every 2 s, so a run must span several such steps (about ten
#: seconds; with 60,000 records a run of 3-4 s gave two or three commits, and the clean and the
#: poisoned run's rates varied by a quarter either way)
FLOOD_RECORDS = 150_000


def load(prefix: str, t0: int) -> list[InputRecord]:
    """Every scenario on REPEATS devices, HG-12 once, and the bench mix over LOAD_DEVICES devices."""
    records: list[InputRecord] = []
    for rep in range(REPEATS):
        for i, scenario in enumerate(sorted(SCENARIOS)):
            dev = f"r{rep}-{scenario.lower()}"
            records.extend(build(scenario, device_id=dev, prefix=prefix, t0=t0 + rep * 97 + i * 7).records)
    a, b = hg12(prefix=prefix, t0=t0)
    records.extend(a.records + b.records)
    names = TopicNames(prefix)
    devs = device_ids(LOAD_DEVICES, prefix="load")
    mix = setup_records(names, devs, t0) + list(
        measured_records(names, devs, t0, setup_end(devs, t0), LOAD_RECORDS)
    )
    for n, rec in enumerate(mix):
        suffix = names.suffix_of(rec.topic)
        assert suffix is not None
        records.append(InputRecord(suffix, rec.topic, 0, 100_000 + n, rec.ts, rec.key, rec.value))
    records.sort(key=lambda r: r.ts)
    return records


async def produce_in_order(
    bootstrap: str,
    records: list[InputRecord],
    bucket_ms: int = 25,
    delivered: Callable[[int], None] | None = None,
) -> int:
    """Produce as devices do in life: a record is on the broker before any record with a later
    timestamp is sent (each ``bucket_ms`` of record time is delivered before the next is sent), so the
    worker's cross-topic timestamp merge sees what replay sees. ``delivered`` is told how many records
    are on the broker after each bucket."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, request_timeout_ms=30_000, linger_ms=1)
    await producer.start()
    try:
        async with asyncio.timeout(300):
            pending: list[asyncio.Future[Any]] = []
            bucket: int | None = None
            done = 0
            for r in records:
                if bucket is not None and r.ts >= bucket + bucket_ms and pending:
                    await asyncio.gather(*pending)
                    done += len(pending)
                    pending.clear()
                    if delivered is not None:
                        delivered(done)
                if bucket is None or r.ts >= bucket + bucket_ms:
                    bucket = r.ts
                pending.append(await producer.send(r.topic, r.value, key=r.key, timestamp_ms=r.ts))
            await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return len(records)


def compare(live: Outputs, replayed: ReplayResult, *, owner_index_may_lag: bool = False) -> None:
    """Live outputs == replay's: decisions, dispatches, final statuses, dead letters.

    ``owner_index_may_lag``: the experience -> device index (a global table) is not ordered with the
    other partitions' records: with two workers it reaches the other worker a moment later, and a
    worker re-reading uncommitted records after a crash or a broker restart may read another
    partition's record before the plan that fills the index. A record correlated to another
    device's brand-new experience may then be judged ``uncorrelated`` (never promoted, the other
    experience unaffected) instead of ``cross_device``; it must then have that timeline drop."""
    decisions = assert_single_content(live.values["decisions"], "decision_id")
    dispatch = assert_single_content(live.values["dispatch"], "dispatch_id")
    per_trigger: dict[tuple[str, str], set[str]] = {}
    for d in decisions.values():
        per_trigger.setdefault((d["experience_id"], d["trigger_event_id"]), set()).add(d["decision_id"])
    assert all(len(ids) == 1 for ids in per_trigger.values()), "a trigger with two decisions"
    want_decisions = {d["decision_id"]: d for d in replayed.outs["decisions"]}
    want_dispatch = {d["dispatch_id"]: d for d in replayed.outs["dispatch"]}
    assert set(decisions) == set(want_decisions), (len(decisions), len(want_decisions))
    for ident, want in want_decisions.items():
        assert decisions[ident] == want, ident
    assert set(dispatch) == set(want_dispatch), (len(dispatch), len(want_dispatch))
    for ident, want in want_dispatch.items():
        assert dispatch[ident] == want, ident
    assert live.statuses() == replayed.summary["experiences"]
    live_letters = {(d["reason_code"], d["key"], d["payload_sha256"]) for d in live.values["deadletter"]}
    want_letters = {(d["reason_code"], d["key"], d["payload_sha256"]) for d in replayed.outs["deadletter"]}
    if owner_index_may_lag:
        uncorrelated = {e["ref_id"] for e in live.values["timeline"] if e["drop_reason"] == "uncorrelated"}
        for letter in replayed.outs["deadletter"]:
            key = (letter["reason_code"], letter["key"], letter["payload_sha256"])
            if letter["reason_code"] == "cross_device" and key not in live_letters:
                assert letter["event_id"] in uncorrelated, letter
                want_letters.discard(key)
    assert live_letters == want_letters, (len(live_letters), len(want_letters))


def lag_returns_to_zero(bootstrap: str, prefix: str, partitions: int, timeout_s: float = 60.0) -> None:
    names = TopicNames(prefix)
    group = app_id(replace(SETTINGS, topic_prefix=prefix))
    topics = [names.prefix + s for s in INPUT_SUFFIXES]
    asyncio.run(kafka_ops.wait_caught_up(bootstrap, group, topics, partitions, timeout_s))


def collect_all(bootstrap: str, names: TopicNames, replayed: ReplayResult, timeout_s: float) -> Outputs:
    want = dict(replayed.summary["experiences"])
    # (cross_device letters are checked by compare(): with two workers one may be an uncorrelated drop)
    n_letters = len([d for d in replayed.outs["deadletter"] if d["reason_code"] != "cross_device"])

    n_decisions = len({d["decision_id"] for d in replayed.outs["decisions"]})
    n_dispatch = len({d["dispatch_id"] for d in replayed.outs["dispatch"]})

    unmet: list[str] = []  # what the outputs last lacked (said when they never get there)

    def done(out: Outputs) -> bool:
        unmet.clear()
        got = out.statuses()
        wrong = {exp: (got.get(exp), status) for exp, status in want.items() if got.get(exp) != status}
        if wrong:
            shown = dict(sorted(wrong.items())[:10])
            unmet.append(f"{len(wrong)} experiences not at replay's status, (live, replay): {shown}")
        for what, have, need in (
            ("dead letters", len(out.values["deadletter"]), n_letters),
            ("decisions", len({d["decision_id"] for d in out.values["decisions"]}), n_decisions),
            ("dispatches", len({d["dispatch_id"] for d in out.values["dispatch"]}), n_dispatch),
        ):
            if have < need:
                unmet.append(f"{have} {what} of replay's {need}")
        return not unmet

    try:
        return asyncio.run(collect(bootstrap, names, done, timeout_s=timeout_s, settle_s=3.0))
    except TimeoutError:
        short = "; ".join(unmet)
        raise TimeoutError(f"outputs short of replay's after {timeout_s:.0f} s: {short}") from None


def some_decisions(n: int) -> Any:
    def check(out: Outputs) -> bool:
        return len(out.values["decisions"]) >= n

    return check


def test_hg21_sigkill_under_load_recovers_exactly(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    tmp_path: Path,
    kafka_partitions: int,
) -> None:
    names = TopicNames(topic_prefix)
    records = load(topic_prefix, int(time.time() * 1000) - 600_000)
    replayed = replay_records(records, settings=SETTINGS)
    half = len(records) // 2
    first = WorkerProcess(guardian_env, tmp_path / "w1.log", worker_id="w1").start()
    try:
        asyncio.run(produce_in_order(kafka_bootstrap, records[:half]))
        asyncio.run(collect(kafka_bootstrap, names, some_decisions(10), timeout_s=120, settle_s=0.3))
    finally:
        first.kill()  # SIGKILL mid-load: no flush, no commit
    second = WorkerProcess(guardian_env, tmp_path / "w2.log", worker_id="w2").start()
    try:
        asyncio.run(produce_in_order(kafka_bootstrap, records[half:]))
        live = collect_all(kafka_bootstrap, names, replayed, timeout_s=240)
        compare(live, replayed, owner_index_may_lag=True)
        lag_returns_to_zero(kafka_bootstrap, topic_prefix, kafka_partitions)
    finally:
        second.stop()
    assert second.proc is not None and second.proc.returncode in (0, -15), second.log_tail()


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


def worker_state(worker: WorkerProcess) -> str:
    """What a worker says of itself (/ready, its input lag), for a failure's message."""
    import urllib.request

    lines = []
    for page in ("/ready", "/metrics"):
        try:
            with urllib.request.urlopen(worker.base_url + page, timeout=5) as answer:
                text = answer.read().decode()
        except OSError as exc:  # /ready answers 503 with its reasons when not ready
            read = getattr(exc, "read", None)
            text = read().decode() if read is not None else str(exc)
        if page == "/metrics":
            text = "\n".join(
                line for line in text.splitlines() if line.startswith("guardian_consumer_lag_records")
            )
        lines.append(f"{worker.worker_id} {page}: {text}")
    return "\n".join(lines) + "\n" + worker.log_tail(10)


def ready_again(worker: WorkerProcess, timeout_s: float = 60.0) -> None:
    """The worker answers ``/ready`` 200 again, and says its tables are recovered for the partitions
    it holds now (``guardian_table_recovery_completed`` 1)."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while True:
        assert worker.alive(), worker_state(worker)
        try:
            with urllib.request.urlopen(worker.base_url + "/ready", timeout=5) as answer:
                if answer.status == 200:
                    break
        except OSError:  # 503 while not ready
            pass
        assert time.monotonic() < deadline, f"{worker.worker_id} not ready again\n{worker_state(worker)}"
        time.sleep(1)
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(worker.base_url + "/metrics", timeout=5) as answer:
        families = text_string_to_metric_families(answer.read().decode())
    (completed,) = [f.samples[0].value for f in families if f.name == "guardian_table_recovery_completed"]
    assert completed == 1, worker_state(worker)


def test_two_workers_split_partitions_then_one_leaves(
    kafka_bootstrap: str,
    topic_prefix: str,
    guardian_env: dict[str, str],
    tmp_path: Path,
    kafka_partitions: int,
) -> None:
    names = TopicNames(topic_prefix)
    group = app_id(replace(SETTINGS, topic_prefix=topic_prefix))
    records = load(topic_prefix, int(time.time() * 1000) - 600_000)
    replayed = replay_records(records, settings=SETTINGS)
    # w2 leaves for good (a scale-down): a static member otherwise keeps its partitions for the
    # session timeout, waiting for a restart under its ID
    env2 = dict(guardian_env, GUARDIAN_DATA_DIR=str(tmp_path / "guardian-data-2"), GUARDIAN_LEAVE_ON_STOP="1")
    w1 = WorkerProcess(guardian_env, tmp_path / "w1.log", worker_id="w1").start()
    w2 = WorkerProcess(env2, tmp_path / "w2.log", worker_id="w2").start()
    third = len(records) // 3
    try:
        deadline = time.monotonic() + 90
        while len(asyncio.run(group_members(kafka_bootstrap, group))) < 2:
            assert time.monotonic() < deadline, "the two workers never formed one group\n" + w2.log_tail()
            assert w1.alive() and w2.alive(), w1.log_tail() + "\n" + w2.log_tail()
            time.sleep(1)
        # the fleet never pauses (a pause between two parts of the load made a quiet device of one
        # in the middle of its story: its partition, caught up and idle, followed the wall clock,
        # ten minutes past the records' time, and its refresh deadline passed before its answer)
        two_thirds = threading.Event()
        failed: list[Exception] = []

        def fleet() -> None:
            def progress(done: int) -> None:
                if done >= 2 * third:
                    two_thirds.set()

            try:
                asyncio.run(produce_in_order(kafka_bootstrap, records, delivered=progress))
            except Exception as exc:  # noqa: BLE001 - failed in the test's own thread below
                failed.append(exc)
            finally:
                two_thirds.set()

        producing = threading.Thread(target=fleet, name="fleet")
        producing.start()
        asyncio.run(collect(kafka_bootstrap, names, some_decisions(10), timeout_s=120, settle_s=0.3))
        # the partitions are split: both workers are members, each with an assignment
        assert len(asyncio.run(group_members(kafka_bootstrap, group))) == 2
        assert two_thirds.wait(300)
        w2.stop()  # SIGTERM with GUARDIAN_LEAVE_ON_STOP: a clean leave; w1 takes its partitions over
        assert w2.proc is not None and w2.proc.returncode in (0, -15), w2.log_tail()
        producing.join(300)
        assert not producing.is_alive() and not failed, failed
        try:
            live = collect_all(kafka_bootstrap, names, replayed, timeout_s=240)
            compare(live, replayed, owner_index_may_lag=True)
            lag_returns_to_zero(kafka_bootstrap, topic_prefix, kafka_partitions)
        except (TimeoutError, AssertionError) as exc:
            raise AssertionError(f"{exc}\n{worker_state(w1)}") from exc
        ready_again(w1)  # the partitions it took over recovered, as /ready and the metric say
    finally:
        w2.stop()
        w1.stop()


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

"""The load of the fault-injection tests (docs/SCENARIOS.md HG-21, HG-22) and its check against replay.

The load is every scripted scenario (``tests.scenario_scripts``) on several devices each, plus the
benchmark's fleet mix (``bench.workload``: 80% state-only observations, 5% promoted, 5% duplicates,
5% stale, 5% invalid) over a few hundred devices. The expected outcome of every run is
``guardian.replay.replay_records`` over the very same records: each promoted trigger has exactly
one decision, no decision or dispatch ID is published with two contents, every experience ends in
replay's status, every invalid record has its dead letter, and the consumer group's lag returns to
zero.

The tests are run with ``make reliability`` (``pytest -m reliability``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from aiokafka import AIOKafkaProducer

from bench import kafka_ops
from bench.workload import device_ids, measured_records, setup_end, setup_records
from config.settings import Settings
from guardian.replay import InputRecord, ReplayResult
from streams.app import app_id
from tests.live import Outputs, assert_single_content, collect
from tests.scenario_scripts import SCENARIOS, build, hg12
from topics.names import INPUT_SUFFIXES, TopicNames

SETTINGS = Settings.from_env({})
#: scenario repetitions (devices per scenario) and the fleet-mix load of every fault test
REPEATS = 4
LOAD_DEVICES = 300
LOAD_RECORDS = 6_000


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

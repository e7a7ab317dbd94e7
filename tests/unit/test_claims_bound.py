"""The claims log is bounded (§2 rule 12): claims kept compactly, a claim rate per device (a device
flooding new experience IDs wins only its own allowance and costs the other devices nothing), and
start-up reads a snapshot and a bounded tail instead of the whole history."""

from __future__ import annotations

import asyncio
import tracemalloc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.runner import MemoryStore
from streams.claims import ClaimsReader
from streams.claims_snapshot import SnapshotWriting
from tables import claim_snapshot
from tables.claim_table import ClaimTable, fingerprint
from tables.claims import CLAIM_BURST, CLAIM_INTERVAL_MS, ClaimLog
from tests.streams import T0, Script
from tests.unit.claims_fakes import FakeLog
from tests.unit.core_feed import feed, processor

FLOODER, OTHER = "airbot-flood", "airbot-calm"


def flood(log: ClaimLog, n: int, *, at: int = T0, start: int = 0) -> int:
    """``n`` claims of new experience IDs by the flooder, each followed by one of the other device,
    all received at ``at``; returns the next offset."""
    offset = start
    for i in range(n):
        log.apply(offset, f"exp_flood_{start}_{i}".encode(), FLOODER.encode(), at)
        log.apply(offset + 1, f"exp_calm_{start}_{i}".encode(), OTHER.encode(), at)
        offset += 2
    return offset


@settings(max_examples=30)
@given(st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=600, unique=True))
def test_a_claimed_experience_is_never_answered_free(ids: list[str]) -> None:
    table = ClaimTable(slots=2)
    for n, experience_id in enumerate(ids):
        assert table.add(fingerprint(experience_id), n % 7)
    assert len(table) == len(ids)
    for n, experience_id in enumerate(ids):
        assert table.get(fingerprint(experience_id)) == n % 7
        assert not table.add(fingerprint(experience_id), 99)  # the first claim stays first
    again = ClaimTable.from_bytes(*table.to_bytes())
    assert sorted(again.items()) == sorted(table.items())


def test_a_device_flooding_new_ids_wins_only_its_allowance_and_costs_the_others_nothing() -> None:
    log = ClaimLog()
    flood(log, 500)
    assert sum(log.owner(f"exp_flood_0_{i}") == FLOODER for i in range(500)) == CLAIM_BURST
    assert all(log.owner(f"exp_calm_0_{i}") is None for i in range(500)) is False
    # the other device's claims are neither refused nor delayed by the flood beside them ...
    assert all(log.owner(f"exp_calm_0_{i}") == OTHER for i in range(CLAIM_BURST))
    # ... beyond its own allowance only (the same rule for every device)
    assert log.refused == 2 * (500 - CLAIM_BURST)
    assert len(log) == 2 * CLAIM_BURST  # what the worker holds, whatever the flood sent
    # a void claim owns nothing: the experience ID is still free for whoever claims it first
    log.apply(1000, b"exp_flood_0_499", OTHER.encode(), T0 + 3600_000)
    assert log.owner("exp_flood_0_499") == OTHER
    # the allowance comes back with receive time: one claim per interval
    assert not log.would_refuse(FLOODER, T0 + CLAIM_INTERVAL_MS)
    log.apply(1001, b"exp_late_1", FLOODER.encode(), T0 + CLAIM_INTERVAL_MS)
    assert log.owner("exp_late_1") == FLOODER
    assert log.would_refuse(FLOODER, T0 + CLAIM_INTERVAL_MS)


def test_the_core_refuses_a_plan_beyond_its_devices_rate_as_experience_rate() -> None:
    """Replay's store (a MemoryStore) applies the same rate in its processing order: a device
    starting 25 new experiences at once starts 20, the 5 others are ``experience_rate`` dead letters
    (a redacted copy of the plan) that change nothing; another device's plan meanwhile starts."""
    flooder = Script(device_id=FLOODER)
    for i in range(CLAIM_BURST + 5):
        flooder.start(experience_id=f"exp_flood_{i:03d}")
    calm = Script(device_id=OTHER)
    calm.start(experience_id="exp_calm_001")
    store = MemoryStore()
    outs = feed(processor(), store, flooder.records + calm.records)
    goals = [o.value for o in outs if o.kind == "timeline" and o.value["stage"] == "goal"]
    letters = [o.value for o in outs if o.kind == "deadletter"]
    assert [g["experience_id"] for g in goals if g["device_id"] == FLOODER] == [
        f"exp_flood_{i:03d}" for i in range(CLAIM_BURST)
    ]
    assert [g["experience_id"] for g in goals if g["device_id"] == OTHER] == ["exp_calm_001"]
    assert [(d["reason_code"], d["event_id"], d["key"]) for d in letters] == [
        ("experience_rate", f"exp_flood_{i:03d}", FLOODER) for i in range(CLAIM_BURST, CLAIM_BURST + 5)
    ]
    assert all(d["payload"] is not None for d in letters)
    assert store.experiences[FLOODER].experience_id == f"exp_flood_{CLAIM_BURST - 1:03d}"
    assert "exp_flood_021" not in store.owners  # refused: the ID stays free


def snapshot_records(log: ClaimLog, offset: int) -> list[tuple[int, Any, bytes, list[tuple[str, bytes]]]]:
    return [
        (offset + n, None, piece, [mark.header()])
        for n, (mark, piece) in enumerate(claim_snapshot.chunks(log.snapshot(), log.position))
    ]


def test_a_worker_starting_after_a_snapshot_reads_it_and_the_tail_and_decides_the_same() -> None:
    follower = ClaimLog()
    at = flood(follower, 300)
    later = T0 + 10**8  # the other device's allowance is back by then
    follower.apply(at, b"exp_shared", OTHER.encode(), later)
    tail: list[tuple[int, Any, bytes | None, int, Any]] = [(at + 1, b"exp_after", OTHER.encode(), later, ())]
    snap = [(o, k, v, T0, h) for o, k, v, h in snapshot_records(follower, at + 2)]
    snap_at = follower.position  # the snapshot covers the log up to here (the claim at ``at``)
    tail += [*snap, (snap[-1][0] + 1, b"exp_shared", FLOODER.encode(), T0 + 10**9, ())]
    # the log now starts at the snapshot's offset: a worker starting reads from there
    starting = ClaimLog()
    starting.await_snapshot(snap_at)
    for record in tail[: len(tail) // 2]:
        starting.read(*record)
        assert not starting.complete and not starting.has_read(record[0])  # nothing decided yet
    for record in tail:
        starting.read(*record)
        follower.read(*record)
    assert starting.complete and starting.has_read(tail[-1][0])
    for i in range(300):
        for exp in (f"exp_flood_0_{i}", f"exp_calm_0_{i}"):
            assert starting.owner(exp) == follower.owner(exp)
    assert starting.owner("exp_shared") == follower.owner("exp_shared") == OTHER
    assert starting.owner("exp_after") == OTHER
    assert starting.would_refuse(FLOODER, T0) and follower.would_refuse(FLOODER, T0)
    assert (starting.snapshot_at, starting.refused, len(starting)) == (
        follower.snapshot_at,
        follower.refused,
        len(follower),
    )
    assert follower.snapshot_at == snap_at  # the snapshot read back complete


def test_an_incomplete_snapshot_is_ignored_and_a_snapshot_is_due_at_one_claim() -> None:
    log = ClaimLog(snapshot_every=10)
    for offset in range(9):
        log.apply(offset, f"exp_{offset}".encode(), OTHER.encode(), T0)
    assert log.due is None
    log.apply(9, b"exp_9", OTHER.encode(), T0)
    log.apply(10, b"exp_10", OTHER.encode(), T0)
    assert log.due == 10  # the first claim at or past the boundary: its writer writes the snapshot
    records = snapshot_records(log, 11)
    log.read(*records[0][:3], T0, records[0][3])
    log.read(12, None, b"x", T0, [(claim_snapshot.HEADER, b"5 0 2")])  # half a snapshot
    assert log.snapshot_at == 11 and log.owner("exp_3") == OTHER
    starting = ClaimLog()
    starting.await_snapshot(5)
    starting.read(12, None, b"x", T0, [(claim_snapshot.HEADER, b"5 0 2")])
    assert not starting.complete


async def test_a_flooding_device_writes_only_its_allowance_and_another_device_is_claimed_meanwhile() -> None:
    reader = ClaimsReader("unused:9", "p.claims", snapshot=SnapshotWriting(enabled=False))
    reader.start_end = 0
    log = FakeLog(reader, delay_s=0.001)
    for i in range(200):
        reader.request(lambda: log, f"exp_flood_{i}", FLOODER, T0)
    reader.request(lambda: log, "exp_calm", OTHER, T0)
    await asyncio.wait_for(asyncio.gather(*reader.under_way.tasks), 10)
    written = [(k.decode(), v.decode()) for k, v in log.records]
    assert ("exp_calm", OTHER) in written
    assert len([1 for _, dev in written if dev == FLOODER]) == CLAIM_BURST
    assert len(reader.claims) == CLAIM_BURST + 1 and reader.voids.voided == 200 - CLAIM_BURST
    # every plan is settled: the void ones go on to be refused, and are forgotten as they go
    assert all(reader.settled(f"exp_flood_{i}", FLOODER) for i in range(200))
    assert not reader.holds(None, "exp_flood_199", FLOODER, T0)
    assert ("exp_flood_199", FLOODER) not in reader.voids.refused
    assert reader.under_way.turns == {}


def test_a_claim_costs_about_30_bytes_where_it_cost_177() -> None:
    """What the worker retains per claim (tracemalloc), with 50,000 claims of 1,000 devices: the
    table's arrays at most two thirds full, plus each device's name and rate once."""
    tracemalloc.start()
    try:
        log = ClaimLog()
        before = tracemalloc.get_traced_memory()[0]
        n = 50_000
        for i in range(n):
            device = f"airbot-{i % 1000:06d}"
            log.apply(i, f"exp_guardian_{i:012d}".encode(), device.encode(), (i // 1000) * CLAIM_INTERVAL_MS)
        per_claim = (tracemalloc.get_traced_memory()[0] - before) / n
    finally:
        tracemalloc.stop()
    assert len(log) == n
    print(f"claims: {per_claim:.1f} bytes retained per claim ({n} claims)")
    assert per_claim < 40

"""The experience claims (§2 rule 9 across workers): the first claim in the one-partition log
owns an experience, on every worker, after a crash, whatever else is claimed later."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.runner import MemoryStore
from streams.claims import ClaimsReader, ClaimTimeout
from tables.claims import ClaimLog
from tests.streams import T0, Script
from tests.unit.claims_fakes import FakeLog
from tests.unit.core_feed import feed, processor


def fold(records: list[tuple[str, str]]) -> ClaimLog:
    log = ClaimLog()
    for offset, (exp, dev) in enumerate(records):
        log.apply(offset, exp.encode(), dev.encode())
    return log


def test_the_first_claim_owns_the_experience_and_later_claims_never_move_it() -> None:
    log = fold([("exp-1", "dev-a"), ("exp-1", "dev-b"), ("exp-2", "dev-b"), ("exp-1", "dev-a")])
    assert log.owner("exp-1") == "dev-a"
    assert log.owner("exp-2") == "dev-b"
    assert log.owner("exp-3") is None
    assert log.decide("exp-1", "dev-a") is True
    assert log.decide("exp-1", "dev-b") is False
    assert log.decide("exp-3", "dev-a") is None  # not claimed yet: the caller claims first


def test_a_device_claiming_again_after_a_crash_does_not_move_the_owner() -> None:
    # dev-b's claim came second; dev-b crashed before committing its plan and claims again
    log = fold([("exp-1", "dev-a"), ("exp-1", "dev-b"), ("exp-1", "dev-b"), ("exp-1", "dev-b")])
    assert log.owner("exp-1") == "dev-a"


def test_has_read_tracks_the_position_and_re_fetched_records_are_ignored() -> None:
    log = ClaimLog()
    log.apply(0, b"exp-1", b"dev-a")
    assert log.has_read(0) and not log.has_read(1)
    log.apply(1, b"exp-1", b"dev-b")
    log.apply(0, b"exp-1", b"dev-c")  # a re-fetch of an old offset changes nothing
    assert log.owner("exp-1") == "dev-a"
    assert log.position == 2
    log.skip_to(10)  # records the broker no longer has
    assert log.has_read(9) and not log.has_read(10)


def test_unusable_records_are_skipped_and_counted() -> None:
    log = ClaimLog()
    log.apply(0, None, b"dev-a")
    log.apply(1, b"exp-1", b"")
    log.apply(2, b"\xff\xfe", b"dev-a")
    log.apply(3, b"exp-1", b"dev-b")
    assert log.unusable == 3
    assert log.owner("exp-1") == "dev-b"
    assert log.position == 4


claims = st.lists(
    st.tuples(st.sampled_from(["e1", "e2", "e3"]), st.sampled_from(["d1", "d2", "d3"])), max_size=30
)


@given(claims, st.integers(min_value=0, max_value=30))
def test_every_reader_of_the_log_agrees_on_the_first_claim(records: list[tuple[str, str]], cut: int) -> None:
    """A worker that read a prefix, then the rest, decides as a worker that read the log from its
    beginning (a restart): the owner of each experience is the device of its first claim."""
    whole = fold(records)
    first: dict[str, str] = {}
    for exp, dev in records:
        first.setdefault(exp, dev)
    assert {exp: whole.owner(exp) for exp in first} == first
    cut = min(cut, len(records))
    part = fold(records[:cut])
    for offset, (exp, dev) in enumerate(records[cut:], start=cut):
        part.apply(offset, exp.encode(), dev.encode())
    assert {exp: part.owner(exp) for exp in first} == first


@dataclass
class ClaimedStore(MemoryStore):
    """One worker's store whose owner index has not heard of the other worker's plans yet (the
    global table's lag), with the claims log every worker reads."""

    claims: ClaimLog = field(default_factory=ClaimLog)

    def owner_of(self, experience_id: str) -> str | None:
        return self.claims.owner(experience_id) or super().owner_of(experience_id)


def test_the_core_refuses_a_plan_whose_experience_the_log_gives_to_another_device() -> None:
    """Two workers, each with its own owner index (neither has the other's plan yet), one claims
    log: A claimed first, so B's plan is a ``cross_device`` dead letter and changes nothing."""
    log = fold([("exp_guardian_001", "airbot-000A"), ("exp_guardian_001", "airbot-000B")])
    a = Script(device_id="airbot-000A")
    a.start(experience_id="exp_guardian_001")
    b = Script(device_id="airbot-000B", t=T0 + 100)
    b.start(experience_id="exp_guardian_001")
    proc = processor()
    worker_a, worker_b = ClaimedStore(claims=log), ClaimedStore(claims=log)
    outs_a = feed(proc, worker_a, a.records)
    outs_b = feed(proc, worker_b, b.records)
    assert [o.value["stage"] for o in outs_a if o.kind == "timeline"] == ["goal"]
    assert [(o.kind, o.value["reason_code"], o.value["key"]) for o in outs_b] == [
        ("deadletter", "cross_device", "airbot-000B")
    ]
    assert worker_b.experiences.get("airbot-000B") is None
    assert worker_b.owners == {}  # nothing claimed in B's index either


async def test_two_devices_claiming_at_once_get_one_owner_and_the_owner_never_claims_twice() -> None:
    reader = ClaimsReader("unused:9", "p.claims")
    log = FakeLog(reader)
    owners = await asyncio.gather(reader.settle(log, "exp-1", "dev-a"), reader.settle(log, "exp-1", "dev-b"))
    assert owners == ["dev-a", "dev-a"]  # dev-a's claim is first in the log
    assert [v for _, v in log.records] == [b"dev-a", b"dev-b"]
    # settled: the same plan read again (after a crash, or a duplicate) claims nothing more
    assert await reader.settle(log, "exp-1", "dev-a") == "dev-a"
    assert await reader.settle(log, "exp-1", "dev-b") == "dev-a"
    assert len(log.records) == 2
    assert reader.round_trips.claimed == 2


async def test_a_claim_not_read_back_in_time_is_a_named_timeout() -> None:
    reader = ClaimsReader("unused:9", "p.claims", timeout_s=0.05)
    log = FakeLog(reader, deliver=False)
    with pytest.raises(ClaimTimeout, match=r"exp-9.*dev-a.*p\.claims"):
        await reader.settle(log, "exp-9", "dev-a")


async def test_the_reader_is_not_caught_up_until_it_read_to_the_end_it_found() -> None:
    reader = ClaimsReader("unused:9", "p.claims")
    assert reader.missing() == ["the claims topic p.claims is not open yet"]
    reader.start_end = 2
    reader.claims.apply(0, b"exp-1", b"dev-a")
    assert reader.missing() == ["the claims topic p.claims is not read to its end yet (1 record(s) left)"]
    waiting = asyncio.ensure_future(reader.wait_caught_up())
    await asyncio.sleep(0)
    assert not waiting.done()
    reader.claims.apply(1, b"exp-2", b"dev-b")
    reader._progress()
    await asyncio.wait_for(waiting, 1)
    assert reader.missing() == []


async def test_a_requested_claim_settles_once_read_back_and_is_asked_only_once() -> None:
    reader = ClaimsReader("unused:9", "p.claims")
    reader.start_end = 0  # an empty log, read
    log = FakeLog(reader)
    reader.request(lambda: log, "exp-1", "dev-a")
    reader.request(lambda: log, "exp-1", "dev-a")  # the same plan again (a re-read): no second claim
    assert not reader.settled("exp-1")
    await asyncio.wait_for(asyncio.gather(*reader.under_way.tasks), 1)
    assert reader.settled("exp-1") and reader.claims.owner("exp-1") == "dev-a"
    assert log.records == [(b"exp-1", b"dev-a")]
    assert reader.under_way.pending == {}
    reader.request(lambda: log, "exp-1", "dev-b")  # settled: another device's plan claims nothing
    assert log.records == [(b"exp-1", b"dev-a")] and not reader.under_way.tasks


async def test_a_claim_the_topic_does_not_answer_is_said_once_and_named_by_readiness(
    caplog: pytest.LogCaptureFixture,
) -> None:
    reader = ClaimsReader("unused:9", "p.claims", timeout_s=0.05, retry_s=0.01)
    reader.start_end = 0
    log = FakeLog(reader, deliver=False)
    reader.request(lambda: log, "exp-9", "dev-a")
    await asyncio.sleep(0.3)  # several tries
    assert not reader.settled("exp-9")
    errors = [r for r in caplog.records if r.levelname == "ERROR"]
    assert len(errors) == 1 and "exp-9" in errors[0].getMessage() and "p.claims" in errors[0].getMessage()
    (why,) = reader.missing()
    assert "exp-9" in why and "dev-a" in why and "p.claims" in why and "does not answer" in why
    log.deliver = True  # the topic answers again
    await asyncio.wait_for(asyncio.gather(*reader.under_way.tasks), 2)
    assert reader.claims.owner("exp-9") == "dev-a" and reader.missing() == []


def test_the_claims_topic_has_one_partition_whatever_the_others_have() -> None:
    from streams.admin import PartitionMismatch, _check_counts, topic_partitions
    from topics.names import TopicNames

    names = TopicNames("p.")
    counts = topic_partitions(names, 1)
    assert counts[names.claims] == 1 and counts[names.plans] == 1
    with pytest.raises(PartitionMismatch, match=r"p\.plans exists with 4 partitions, but 1 are wanted"):
        _check_counts({names.plans: 4}, counts)
    counts = topic_partitions(names, 8)
    assert counts[names.claims] == 1 and counts[names.plans] == 8
    with pytest.raises(PartitionMismatch, match=r"p\.claims \(the experience claims\).*must have 1"):
        _check_counts({names.claims: 8}, counts)

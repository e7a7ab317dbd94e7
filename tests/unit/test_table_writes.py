"""Batched table writes (``tables.store.writes``) and the store over them (``tables.store.faust_tables``).

Real RocksDB databases (rocksdict) stand in for faust's per-partition stores; a recording producer
stands in for aiokafka's (the live path is covered on a real broker in tests/integration)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner
from aiokafka.producer.message_accumulator import BatchBuilder
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.memory_records import MemoryRecords
from rocksdict import Options, Rdict

from streams.seam.table_writes import RocksStores, changelog_batches
from tables.state import DeviceState, ExperienceState
from tables.store.faust_tables import DeviceEntry, FaustStore, GuardianTables, is_entry_key, plan_key
from tables.store.writes import PendingWrites
from topics.envelope import Coords, Out


class FakeStore:
    """What PendingWrites and FaustStore use of faust's RocksDB store: per-partition databases."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._dbs: dict[int, Rdict] = {}
        self.persisted: dict[tuple[str, int], int] = {}

    def _db_for_partition(self, partition: int) -> Rdict:
        if partition not in self._dbs:
            self._dbs[partition] = Rdict(str(self.root / f"p{partition}"), Options(raw_mode=True))
        return self._dbs[partition]

    def set_persisted_offset(self, tp: Any, offset: int) -> None:
        self.persisted[(tp.topic, tp.partition)] = offset

    def close(self) -> None:
        for db in self._dbs.values():
            db.close()


@dataclass
class FakeTopic:
    name: str

    def get_topic_name(self) -> str:
        return self.name


@dataclass
class FakeTable:
    data: FakeStore
    changelog_topic: FakeTopic

    def __setitem__(self, key: bytes, value: bytes) -> None:
        # faust's own write path (the global owners index): the current event's partition
        self.data._db_for_partition(0)[key] = value


@dataclass
class Meta:
    offset: int


class Builder:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.records: list[tuple[bytes, bytes | None]] = []

    closed = False

    def close(self) -> None:
        self.closed = True

    def append(self, *, timestamp: int | None, key: bytes, value: bytes | None) -> object | None:
        assert not self.closed
        if len(self.records) >= self.capacity:
            return None
        self.records.append((key, value))
        return object()


@dataclass
class RecordingProducer:
    """Records every batch; offsets per topic-partition count up from 0."""

    capacity: int = 1000
    partitions: int = 4
    batches: list[tuple[str, int, list[tuple[bytes, bytes | None]]]] = field(default_factory=list)
    next_offset: dict[tuple[str, int], int] = field(default_factory=dict)
    fail: bool = False

    def create_batch(self) -> Builder:
        return Builder(self.capacity)

    async def send_batch(self, builder: Builder, topic: str, *, partition: int) -> asyncio.Future[Meta]:
        fut: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        assert builder.closed, "a batch is handed over complete"
        self.batches.append((topic, partition, list(builder.records)))
        base = self.next_offset.get((topic, partition), 0)
        self.next_offset[(topic, partition)] = base + len(builder.records)
        if self.fail:
            fut.set_exception(RuntimeError("broker gone"))
        else:
            fut.set_result(Meta(base))
        return fut

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))


@dataclass
class WireProducer:
    """Keeps each batch as the bytes aiokafka would put on the wire (its own builders)."""

    partitions: int = 4
    wire: list[tuple[str, int, bytes]] = field(default_factory=list)

    def create_batch(self) -> BatchBuilder:
        return BatchBuilder(256 * 1024, 0, is_transactional=False)

    async def send_batch(self, builder: BatchBuilder, topic: str, *, partition: int) -> asyncio.Future[Meta]:
        self.wire.append((topic, partition, bytes(builder._build())))
        fut: asyncio.Future[Meta] = asyncio.get_running_loop().create_future()
        fut.set_result(Meta(0))
        return fut

    async def partitions_for(self, topic: str) -> set[int]:
        return set(range(self.partitions))


def decoded(buffer: bytes) -> tuple[int, list[tuple[bytes | None, bytes | None]]]:
    """(compression codec, [(key, value)]) of one record batch on the wire."""
    batch = MemoryRecords(buffer).next_batch()
    assert batch is not None
    return batch.compression_type, [(r.key, r.value) for r in batch]


@pytest.fixture
def tables(tmp_path: Path) -> Any:
    made = {
        name: FakeTable(FakeStore(tmp_path / name), FakeTopic(f"app-{name}-changelog"))
        for name in ("devices", "seen", "owners")
    }
    yield made
    for table in made.values():
        table.data.close()


def run(coro: Any) -> Any:
    return asyncio.run(coro)


def test_reads_see_pending_writes_and_the_last_value_of_a_key_wins(tables: Any) -> None:
    writes = PendingWrites({"devices": tables["devices"], "seen": tables["seen"]}, RocksStores())
    writes.put("seen", 2, b"k", b"first")
    writes.put("seen", 2, b"k", b"second")
    assert writes.get("seen", 2, b"k") == b"second"
    assert writes.get("seen", 1, b"k") is None  # another partition
    assert writes.find("seen", b"k") == b"second"
    producer = RecordingProducer()
    futures = run(writes.flush(producer))
    assert len(futures) == 1
    assert producer.batches == [("app-seen-changelog", 2, [(b"k", b"second")])]
    assert writes.get("seen", 2, b"k") == b"second"  # now from RocksDB
    assert bytes(tables["seen"].data._db_for_partition(2)[b"k"]) == b"second"
    assert len(writes) == 0


def test_the_changelog_goes_out_zstd_compressed_and_the_outputs_uncompressed(tables: Any) -> None:
    writes = PendingWrites(
        {"devices": tables["devices"], "seen": tables["seen"]}, RocksStores(), changelog_batches(256 * 1024)
    )
    entries = [(f"dev-{i:04d}".encode(), orjson.dumps({"d": {"device_id": f"dev-{i:04d}", "seq": i}}))
               for i in range(300)]  # fmt: skip
    for key, value in entries:
        writes.put("devices", 1, key, value)
    writes.put("devices", 1, b"gone", None)
    writes.send("guardian.timeline", b"dev-0001", b'{"stage": "goal"}')
    producer = WireProducer()
    run(writes.flush(producer))
    by_topic = {topic: (partition, buffer) for topic, partition, buffer in producer.wire}
    partition, changelog = by_topic["app-devices-changelog"]
    codec, records = decoded(changelog)
    assert partition == 1 and codec == DefaultRecordBatch.CODEC_ZSTD
    assert records == [*entries, (b"gone", None)]  # faust's recovery reads them back as written
    assert len(changelog) * 5 < sum(len(k) + len(v) for k, v in entries)
    codec, records = decoded(by_topic["guardian.timeline"][1])
    assert codec == 0 and records == [(b"dev-0001", b'{"stage": "goal"}')]


def test_a_delete_is_a_tombstone_in_the_changelog_and_gone_from_rocksdb(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())
    writes.put("seen", 0, b"old", b"1")
    producer = RecordingProducer()
    run(writes.flush(producer))
    writes.put("seen", 0, b"old", None)
    assert writes.get("seen", 0, b"old") is None
    run(writes.flush(producer))
    assert producer.batches[-1] == ("app-seen-changelog", 0, [(b"old", None)])
    assert tables["seen"].data._db_for_partition(0).get(b"old") is None


def test_a_delivered_changelog_batch_advances_the_persisted_offset(tables: Any) -> None:
    writes = PendingWrites({"devices": tables["devices"]}, RocksStores())
    producer = RecordingProducer()

    async def twice() -> None:
        for round_ in range(2):
            for i in range(3):
                writes.put("devices", 1, f"d{round_}{i}".encode(), b"v")
            await asyncio.gather(*await writes.flush(producer))

    run(twice())
    # offsets 0..2 then 3..5: the last offset of the last batch
    assert tables["devices"].data.persisted == {("app-devices-changelog", 1): 5}


def test_a_failed_batch_does_not_advance_the_persisted_offset(tables: Any) -> None:
    writes = PendingWrites({"devices": tables["devices"]}, RocksStores())
    producer = RecordingProducer(fail=True)
    writes.put("devices", 0, b"d", b"v")

    async def flush() -> list[BaseException | Meta]:
        return list(await asyncio.gather(*await writes.flush(producer), return_exceptions=True))

    (outcome,) = run(flush())
    assert isinstance(outcome, RuntimeError)
    assert tables["devices"].data.persisted == {}


def test_large_batches_are_split_to_the_producers_batch_size(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())
    for i in range(7):
        writes.put("seen", 3, f"k{i}".encode(), b"v")
    producer = RecordingProducer(capacity=3)
    futures = run(writes.flush(producer))
    assert [len(records) for _, _, records in producer.batches] == [3, 3, 1]
    assert len(futures) == 3


def test_outputs_are_partitioned_like_kafkas_default_partitioner(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())
    keys = [f"airbot-{i:04d}".encode() for i in range(40)]
    for key in keys:
        writes.send("g.timeline", key, b"{}")
    producer = RecordingProducer(partitions=4)
    run(writes.flush(producer))
    partitioner = DefaultPartitioner()
    expected: dict[int, list[bytes]] = {}
    for key in keys:
        expected.setdefault(partitioner(key, [0, 1, 2, 3], [0, 1, 2, 3]), []).append(key)
    got = {partition: [k for k, _ in records] for topic, partition, records in producer.batches}
    assert got == expected
    assert len(got) > 1


def test_discard_forgets_what_was_not_flushed(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())
    writes.put("seen", 0, b"k", b"v")
    writes.send("g.timeline", b"k", b"{}")
    writes.discard()
    assert len(writes) == 0
    assert writes.get("seen", 0, b"k") is None


# -- the store ------------------------------------------------------------------------------------


def plan_dict(experience_id: str) -> dict[str, Any]:
    return {"experience_id": experience_id, "steps": [{"step_id": "patrol"}], "goal_summary": "x" * 500}


def store_over(tables: Any) -> FaustStore:
    guardian = GuardianTables(
        devices=tables["devices"], seen=tables["seen"], owners=tables["owners"], access=RocksStores()
    )
    return FaustStore(guardian, PendingWrites(guardian.batched(), guardian.access))


def experience(device_id: str, experience_id: str) -> ExperienceState:
    return ExperienceState(
        experience_id=experience_id,
        device_id=device_id,
        workflow_id="wf",
        plan=plan_dict(experience_id),
    )


def test_the_plan_is_written_once_apart_from_the_entry_and_read_back(tables: Any) -> None:
    store = store_over(tables)
    rec = store.at(1)
    rec.put_device(DeviceState(device_id="dev-1"))
    rec.put_experience(experience("dev-1", "exp-a"))
    rec.commit("dev-1", Coords("plans", 1, 0), [])
    rec.commit("dev-1", Coords("observations", 1, 0), [])
    run(store.writes.flush(RecordingProducer()))
    db = tables["devices"].data._db_for_partition(1)
    entry_raw = bytes(db[b"dev-1"])
    assert b"x" * 500 not in entry_raw  # the plan is not in every write of the entry
    assert orjson.loads(bytes(db[plan_key("exp-a")]))["goal_summary"] == "x" * 500
    store.clear_cache()
    assert rec.get_experience("dev-1") == experience("dev-1", "exp-a")
    assert not is_entry_key(plan_key("exp-a")) and is_entry_key(b"dev-1")
    assert [exp.experience_id for _, exp in store.pending_experiences()] == []


def test_plans_share_their_equal_parts_only_in_the_same_key_order(tables: Any) -> None:
    store = store_over(tables)
    rec = store.at(0)
    policies = {
        "dev-a": {"subscriptions": ["x"], "mode": "semantic"},
        "dev-b": {"subscriptions": ["x"], "mode": "semantic"},
        "dev-c": {"mode": "semantic", "subscriptions": ["x"]},  # the same, keys in another order
    }
    for n, (device, policy) in enumerate(policies.items()):
        exp = experience(device, f"exp-{device}")
        exp.plan["observation_policy"] = dict(policy)
        rec.put_device(DeviceState(device_id=device))
        rec.put_experience(exp)
        rec.commit(device, Coords("plans", 0, n), [])
    kept = {device: rec.get_experience(device) for device in policies}
    plans = {device: exp.plan for device, exp in kept.items() if exp is not None}
    assert plans["dev-a"]["steps"] is plans["dev-b"]["steps"] is plans["dev-c"]["steps"]
    assert plans["dev-a"]["observation_policy"] is plans["dev-b"]["observation_policy"]
    # dev-c keeps its own order: its plan (and what is said from it) never takes dev-a's
    assert list(plans["dev-c"]["observation_policy"]) == ["mode", "subscriptions"]


def test_a_new_experience_replaces_the_old_plan(tables: Any) -> None:
    store = store_over(tables)
    rec = store.at(0)
    rec.put_device(DeviceState(device_id="dev-1"))
    rec.put_experience(experience("dev-1", "exp-a"))
    rec.commit("dev-1", Coords("plans", 0, 0), [])
    rec.put_experience(experience("dev-1", "exp-b"))
    rec.commit("dev-1", Coords("plans", 0, 1), [])
    run(store.writes.flush(RecordingProducer()))
    db = tables["devices"].data._db_for_partition(0)
    assert db.get(plan_key("exp-a")) is None
    assert db.get(plan_key("exp-b")) is not None


def test_an_entry_with_the_plan_inline_still_loads(tables: Any) -> None:
    # values written before plans moved to their own key
    exp = experience("dev-1", "exp-a")
    old = orjson.dumps({"d": None, "e": exp.to_obj(), "applied": {}, "log": []})
    loaded = DeviceEntry.from_json(old)
    assert loaded.experience == exp
    assert loaded.plan_stored is None  # so the next commit writes the plan under its key


def test_logged_outputs_of_committed_records_are_dropped(tables: Any) -> None:
    store = store_over(tables)
    committed: dict[str, int] = {}
    store.committed = committed.get
    rec = store.at(0)
    rec.put_device(DeviceState(device_id="dev-1"))
    out = Out("timeline", "dev-1", {"seq": 1})
    rec.commit("dev-1", Coords("observations", 0, 10), [out])
    rec.commit("dev-1", Coords("observations", 0, 11), [out])
    # nothing committed yet: a re-read of either record gets its outputs back
    assert rec.applied_outputs("dev-1", Coords("observations", 0, 10)) == [out]
    committed["observations:0"] = 11  # offset 10 is committed: it is never read again
    rec.commit("dev-1", Coords("observations", 0, 12), [])
    entry = store._entry("dev-1", 0)
    assert [coords for coords, _ in entry.log] == ["observations:0:11"]
    assert rec.applied_outputs("dev-1", Coords("observations", 0, 11)) == [out]


def test_a_write_outside_a_record_is_refused(tables: Any) -> None:
    store = store_over(tables)
    with pytest.raises(RuntimeError, match="outside a record"):
        store.put_seen("dev-1", "e1", 5, Coords("observations", 0, 1))


def test_reads_outside_a_record_look_in_every_partition(tables: Any) -> None:
    store = store_over(tables)
    rec = store.at(3)
    rec.put_device(DeviceState(device_id="dev-3"))
    rec.put_experience(experience("dev-3", "exp-c"))
    rec.commit("dev-3", Coords("plans", 3, 0), [])
    run(store.writes.flush(RecordingProducer()))
    store.clear_cache()
    exp = store.get_experience("dev-3")
    assert exp is not None and exp.plan == plan_dict("exp-c")


def test_a_re_read_record_writes_its_state_again(tables: Any) -> None:
    """After a crash the local RocksDB may hold a value whose changelog message never left: a
    re-read of a record the value already reflects sends the value (and plan) again, identical."""
    store = store_over(tables)
    rec = store.at(2)
    rec.put_device(DeviceState(device_id="dev-2"))
    rec.put_experience(experience("dev-2", "exp-r"))
    rec.commit("dev-2", Coords("observations", 2, 40), [])
    run(store.writes.flush(RecordingProducer()))
    producer = RecordingProducer()
    assert rec.applied_outputs("dev-2", Coords("observations", 2, 40)) == []
    run(store.writes.flush(producer))
    sent = {key for _, _, records in producer.batches for key, _ in records}
    assert sent == {b"dev-2", plan_key("exp-r")}
    # a record the state does not reflect yet writes nothing by itself
    assert rec.applied_outputs("dev-2", Coords("observations", 2, 41)) is None
    assert len(store.writes) == 0


def test_a_re_read_observation_writes_its_dedup_key_again_and_changes_nothing_else(tables: Any) -> None:
    from pipeline.core import Pipeline
    from pipeline.runner import Processor
    from supervisor import rules
    from tests.scenario_scripts import build
    from topics.registry import load_registry

    registry = load_registry()
    processor = Processor(registry, Pipeline(registry, language="en"), rules.decide)
    store = store_over(tables)
    script = build("HG-01", device_id="dev-rr", prefix="g.")

    def process(offset: int, record: Any) -> list[Out]:
        done = processor.process(
            store.at(0),
            record.suffix,
            record.key,
            record.value,
            source_topic=record.topic,
            partition=0,
            offset=offset,
            received_at_ms=record.ts,
        )
        return done.outs

    outputs = [process(offset, record) for offset, record in enumerate(script.records[:6])]
    run(store.writes.flush(RecordingProducer()))
    observed = [
        (offset, r)
        for offset, r in enumerate(script.records[:6])
        if r.suffix in ("observations", "task-events")
    ]
    assert observed
    offset, record = observed[-1]
    event_id = orjson.loads(record.value or b"{}")["event_id"]
    before = store.at(0).get_seen("dev-rr", event_id)
    assert before is not None
    assert process(offset, record) == outputs[offset]  # the very outputs of the first time
    pending = {key for (table, _), kv in store.writes._puts.items() if table == "seen" for key in kv}
    assert pending == {f"dev-rr\x1f{event_id}".encode()}
    assert store.at(0).get_seen("dev-rr", event_id) == before


def test_a_re_read_observation_whose_dedup_key_never_landed_keeps_its_duplicate_a_duplicate(
    tables: Any,
) -> None:
    """A worker stopped between two changelog batches of one flush: its device's state (which
    applied an observation) reached Kafka, the observation's dedup key did not. The next owner
    reads the observation again and gets back its logged outputs; the key is written again, so a
    later copy of the event is still dropped as a duplicate, as it would have been without the
    stop (instead of being taken for new, which renumbers the device's timeline after it)."""
    from pipeline.core import Pipeline
    from pipeline.runner import Processor
    from supervisor import rules
    from tests.scenario_scripts import build
    from topics.registry import load_registry

    registry = load_registry()
    processor = Processor(registry, Pipeline(registry, language="en"), rules.decide)
    store = store_over(tables)
    script = build("HG-01", device_id="dev-dk", prefix="g.")
    records = script.records[:6]

    def process(offset: int, record: Any, received_at_ms: int | None = None) -> list[Out]:
        done = processor.process(
            store.at(0),
            record.suffix,
            record.key,
            record.value,
            source_topic=record.topic,
            partition=0,
            offset=offset,
            received_at_ms=record.ts if received_at_ms is None else received_at_ms,
        )
        return done.outs

    outputs = [process(offset, record) for offset, record in enumerate(records)]
    run(store.writes.flush(RecordingProducer()))
    offset, record = [(o, r) for o, r in enumerate(records) if r.suffix == "observations"][-1]
    event_id = orjson.loads(record.value or b"{}")["event_id"]
    key = f"dev-dk\x1f{event_id}".encode()
    # the new owner's tables: the state's changelog batch landed, the dedup key's did not
    tables["seen"].data._db_for_partition(0).delete(key)
    store.clear_cache()
    assert store.at(0).get_seen("dev-dk", event_id) is None

    assert process(offset, record) == outputs[offset]  # read again: the very outputs of the first time
    again = process(len(records), record, received_at_ms=record.ts + 1)
    drops = [o.value for o in again if o.kind == "timeline" and o.value["stage"] == "drop"]
    assert [(d["drop_reason"], d["ref_id"]) for d in drops] == [("duplicate", event_id)]
    assert not [o for o in again if o.kind in ("decisions", "dispatch")]


def test_logged_outputs_survive_the_stored_value(tables: Any) -> None:
    """A re-read after the state was loaded from RocksDB (another worker, a restart) gets back the
    very outputs logged before."""
    store = store_over(tables)
    rec = store.at(0)
    rec.put_device(DeviceState(device_id="dev-1"))
    outs = [
        Out("timeline", "dev-1", {"seq": 1, "summary": "안방 순찰"}),
        Out("decisions", "dev-1", {"n": [1, 2]}),
    ]
    rec.commit("dev-1", Coords("observations", 0, 7), outs)
    run(store.writes.flush(RecordingProducer()))
    store.clear_cache()
    assert rec.applied_outputs("dev-1", Coords("observations", 0, 7)) == outs
    raw = bytes(tables["devices"].data._db_for_partition(0)[b"dev-1"])
    assert orjson.loads(raw)["log"] == [["observations:0:7", [[o.kind, o.key, o.value] for o in outs]]]


class SlowProducer(RecordingProducer):
    """Takes a batch only once the test lets it (as aiokafka waits for a topic-partition's previous
    batch to go out in a request)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = asyncio.Event()

    async def send_batch(self, builder: Builder, topic: str, *, partition: int) -> asyncio.Future[Meta]:
        await self.gate.wait()
        return await super().send_batch(builder, topic, partition=partition)


def test_flushing_behind_does_not_wait_for_the_producer_and_keeps_the_batches_order(tables: Any) -> None:
    writes = PendingWrites({"seen": tables["seen"]}, RocksStores())

    async def main() -> SlowProducer:
        producer = SlowProducer()
        delivered = []
        for i in range(3):
            writes.put("seen", 0, b"k", f"v{i}".encode())
            delivered += await writes.flush_behind(producer)
            # in RocksDB at once (reads see it), though the producer has taken nothing yet
            assert bytes(tables["seen"].data._db_for_partition(0)[b"k"]) == f"v{i}".encode()
        assert producer.batches == [] and not any(d.done() for d in delivered)
        producer.gate.set()
        await asyncio.gather(*delivered)
        return producer

    producer = run(main())
    assert [records for _, _, records in producer.batches] == [
        [(b"k", b"v0")],
        [(b"k", b"v1")],
        [(b"k", b"v2")],
    ]
    assert tables["seen"].data.persisted == {("app-seen-changelog", 0): 2}


def test_the_rescan_goes_through_a_partitions_devices_a_bounded_slice_at_a_time(tables: Any) -> None:
    """After an assignment the confirm timer looks for devices with something falling due; it goes
    through the device table a slice at a time (the event loop has its turns between), and the
    slices together find exactly the due devices, each once, skipping plans and faust's keys."""
    store = store_over(tables)
    rec = store.at(3)
    due = {}
    for i in range(25):
        device_id = f"dev-{i:02d}"
        at = 1_785_400_000_000 + i if i % 3 == 0 else None
        rec.put_device(DeviceState(device_id=device_id, precondition_due_ms=at))
        if at is not None:
            due[device_id] = at
        if i % 5 == 0:
            rec.put_experience(experience(device_id, f"exp-{i}"))  # a plan key among the entries
        rec.commit(device_id, Coords("observations", 3, i), [])
    run(store.writes.flush(RecordingProducer()))
    tables["devices"].data._db_for_partition(3)[b"__faust\x00offset__"] = b"24"
    assert store.device_partitions() == [3]

    found: list[tuple[str, int]] = []
    cursor: bytes | None = None
    slices = 0
    while True:
        part, cursor = store.due_devices_in(3, cursor, 4)
        assert len(part) <= 4
        found += part
        slices += 1
        if cursor is None:
            break
    assert sorted(found) == sorted(due.items())
    assert slices > 25 // 4  # 25 entries, 5 plans and one offset key: at least eight slices


def test_every_prefix_of_a_flushs_devices_changelog_finds_each_entrys_plan(tables: Any) -> None:
    """A partition's changelog records go out in several producer batches when they do not fit one;
    a worker killed between two leaves only the first ones, and the worker recovering the table
    from them must be able to read every device there. A device whose earlier record of the batch
    wrote its entry first, then starts an experience (its plan), then another (the old plan
    deleted): whatever prefix of the records arrived, each entry's plan is in it."""
    store = store_over(tables)
    rec = store.at(2)
    rec.put_device(DeviceState(device_id="dev-1"))
    rec.commit("dev-1", Coords("observations", 2, 0), [])  # its entry is the batch's first key
    rec.put_device(DeviceState(device_id="dev-2"))
    rec.put_experience(experience("dev-2", "exp-old"))
    rec.commit("dev-2", Coords("plans", 2, 0), [])
    first = RecordingProducer()
    run(store.writes.flush(first))  # exp-old is stored, and dev-2's entry naming it
    before: dict[bytes, bytes] = {}
    for topic, _, records in first.batches:
        if topic == "app-devices-changelog":
            before.update((k, v) for k, v in records if v is not None)
    rec.commit("dev-1", Coords("observations", 2, 1), [])
    rec.put_experience(experience("dev-1", "exp-a"))
    rec.commit("dev-1", Coords("plans", 2, 1), [])
    rec.put_experience(experience("dev-2", "exp-new"))  # replaces exp-old's plan
    rec.commit("dev-2", Coords("plans", 2, 2), [])
    producer = RecordingProducer(capacity=1)  # one record per producer batch
    run(store.writes.flush(producer))
    sent = [records[0] for topic, _, records in producer.batches if topic == "app-devices-changelog"]
    assert len(sent) == 5  # two plans, two entries, one plan deleted

    for n in range(len(sent) + 1):
        state = dict(before)
        for key, value in sent[:n]:
            if value is None:
                state.pop(key, None)
            else:
                state[key] = value
        for key, value in state.items():
            if is_entry_key(key):
                DeviceEntry.from_json(value, lambda exp_id, s=state: s.get(plan_key(exp_id)))


def test_what_the_state_cache_keeps_encoded_costs_about_its_length_in_memory(tables: Any) -> None:
    """A device's logged outputs and the shared plans' parts stay in memory as long as the device
    is cached: each costs about its length, not the buffer the encoder wrote it in (4 KiB and
    more per value, which for a fleet's cache was tens of MB)."""
    import tracemalloc

    from tables.state import PlanParts

    store = store_over(tables)
    rec = store.at(0)
    devices = [DeviceState(device_id=f"dev-{i}") for i in range(1000)]
    outs = [[Out("timeline", f"dev-{i}", {"text": "x" * 300, "n": i})] for i in range(1000)]
    coords = [Coords("observations", 0, i) for i in range(1000)]
    for dev in devices:
        rec.put_device(dev)
    plans = [
        {"id": f"exp-{i}", "steps": [{"step_id": f"patrol-{i}", "note": "y" * 300}]} for i in range(1000)
    ]
    parts = PlanParts()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for dev, out, at in zip(devices, outs, coords, strict=True):
            rec.commit(dev.device_id, at, out)
        logged = tracemalloc.get_traced_memory()[0] - before
        before = tracemalloc.get_traced_memory()[0]
        shared = [parts.share(plan) for plan in plans]
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert len(parts.parts) == 1000 and len(shared) == 1000
    # about 330 bytes of JSON each, plus the log's and the pending batch's bookkeeping
    assert logged < 1000 * 1500, logged
    assert kept < 1000 * 1500, kept

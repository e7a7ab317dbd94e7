"""The store's logged outputs: a record read again gets its outputs back and writes its state again."""

# ruff: noqa: F811  (the pytest fixture imported from tests.unit.table_fakes is a test argument)

from __future__ import annotations

from typing import Any

import orjson

from tables.state import DeviceState
from tables.store.faust_tables import plan_key
from tests.unit.table_fakes import (
    RecordingProducer,
    experience,
    run,
    store_over,
    tables,  # noqa: F401  (the fixture)
)
from topics.envelope import Coords, Out


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

"""The store over faust's tables (``tables.store.faust_tables``): device entries and their plans."""

# ruff: noqa: F811  (the pytest fixture imported from tests.unit.table_fakes is a test argument)

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tables.state import DeviceState
from tables.store.faust_tables import DeviceEntry, is_entry_key, plan_key
from tests.unit.table_fakes import (
    RecordingProducer,
    experience,
    plan_dict,
    run,
    store_over,
    tables,  # noqa: F401  (the fixture)
)
from topics.envelope import Coords, Out


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

"""A device's count of pending debounce changes (what makes "anything pending?" and "when is the
device due?" cheap once per observation) always equals the pending changes its states hold: after
every record of every story, after a restore from the stored form, and in the quiet-device
confirmation at the end of a replay."""

from __future__ import annotations

from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from supervisor import rules
from tables.state import DeviceState
from tests.scenario_scripts import SCENARIOS, build
from topics.registry import load_registry

REGISTRY = load_registry()


def recount(dev: DeviceState) -> int:
    return sum(1 for d in dev.debounce.values() if d.pending is not None)


def test_the_count_follows_every_pending_change_of_every_story() -> None:
    proc = Processor(REGISTRY, Pipeline(REGISTRY, language="en"), rules.decide)
    most = 0
    suppressed = 0
    for scenario in SCENARIOS:
        store = MemoryStore()
        for r in build(scenario).records:
            done = proc.process(store, r.suffix, r.key, r.value, r.topic, r.partition, r.offset, r.ts)
            suppressed += sum(1 for o in done.outs if o.value.get("drop_reason") == "debounced")
            for dev in store.devices.values():
                assert dev.pending_changes == recount(dev), (scenario, r)
                assert dev.has_pending() == (recount(dev) > 0)
                most = max(most, dev.pending_changes)
                # the stored form carries no count: a restored device counts its own
                restored = DeviceState.from_json(dev.to_json())
                assert restored.pending_changes == dev.pending_changes
                assert restored.next_due_ms() == dev.next_due_ms()
        for device_id in list(store.devices):
            proc.confirm_quiet(store, device_id, None)  # the end of a replay's input
            dev = store.devices[device_id]
            assert dev.pending_changes == recount(dev) == 0, scenario
            assert dev.next_due_ms() == dev.precondition_due_ms
    # the stories did hold changes pending and did revert one within its window
    assert most >= 1
    assert suppressed >= 1


def test_a_pending_change_of_an_area_a_new_plan_drops_leaves_the_count() -> None:
    from types import SimpleNamespace
    from typing import Any

    from pipeline import debounce
    from tables.state import DebounceState, Trigger

    def change(area: str) -> DebounceState:
        trigger = Trigger(f"obs_{area}", "security.person_detected", 1, 1, {"area_id": area}, None, False)
        return DebounceState(stable="absent", pending=trigger, pending_value="present", window_ms=3000)

    dev = DeviceState(
        device_id="airbot-0001",
        debounce={
            "security.person_detected/2": change("2"),
            "security.person_detected/9": change("9"),
            "security.person_detected/7": DebounceState(stable="absent"),
        },
    )
    assert dev.pending_changes == 2
    new_plan: Any = SimpleNamespace(plan_areas=["2", "3"])
    debounce.prune(REGISTRY, dev, new_plan)
    assert list(dev.debounce) == ["security.person_detected/2"]
    assert dev.pending_changes == recount(dev) == 1
    assert dev.next_due_ms() == 1 + 3000

"""The registries as data: packaged contents and errors that name the broken entry."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from topics.registry import Registry, RegistryError, load_registry


def _packaged(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(resources.files("topics.registry").joinpath(name).read_text("utf-8"))
    return data


@pytest.fixture
def registry() -> Registry:
    return load_registry()


def test_contracts_match_section_4_1(registry: Registry) -> None:
    c = registry.contracts
    assert set(c) == {
        "network.aws_iot_session_changed",
        "voice_llm.pipeline_state_changed",
        "security.person_detected",
        "security.verification_started",
        "security.verification_result",
        "security.verification_timed_out",
        "security.session_state_changed",
        "vision.low_light_changed",
        "security.condition_changed",
        "user.cancel_requested",
    }
    pd = c["security.person_detected"]
    assert set(pd.facts) == {"area_id", "presence", "verification_state", "light"}
    assert pd.facts["presence"].allows("detected") and not pd.facts["presence"].allows("maybe")
    assert pd.required == (("area_id",), ("presence",))
    assert (pd.scope, pd.default_ttl_ms, pd.debounce_ms) == ("scoped", 2000, 1000)
    assert pd.debounce is not None
    assert (pd.debounce.fact, pd.debounce.resting, pd.debounce.alert, pd.debounce.per_fact) == (
        "presence", "absent", "detected", "area_id",
    )  # fmt: skip
    net = c["network.aws_iot_session_changed"]
    assert net.scope == "unscoped" and net.debounce is not None and net.debounce.resting is None
    low = c["vision.low_light_changed"]
    assert low.debounce is not None and (low.debounce.resting, low.debounce.alert) == (False, True)
    assert c["security.condition_changed"].required == (("battery", "network", "low_light"),)
    assert c["user.cancel_requested"].scope == "device"
    assert c["user.cancel_requested"].default_ttl_ms == 30000
    vr = c["security.verification_result"].facts["attempt"]
    assert vr.allows(1) and vr.allows(10) and not vr.allows(11) and not vr.allows(0) and not vr.allows(True)
    assert registry.max_ttl_ms == 30000
    debounced = {cid for cid, spec in c.items() if spec.debounce_ms > 0}
    assert debounced == {
        "network.aws_iot_session_changed",
        "security.person_detected",
        "vision.low_light_changed",
    }


def test_fact_spec_rejects_long_strings_and_wrong_types(registry: Registry) -> None:
    area = registry.contracts["security.person_detected"].facts["area_id"]
    assert area.allows("2") and area.allows("a" * 64)
    assert not area.allows("a" * 65) and not area.allows(2) and not area.allows(None)
    low = registry.contracts["vision.low_light_changed"].facts["low_light"]
    assert low.allows(True) and not low.allows(1) and not low.allows("true")


def test_effective_ttl(registry: Registry) -> None:
    spec = registry.contracts["security.person_detected"]
    assert spec.effective_ttl_ms(None) == 2000
    assert spec.effective_ttl_ms(500) == 500
    assert spec.effective_ttl_ms(9000) == 2000


def test_capabilities_match_section_11(registry: Registry) -> None:
    caps = registry.capabilities
    assert set(caps) == {
        "security_patrol",
        "movement",
        "voice_content",
        "air_cleaning",
        "vital_sign_session",
        "live_view",
        "device_context",
    }
    assert caps["device_context"].operations == {"refresh": ()}
    assert caps["device_context"].exposure == "GO"
    sp = caps["security_patrol"]
    assert sp.operations["start"] == ("area_ids",)
    assert set(sp.operations) == {"check", "start", "patrol", "pause", "resume", "stop"}
    assert sp.compensation == {"start": "stop"}
    assert sp.evidence["stop"] == ("security.stopped",)
    assert set(sp.resources) == {"camera", "vision", "motion"}
    assert caps["movement"].operations["move_to_room"] == ("area_id",)
    assert caps["movement"].evidence["return_to_station"] == ("movement.station_charging",)
    assert caps["voice_content"].operations["speak"] == ("text",)
    assert caps["air_cleaning"].compensation == {"start_room_cleaning": "stop"}
    assert caps["vital_sign_session"].exposure == "GO_USER_CHECKPOINT"
    assert caps["vital_sign_session"].evidence == {}
    assert caps["live_view"].exposure == "NO_GO"
    assert "camera" in registry.plan_exclusive_resources
    assert caps["security_patrol"].operations["start"] == ("area_ids",)
    assert "fly" not in caps["security_patrol"].operations
    # §11: context_reads per capability and requires per operation
    assert caps["security_patrol"].context_reads == ("security", "battery", "network", "vision", "map")
    assert caps["movement"].context_reads == ("movement", "map", "battery")
    assert caps["air_cleaning"].context_reads == ("air_quality", "battery", "map")
    assert caps["vital_sign_session"].context_reads == ("vital_sign", "resource")
    assert caps["live_view"].context_reads == () and caps["live_view"].requires == {}
    assert caps["security_patrol"].requires["start"] == {
        "path": "battery.estimated_work_budget", "op": "not_equals", "value": "low"
    }  # fmt: skip
    move = caps["movement"].requires["move_to_room"]
    assert {"path": "map.areas", "op": "contains", "value": "$args.area_id"} in move["all"]
    assert caps["air_cleaning"].requires["start_room_cleaning"]["value"] == ["medium", "high"]
    assert caps["vital_sign_session"].requires["start"]["path"] == "resource.thermal"
    assert "return_to_station" not in caps["movement"].requires


def _write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), "utf-8")
    return path


Mutation = Callable[[dict[str, Any]], None]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["contracts"]["security.person_detected"]["facts"]["presence"].update(enum=[]),
            "contracts.json: security.person_detected.facts.presence: enum must be a non-empty list",
        ),
        (
            lambda d: d["contracts"]["security.person_detected"]["facts"]["presence"].update(type="float"),
            "contracts.json: security.person_detected.facts.presence.type: must be one of",
        ),
        (
            lambda d: d["contracts"]["vision.low_light_changed"].update(required=["dark"]),
            "contracts.json: vision.low_light_changed.required.0: names 'dark'",
        ),
        (
            lambda d: d["contracts"]["vision.low_light_changed"]["debounce"].update(alert="yes"),
            "contracts.json: vision.low_light_changed.debounce.alert: not a valid value",
        ),
        (
            lambda d: d["contracts"]["vision.low_light_changed"].update(debounce=None),
            "contracts.json: vision.low_light_changed.debounce: a contract with debounce_ms > 0",
        ),
        (
            lambda d: d["contracts"]["user.cancel_requested"].update(scope="global"),
            "contracts.json: user.cancel_requested.scope: must be one of",
        ),
        (
            lambda d: d["contracts"]["user.cancel_requested"].update(default_ttl_ms=-1),
            "contracts.json: user.cancel_requested.default_ttl_ms: must be a non-negative integer",
        ),
        (
            lambda d: d["contracts"]["user.cancel_requested"].update(colour="red"),
            "contracts.json: user.cancel_requested: unknown field 'colour'",
        ),
        (
            lambda d: d["contracts"]["security.verification_result"]["facts"]["attempt"].update(min=5, max=2),
            "contracts.json: security.verification_result.facts.attempt: min is greater than max",
        ),
    ],
)
def test_broken_contracts_file_names_the_entry(tmp_path: Path, mutate: Mutation, message: str) -> None:
    data = copy.deepcopy(_packaged("contracts.json"))
    mutate(data)
    path = _write(tmp_path, "contracts.json", data)
    with pytest.raises(RegistryError) as info:
        load_registry(contracts_path=path)
    assert str(info.value).startswith(message)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (
            lambda d: d["capabilities"]["security_patrol"]["compensation"].update(start="explode"),
            "capabilities.json: security_patrol.compensation.start: must name an operation",
        ),
        (
            lambda d: d["capabilities"]["live_view"].update(exposure="MAYBE"),
            "capabilities.json: live_view.exposure: must be one of",
        ),
        (
            lambda d: d["capabilities"]["movement"]["operations"].update(move_to_room=["where"]),
            "capabilities.json: movement.operations.move_to_room: argument 'where' has no entry",
        ),
        (
            lambda d: d["capabilities"]["movement"]["evidence"].update(fly=["x"]),
            "capabilities.json: movement.evidence.fly: is not an operation",
        ),
        (
            lambda d: d.update(plan_exclusive_resources=["laser"]),
            "capabilities.json: plan_exclusive_resources: 'laser' is not a resource",
        ),
        (
            lambda d: d["capabilities"]["movement"].update(context_reads=["weather"]),
            "capabilities.json: movement.context_reads: 'weather' is not a device-context domain",
        ),
        (
            lambda d: d["capabilities"]["air_cleaning"]["requires"].update(
                start_room_cleaning={"path": "battery.estimated_work_budget", "op": "roughly", "value": "low"}
            ),
            "capabilities.json: air_cleaning.requires.start_room_cleaning: condition.op: unknown operator",
        ),
        (
            lambda d: d["capabilities"]["air_cleaning"]["requires"].update(
                start_room_cleaning={"path": "battery.mood", "op": "equals", "value": "low"}
            ),
            "capabilities.json: air_cleaning.requires.start_room_cleaning: condition.path: unknown path",
        ),
        (
            lambda d: d["capabilities"]["air_cleaning"]["requires"].update(
                start_room_cleaning={"path": "map.areas", "op": "contains", "value": "$args.room"}
            ),
            "capabilities.json: air_cleaning.requires.start_room_cleaning: condition.value: '$args.room'",
        ),
        (
            lambda d: d["capabilities"]["movement"]["requires"].update(
                return_to_station={"path": "battery.charging", "op": "is_false"}
            ),
            "capabilities.json: movement.requires.return_to_station: a safety action",
        ),
        (
            lambda d: d["capabilities"]["security_patrol"]["requires"].update(
                stop={"path": "battery.charging", "op": "is_false"}
            ),
            "capabilities.json: security_patrol.requires.stop: a safety action",
        ),
    ],
)
def test_broken_capabilities_file_names_the_entry(tmp_path: Path, mutate: Mutation, message: str) -> None:
    data = copy.deepcopy(_packaged("capabilities.json"))
    mutate(data)
    path = _write(tmp_path, "capabilities.json", data)
    with pytest.raises(RegistryError) as info:
        load_registry(capabilities_path=path)
    assert str(info.value).startswith(message)


def test_unreadable_and_non_json_files(tmp_path: Path) -> None:
    with pytest.raises(RegistryError, match=r"^missing\.json: cannot read"):
        load_registry(contracts_path=tmp_path / "missing.json")
    bad = tmp_path / "contracts.json"
    bad.write_text("{not json", "utf-8")
    with pytest.raises(RegistryError, match=r"^contracts\.json: not valid JSON"):
        load_registry(contracts_path=bad)
    arr = _write(tmp_path, "caps.json", [1, 2])
    with pytest.raises(RegistryError, match=r"^caps\.json: the top level must be a JSON object"):
        load_registry(capabilities_path=arr)


def test_explicit_paths_load_like_the_packaged_files(tmp_path: Path) -> None:
    c = _write(tmp_path, "c.json", _packaged("contracts.json"))
    k = _write(tmp_path, "k.json", _packaged("capabilities.json"))
    loaded = load_registry(c, k)
    assert loaded.contracts.keys() == load_registry().contracts.keys()
    assert loaded.capabilities["security_patrol"].resources == ("camera", "vision", "motion")


def test_the_worker_refuses_to_start_naming_a_bad_requires(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    data = copy.deepcopy(_packaged("capabilities.json"))
    data["capabilities"]["air_cleaning"]["requires"]["start_room_cleaning"] = {
        "path": "air_quality.grade",
        "op": "roughly",
        "value": "bad",
    }
    path = _write(tmp_path, "capabilities.json", data)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GUARDIAN_")}
    env |= {"GUARDIAN_CAPABILITIES_FILE": str(path), "GUARDIAN_KAFKA_BOOTSTRAP": "127.0.0.1:9"}
    done = subprocess.run(
        [sys.executable, "-m", "guardian", "worker"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "air_cleaning.requires.start_room_cleaning: condition.op: unknown operator" in done.stderr

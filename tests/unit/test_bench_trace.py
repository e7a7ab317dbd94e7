"""The bench's diagnostics: where a slow probe's time went, and what makes two runs' outputs equal."""

from __future__ import annotations

from pathlib import Path

import orjson

from bench import latency_trace
from bench.profile import top
from bench.scaleout import identity


def test_a_slow_probe_is_split_into_its_stages_with_the_pauses_during_it(tmp_path: Path) -> None:
    trace = tmp_path / "trace.jsonl"
    entries = [
        {"kind": "dispatch", "trigger": "obs_1", "recv": 10.010, "pushed": 10.011, "handled": 10.012,
         "flush": 10.020, "sent": 10.021, "acked": 10.030, "batch": 5},
        {"kind": "dispatch", "trigger": "obs_2", "recv": 20.300, "pushed": 20.301, "handled": 20.302,
         "flush": 20.303, "sent": 20.304, "acked": 20.310, "batch": 900},
        {"kind": "gc", "at": 20.100, "s": 0.150, "generation": 2},
        {"kind": "lag", "at": 20.050, "s": 0.200},
        {"kind": "lag", "at": 50.0, "s": 0.5},
    ]  # fmt: skip
    trace.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in entries) + b'{"kind": "disp')
    sent = {"obs_1": 10.000, "obs_2": 20.000, "obs_lost": 30.0}
    arrived = {"obs_1": 10.035, "obs_2": 20.320}
    produced = {"obs_2": 20.250}  # obs_1's acknowledgement unknown
    result = latency_trace.slowest(sent, arrived, trace, produced_at=produced)
    assert result["traced"] == 2
    slow = result["slowest"][0]
    assert slow["probe"] == "obs_2" and slow["ms"] == 320.0
    assert (slow["produce"], slow["fetch"], slow["deliver"], slow["read"]) == (250.0, 50.0, 6.0, 10.0)
    assert (result["slowest"][1]["produce"], result["slowest"][1]["fetch"]) == (0.0, 10.0)
    assert slow["pauses"] == [
        "1 gen2 GC (sum 150 ms, longest 150 ms)",
        "1 loop stall (sum 200 ms, longest 200 ms)",
    ]
    assert result["slowest"][1]["pauses"] == []
    assert result["gc_pause_max_ms"] == 150.0 and result["loop_stalls"] == 2
    assert any("obs_2" not in line and "320.0 ms" in line for line in latency_trace.describe(result))


def test_outputs_are_compared_by_identity_not_by_the_topic_prefix() -> None:
    dl = {"source_topic": "a.observations", "partition": 1, "offset": 7, "reason_code": "not_json"}
    assert identity("deadletter", dl, "a.") == identity(
        "deadletter", {**dl, "source_topic": "b.observations"}, "b."
    )
    assert identity("dispatch", {"dispatch_id": "dsp_1"}, "a.") != identity(
        "dispatch", {"dispatch_id": "dsp_2"}, "a."
    )
    t = {"device_id": "d", "experience_id": "e", "seq": 3, "stage": "act", "ref_id": "dsp_1", "at_ms": 1}
    assert identity("timeline", t, "a.") == identity("timeline", {**t, "at_ms": 2}, "a.")


def test_the_profile_leaves_idle_samples_out_and_ranks_own_and_inclusive_time() -> None:
    lines = [
        "main (guardian/cli.py:1);run (asyncio/base_events.py:600);select (selectors.py:468) 50",
        "main (guardian/cli.py:1);handle (streams/agents.py:10);loads (topics/gate.py:5) 30",
        "main (guardian/cli.py:1);handle (streams/agents.py:12) 10",
    ]
    result = top(lines)
    assert (result["busy_samples"], result["idle_samples"]) == (40, 50)
    assert result["self"][0] == ("loads (topics/gate.py)", 0.75)
    assert ("handle (streams/agents.py)", 1.0) in result["total"]


def test_a_long_event_loop_stall_is_sampled_and_named_by_what_the_loop_ran(tmp_path: Path) -> None:
    import asyncio
    import time

    from streams.latency_trace import LatencyTrace

    def blocking_sweep() -> None:
        # a callback that keeps the event loop working for a long time
        end = time.monotonic() + 0.3
        while time.monotonic() < end:
            pass

    async def main(trace: LatencyTrace) -> None:
        trace.start()
        await asyncio.sleep(0.05)
        asyncio.get_running_loop().call_soon(blocking_sweep)
        await asyncio.sleep(0.1)

    path = tmp_path / "trace.jsonl"
    trace = LatencyTrace(str(path))
    try:
        asyncio.run(main(trace))
    finally:
        trace.close()
    _, pauses = latency_trace.load(path)
    sampled = [p for p in pauses if p["kind"] == "lag" and p.get("stacks")]
    assert sampled, pauses
    assert any("blocking_sweep" in frame for p in sampled for stack in p["stacks"] for frame in stack)
    causes = latency_trace.stall_causes(pauses)
    assert causes[0]["cause"].startswith("blocking_sweep")
    assert causes[0]["stalls"] == 1


def test_stalls_are_counted_by_cause_with_the_project_frame_under_the_callback() -> None:
    loop_frames = ["asyncio/base_events.py:1 run_forever", "asyncio/events.py:80 _run"]
    sweep = [*loop_frames, "streams/agents.py:700 loop", "streams/agents.py:600 sweep", "rocksdict:1 items"]
    idle = [*loop_frames[:1], "selectors.py:468 select"]
    pauses = [
        {"kind": "lag", "at": 1.0, "s": 0.2, "stacks": [sweep, sweep, idle]},
        {"kind": "lag", "at": 2.0, "s": 0.1, "stacks": [idle]},
        {"kind": "lag", "at": 3.0, "s": 0.06},
        {"kind": "lag", "at": 3.5, "s": 0.08, "cpu": 0.01, "stacks": [sweep]},  # the loop hardly ran
        {"kind": "lag", "at": 4.0, "s": 0.01, "stacks": [sweep]},  # short: not counted
        {"kind": "gc", "at": 5.0, "s": 0.3, "generation": 2},
    ]
    causes = latency_trace.stall_causes(pauses)
    assert causes == [
        {"cause": "loop (streams/agents.py) > sweep (streams/agents.py)", "stalls": 2, "sum_ms": 280.0,
         "max_ms": 200.0, "cpu_ms": 10.0},
        {"cause": "waiting in select (not scheduled)", "stalls": 1, "sum_ms": 100.0, "max_ms": 100.0},
        {"cause": "not sampled", "stalls": 1, "sum_ms": 60.0, "max_ms": 60.0},
    ]  # fmt: skip

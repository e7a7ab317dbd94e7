"""Metrics count a batch once delivered (never when dropped) and a bad control record, which is told."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from streams.memory_broker import MemoryProducer
from streams.metrics import GuardianMetrics
from tests.unit.shell_fakes import Acked, handed_over, shell_over
from topics.envelope import Out


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b'{"op": "explode"}', "unknown op 'explode'"),
        (b'{"op": "verdict", "device_id": "d"}', "op 'verdict' without a usable"),
    ],
)
def test_a_bad_control_record_is_logged_and_counted(
    tmp_path: Path, raw: bytes, said: str, caplog: pytest.LogCaptureFixture
) -> None:
    from topics.envelope import Coords

    shell, _ = shell_over(tmp_path, MemoryProducer(hold=True))
    shell.reports.metrics = GuardianMetrics()
    shell.control(raw, Coords("control", 2, 17), 1_000)
    assert said in caplog.text and "control:2:17" in caplog.text.replace(" ", "")
    assert shell.reports.metrics.irregular.control_rejected._value.get() == 1


def scrape(metrics: GuardianMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client import generate_latest

    found: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for family in text_string_to_metric_families(generate_latest(metrics.registry).decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_a_batch_is_counted_once_delivered_and_never_when_dropped(tmp_path: Path) -> None:
    async def main() -> GuardianMetrics:
        producer = MemoryProducer(hold=True)
        shell, _ = shell_over(tmp_path, producer, Acked())
        shell.reports.metrics = shell.batch.delivery.metrics = metrics = GuardianMetrics()
        # a batch dropped by a rebalance is read again: not counted
        shell.batch.tally.inputs["observations"] += 1
        shell.emit([Out("deadletter", "d", {"reason_code": "not_json"})])
        shell.drop_unflushed()
        shell.batch.tally.inputs["observations"] += 2
        shell.emit(
            [
                Out("timeline", "d", {"stage": "drop", "drop_reason": "duplicate"}),
                Out("decisions", "d", {"decision": "return_to_station", "backend": "rules"}),
                Out("dispatch", "d", {"dispatch_id": "x"}),
            ],
            int(time.time() * 1000) - 50,
        )
        shell.batch.unacked = ["m1", "m2"]
        await shell.flush()
        await handed_over(producer)
        assert scrape(metrics).get(("guardian_input_records_total", (("topic", "observations"),))) is None
        for fut in producer.futures:
            fut.set_result(SimpleNamespace(offset=0))
        await asyncio.gather(*shell.batch.acking)
        return metrics

    found = scrape(asyncio.run(main()))
    assert found[("guardian_input_records_total", (("topic", "observations"),))] == 2
    assert found[("guardian_output_records_total", (("topic", "timeline"),))] == 1
    assert ("guardian_dead_letters_total", (("reason", "not_json"),)) not in found
    assert found[("guardian_timeline_drops_total", (("reason", "duplicate"),))] == 1
    key = ("guardian_decisions_total", (("backend", "rules"), ("decision", "return_to_station")))
    assert found[key] == 1
    assert found[("guardian_trigger_to_dispatch_seconds_count", ())] == 1
    assert found[("guardian_trigger_to_dispatch_seconds_bucket", (("le", "0.01"),))] == 0
    assert found[("guardian_batch_records_count", ())] == 1
    assert found[("guardian_flush_duration_seconds_count", ())] == 1
    assert found[("process_resident_memory_bytes", ())] > 0

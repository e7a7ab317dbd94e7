"""The report at a fleet's scale: its size, the time to write it, and the time Chromium takes to open it.

``python -m bench.report_bench --records 1000000 --devices 175 --out DIR`` runs the bench mix of
:mod:`bench.workload` (setup records, then the measured observations, in timestamp order) through
the very :class:`pipeline.runner.Processor` that replay and the worker run, streams the outputs to
``DIR``'s JSONL files as replay writes them (with ``summary.json``), then times the report writer on
that directory and, with ``--open``, headless Chromium opening the page (until its script is done,
the load event, and the first frame drawn after it). ``--reuse`` renders an earlier run's outputs
again. Only the report is measured here; replay's own speed is another bench part.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from bench.devtools import DevToolsPipe
from bench.workload import Rec, device_ids, measured_records, setup_end, setup_records
from config.settings import Settings
from pipeline.core import Pipeline
from pipeline.runner import MemoryStore, Processor
from report.bands import AdmittedStates, DeviceStateChange
from report.html import render_report_from_dir
from supervisor import rules
from topics.envelope import Out
from topics.names import TopicNames
from topics.registry import load_registry

T0 = 1_785_400_000_000
PREFIX = "guardian."
FILES = {
    "decisions": "decisions.jsonl",
    "dispatch": "dispatch.jsonl",
    "timeline": "timeline.jsonl",
    "deadletter": "deadletter.jsonl",
}
#: what ``generate`` leaves for a later run on the same outputs (``--reuse``)
STATES = "bench-device-states.jsonl"
INPUTS = "bench-input-records.txt"


def _inputs(names: TopicNames, records: int, devices: int) -> Iterator[Rec]:
    ids = device_ids(devices)
    setup = setup_records(names, ids, T0)
    yield from setup
    yield from measured_records(names, ids, T0, setup_end(ids, T0), max(records - len(setup), 0))


def generate(out_dir: Path, *, records: int, devices: int) -> tuple[int, list[DeviceStateChange]]:
    """Replay's outputs for ``records`` input records of the bench mix over ``devices`` devices."""
    settings = Settings.from_env({})
    names = TopicNames(PREFIX)
    registry = load_registry(settings.contracts_file, settings.capabilities_file)
    processor = Processor(registry, Pipeline(registry, language=settings.language), rules.decide)
    store = MemoryStore()
    out_dir.mkdir(parents=True, exist_ok=True)
    handles = {kind: (out_dir / name).open("wb") for kind, name in FILES.items()}
    counts: Counter[str] = Counter()
    experiences: dict[str, str] = {}
    drops: Counter[str] = Counter()
    dead: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    by_backend: Counter[str] = Counter()
    states: list[DeviceStateChange] = []
    admitted = AdmittedStates()

    def write(outs: list[Out]) -> None:
        for o in outs:
            v: dict[str, Any] = o.value
            counts[o.kind] += 1
            handles[o.kind].write(orjson.dumps(v) + b"\n")
            if o.kind == "timeline" and v.get("experience_id"):
                if v.get("stage") == "goal":
                    experiences.setdefault(v["experience_id"], "active")
                elif v.get("stage") == "end":
                    experiences[v["experience_id"]] = str(v.get("status"))
            if o.kind == "timeline" and v.get("stage") == "drop":
                drops[str(v.get("drop_reason"))] += 1
            elif o.kind == "deadletter":
                dead[str(v.get("reason_code"))] += 1
            elif o.kind == "decisions":
                by_kind[str(v.get("decision"))] += 1
                by_backend[str(v.get("backend"))] += 1

    n = 0
    try:
        for offset, rec in enumerate(_inputs(names, records, devices)):
            suffix = names.suffix_of(rec.topic)
            assert suffix is not None
            done = processor.process(
                store,
                suffix,
                rec.key,
                rec.value,
                source_topic=rec.topic,
                partition=0,
                offset=offset,
                received_at_ms=rec.ts,
            )
            write(done.outs)
            if suffix == "observations" and done.device_id is not None:
                states.extend(admitted.after(done.device_id, store.devices[done.device_id].snapshot))
            n += 1
        for device_id in sorted(store.devices):
            write(processor.confirm_quiet(store, device_id, None).outs)
    finally:
        for fh in handles.values():
            fh.close()
    summary = {
        "decisions_mode": "rules",
        "counts": {k: counts[k] for k in FILES},
        "drop_reasons": dict(sorted(drops.items())),
        "deadletter_reasons": dict(sorted(dead.items())),
        "decisions_by_kind": dict(sorted(by_kind.items())),
        "decisions_by_backend": dict(sorted(by_backend.items())),
        "experiences": dict(sorted(experiences.items())),
    }
    (out_dir / "summary.json").write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
    with (out_dir / STATES).open("wb") as fh:
        for c in states:
            fh.write(orjson.dumps([c.device_id, c.kind, c.at_ms, c.event_id, c.state]) + b"\n")
    (out_dir / INPUTS).write_text(f"{n} {devices}", encoding="utf-8")
    return n, states


def reuse(out_dir: Path) -> tuple[int, int, list[DeviceStateChange]]:
    """The input count, devices and network/voice changes of an earlier ``generate`` into ``out_dir``."""
    with (out_dir / STATES).open("rb") as fh:
        states = [DeviceStateChange(*orjson.loads(line)) for line in fh]
    n, devices = (int(x) for x in (out_dir / INPUTS).read_text(encoding="utf-8").split())
    return n, devices, states


_FRAME_JS = (
    "new Promise(function (done) { requestAnimationFrame(function () { setTimeout(function () {"
    " var nav = performance.getEntriesByType('navigation')[0];"
    " var ready = Number(document.documentElement.getAttribute('data-ready-ms'));"
    " done([performance.now(), nav.loadEventEnd, ready]);"
    " }); }); })"
)


def open_times(page: Path, binary: str, runs: int = 2) -> dict[str, float]:
    """How long headless Chromium (1400x1000) takes to open ``page``: best of ``runs`` navigations,
    in seconds from the start of the navigation.

    ``ready_s``: the report's script has run (the page stamps ``data-ready-ms``): the file read and
    parsed, the lane list unpacked, the filters applied; ``load_s``: the load event has ended;
    ``frame_s``: the first frame after it is drawn (the page is on screen and usable).
    """
    with tempfile.TemporaryDirectory(prefix="report-bench-") as profile:
        browser = DevToolsPipe(binary, Path(profile))
        try:
            target = browser.send("Target.createTarget", {"url": "about:blank"}, browser=True)["targetId"]
            browser.session = browser.send(
                "Target.attachToTarget", {"targetId": target, "flatten": True}, browser=True
            )["sessionId"]
            browser.send("Page.enable")
            browser.send(
                "Emulation.setDeviceMetricsOverride",
                {"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": False},
            )
            best: list[float] | None = None
            for _ in range(runs):
                browser.send("Page.navigate", {"url": "about:blank"})
                browser.wait_event("Page.loadEventFired")
                browser.send("Page.navigate", {"url": page.as_uri()})
                browser.wait_event("Page.loadEventFired")
                result = browser.send(
                    "Runtime.evaluate", {"expression": _FRAME_JS, "awaitPromise": True, "returnByValue": True}
                )
                frame, load, ready = (float(x) / 1000 for x in result["result"]["value"])
                if not ready:
                    raise RuntimeError(f"the report's script did not finish in Chromium: {page}")
                if best is None or frame < best[2]:
                    best = [ready, load, frame]
        finally:
            browser.close()
    assert best is not None
    return {"ready_s": round(best[0], 2), "load_s": round(best[1], 2), "frame_s": round(best[2], 2)}


def run_bench(
    *, records: int, devices: int, out: Path | None, open_page: bool, again: bool = False
) -> dict[str, Any]:
    work = out or Path(tempfile.mkdtemp(prefix="report-bench-"))
    try:
        started = time.monotonic()
        if again and out is not None and (out / INPUTS).exists():
            n, devices, states = reuse(out)
        else:
            n, states = generate(work, records=records, devices=devices)
        generated_s = time.monotonic() - started
        rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started = time.monotonic()
        page = render_report_from_dir(work, device_states=states)
        write_s = time.monotonic() - started
        result: dict[str, Any] = {
            "input_records": n,
            "devices": devices,
            "outputs": json.loads((work / "summary.json").read_text())["counts"],
            "output_jsonl_bytes": sum((work / f).stat().st_size for f in FILES.values()),
            "report_bytes": page.stat().st_size,
            "report_write_s": round(write_s, 2),
            "generate_s": round(generated_s, 1),
            "peak_rss_mb_before_report": rss_before // 1024,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
        }
        if open_page:
            binary = shutil.which("chromium") or shutil.which("chromium-browser")
            if binary is None:
                raise RuntimeError("headless Chromium is not installed")
            result["chromium_open"] = open_times(page, binary)
        return result
    finally:
        if out is None:
            shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report_bench", description=__doc__)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--devices", type=int, default=175)
    parser.add_argument("--out", type=Path, default=None, help="keep the outputs and report here")
    parser.add_argument("--open", action="store_true", help="also time headless Chromium opening it")
    parser.add_argument(
        "--reuse", action="store_true", help="render the outputs an earlier run left in --out"
    )
    args = parser.parse_args(argv)
    result = run_bench(
        records=args.records, devices=args.devices, out=args.out, open_page=args.open, again=args.reuse
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())

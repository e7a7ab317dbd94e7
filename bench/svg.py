"""A small hand-written SVG chart of a benchmark run (no plotting library)."""

from __future__ import annotations

from html import escape
from pathlib import Path
from typing import Any

WIDTH = 760
BAR_X = 250
BAR_W = 420


def _bars(results: dict[str, Any]) -> list[tuple[str, float]]:
    bars: list[tuple[str, float]] = []
    broker = results.get("broker") or {}
    if broker:
        bars.append(("Kafka ProducerPerformance", float(broker["producer_perf"]["records_per_s"])))
        bars.append(("Kafka ConsumerPerformance", float(broker["consumer_perf"]["records_per_s"])))
    if "passthrough" in results:
        bars.append(("raw aiokafka passthrough", float(results["passthrough"]["records_per_s"])))
    if "faust_floor" in results:
        bars.append(("faust floor (agent that only acks)", float(results["faust_floor"]["records_per_s"])))
    if "inbox_floor" in results:
        bars.append(("inbox floor (batches, only acks)", float(results["inbox_floor"]["records_per_s"])))
    if "pipeline" in results and "records_per_s" in results["pipeline"]:
        bars.append(("Guardian pipeline (1 worker)", float(results["pipeline"]["records_per_s"])))
    return bars


def render(results: dict[str, Any]) -> str:
    bars = _bars(results)
    top = max((v for _, v in bars), default=1.0) or 1.0
    lines: list[str] = []
    y = 50
    m = results.get("machine", {})
    title = f"guardian bench ({results.get('mode', '')}) — {m.get('nproc')} cores, {m.get('cpu', '')}"
    lines.append(f'<text x="10" y="24" font-size="15" font-weight="bold">{escape(title)}</text>')
    lines.append(f'<text x="10" y="{y - 8}" font-size="12" fill="#555">records/s on one broker</text>')
    for label, value in bars:
        w = max(1.0, BAR_W * value / top)
        color = "#2b7bb9" if label.startswith("Guardian") else "#9bb7d4"
        lines.append(f'<text x="10" y="{y + 15}" font-size="13">{escape(label)}</text>')
        lines.append(f'<rect x="{BAR_X}" y="{y}" width="{w:.1f}" height="20" fill="{color}"/>')
        lines.append(f'<text x="{BAR_X + w + 6:.1f}" y="{y + 15}" font-size="12">{value:,.0f}</text>')
        y += 30
    y += 10
    for name, t in (results.get("targets") or {}).items():
        value = t["value"]
        shown = "not measured" if value is None else f"{value:,.2f}"
        mark = {True: "✔", False: "✘", None: "–"}[t["met"]]
        color = {True: "#1a7f37", False: "#cf222e", None: "#555"}[t["met"]]
        text = f"{mark} {name}: {shown} (target {t['target']})"
        lines.append(f'<text x="10" y="{y + 14}" font-size="13" fill="{color}">{escape(text)}</text>')
        y += 22
    height = y + 20
    body = "\n  ".join(lines)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
        f'viewBox="0 0 {WIDTH} {height}" font-family="sans-serif">\n'
        f'  <rect width="100%" height="100%" fill="white"/>\n  {body}\n</svg>\n'
    )


def write_svg(path: Path, results: dict[str, Any]) -> None:
    path.write_text(render(results), encoding="utf-8")

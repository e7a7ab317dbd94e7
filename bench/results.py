"""The benchmark's kept results: one file per full run in ``bench/results/``, and the tables the
README and ``docs/PERFORMANCE.md`` show, generated from the latest of them.

A run of every part of ``guardian bench`` writes its figures (:func:`figures`: each part's figure
or why its window was not valid, the targets, the machine, the cores, the commit and the date) to
``bench/results/<date>-<mode>-<commit>.json`` and rewrites the marked blocks of the two documents
from the latest file (by name: the names begin with the UTC date). ``python -m bench.results
render`` rewrites them again (after a file's ``notes`` were edited, say); ``python -m
bench.results check`` exits 1 when the documents differ from what the latest file gives.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench import report_tables
from bench.targets import evaluate

#: where the kept results are (beside this package, in a checkout)
RESULTS_DIR = Path(__file__).parent / "results"
#: the repository's root (the documents the tables are rendered into)
ROOT = Path(__file__).parent.parent
DOCS = {"README.md": "targets", "docs/PERFORMANCE.md": "figures"}
FORMAT = 1
THROUGHPUT_PARTS = ("pipeline", "passthrough", "inbox_floor", "faust_floor")
_WINDOW_KEYS = (
    "valid",
    "records_per_s",
    "measured_records",
    "measured_s",
    "acks",
    "cpu_us_per_record",
    "reasons",
)


def _pick(source: dict[str, Any] | None, keys: tuple[str, ...]) -> dict[str, Any]:
    return {k: source[k] for k in keys if source and source.get(k) is not None}


def figures(results: dict[str, Any], *, commit: str, dirty: bool, date: str) -> dict[str, Any]:
    """What a run keeps of ``guardian bench``'s results: its figures, not its traces (pure)."""
    parts: dict[str, Any] = {}
    for name in THROUGHPUT_PARTS:
        if name in results:
            parts[name] = _pick(results[name], _WINDOW_KEYS)
    if "pipeline" in parts:
        parts["pipeline"].update(_pick(results["pipeline"], ("devices", "records", "partitions")))
    lat = results.get("latency")
    if lat:
        parts["latency"] = (
            {"refused": lat["refused"]}
            if "refused" in lat
            else {"rate": lat.get("background_rate_target"), "windows": lat.get("windows", [])}
        )
    if "rss" in results:
        parts["rss"] = _pick(results["rss"], ("devices", "vm_hwm_mb"))
    broker = results.get("broker")
    if broker:
        parts["broker"] = {
            "producer_records_per_s": broker["producer_perf"]["records_per_s"],
            "consumer_records_per_s": broker["consumer_perf"]["records_per_s"],
        }
    for name in ("core", "gate"):
        if name in results:
            parts[name] = _pick(results[name], ("median_us",))
    if "replay" in results:
        parts["replay"] = _pick(
            results["replay"], ("records", "records_per_s", "records_per_cpu_s", "rss_mb")
        )
    scale = results.get("scaleout")
    if scale:
        parts["scaleout"] = {
            n: _pick(r, ("records_per_s", "steady_records_per_s", "missing", "unexpected", "duplicates"))
            for n, r in scale.items()
        }
    return {
        "format": FORMAT,
        "date": date,
        "commit": commit,
        "dirty": dirty,
        "mode": results.get("mode"),
        "machine": results.get("machine", {}),
        "layout": results.get("layout", {}),
        "load_average": {
            "start": results.get("load_average_at_start"),
            "end": results.get("load_average_at_end"),
        },
        "notes": [],
        "parts": parts,
        "targets": evaluate(results),
    }


def not_valid(kept: dict[str, Any]) -> list[str]:
    """Each measured part whose window was not valid (or that was not run for want of one), and why."""
    parts = kept.get("parts", {})
    out: list[str] = []
    for name in THROUGHPUT_PARTS:
        part = parts.get(name)
        if part and part.get("valid") is False:
            out.append(f"{name}: window not valid, no figure: {'; '.join(part.get('reasons') or [])}")
    lat = parts.get("latency") or {}
    if "refused" in lat:
        out.append(f"latency: not run: {lat['refused']}")
    for w in lat.get("windows") or []:
        if not w.get("valid"):
            out.append(
                f"latency window {w['window']}: not valid, no figure: {'; '.join(w.get('reasons') or [])}"
            )
    return out


def dumps(kept: dict[str, Any]) -> bytes:
    return orjson.dumps(kept, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"


def provenance() -> dict[str, Any]:
    """The commit the bench runs from (``unknown`` outside a git checkout), whether the checkout has
    uncommitted changes, and the date (UTC)."""
    commit, dirty = "unknown", False
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10, check=True
        )
        commit = head.stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
        dirty = bool(status.stdout.strip())
    return {"commit": commit, "dirty": dirty, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def file_name(kept: dict[str, Any]) -> str:
    date = str(kept["date"]).replace(":", "")
    return f"{date}-{kept['mode']}-{str(kept['commit'])[:10]}.json"


def history(directory: Path = RESULTS_DIR) -> list[tuple[str, dict[str, Any]]]:
    """The kept results, oldest first (by name: the names begin with the date)."""
    if not directory.is_dir():
        return []
    return [(p.name, orjson.loads(p.read_bytes())) for p in sorted(directory.glob("*.json"))]


def keep(kept: dict[str, Any], directory: Path = RESULTS_DIR) -> str:
    """Write a full run's figures to ``directory`` and render the documents; what was done."""
    if not directory.is_dir():
        return f"no {directory} (not a checkout of the repository): the figures are only in OUT/results.json"
    path = directory / file_name(kept)
    path.write_bytes(dumps(kept))
    changed = render_docs()
    return (
        f"kept the figures in {path}; tables rendered into {', '.join(changed) or 'no document (unchanged)'}"
    )


def render_docs(root: Path = ROOT, directory: Path = RESULTS_DIR) -> list[str]:
    """Rewrite the marked blocks of the documents from the latest kept results; those changed."""
    runs = history(directory)
    changed: list[str] = []
    for doc, block in DOCS.items():
        path = root / doc
        text = path.read_text(encoding="utf-8")
        new = report_tables.replace_block(text, block, report_tables.render(block, runs))
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed.append(doc)
    return changed


def stale_docs(root: Path = ROOT, directory: Path = RESULTS_DIR) -> list[str]:
    """The documents whose marked blocks differ from what the latest kept results give."""
    runs = history(directory)
    out: list[str] = []
    for doc, block in DOCS.items():
        text = (root / doc).read_text(encoding="utf-8")
        if report_tables.replace_block(text, block, report_tables.render(block, runs)) != text:
            out.append(doc)
    return out


def main(argv: list[str]) -> int:
    if argv == ["render"]:
        changed = render_docs()
        print(f"rendered: {', '.join(changed) or 'nothing changed'}")
        return 0
    if argv == ["check"]:
        stale = stale_docs()
        for doc in stale:
            print(
                f"{doc}: its tables differ from bench/results/ (python -m bench.results render)",
                file=sys.stderr,
            )
        return 1 if stale else 0
    print("usage: python -m bench.results render|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

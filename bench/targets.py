"""The benchmark's targets and how one run's results are judged against them (pure).

The targets hold on the bench's layout (the measured worker on a core of its own, ``bench.layout``)
and count as met only when met in each of three full runs in a row (``bench.results`` shows the
streak); one run's judgement is one of the three. A figure from an invalid window (``bench.windows``)
is no figure: its target is "not measured", with the reason.
"""

from __future__ import annotations

from typing import Any

TARGETS: dict[str, tuple[str, float]] = {
    "pipeline_obs_per_s": (">=", 15_000.0),
    "latency_p99_ms": ("<=", 100.0),
    "latency_p999_ms": ("<=", 250.0),
    "worker_rss_mb_10k_devices": ("<=", 400.0),
    "replay_records_per_s": (">=", 40_000.0),
}

#: what each target measures (the tables' wording)
LABELS = {
    "pipeline_obs_per_s": "pipeline, observations/s per worker",
    "latency_p99_ms": "trigger → dispatch p99 at a quarter of the maximum, every window (ms)",
    "latency_p999_ms": "trigger → dispatch p99.9 at a quarter of the maximum, every window (ms)",
    "worker_rss_mb_10k_devices": "worker peak RSS at 10,000 devices (MB)",
    "replay_records_per_s": "`guardian replay`, records/s on one core",
}


def _worst(windows: list[dict[str, Any]], key: str) -> tuple[float | None, str | None]:
    """The largest ``key`` over the windows; None and why when any window is not valid."""
    if not windows:
        return None, None
    bad = [w for w in windows if not w.get("valid")]
    if bad:
        first = bad[0]
        return None, f"window {first['window']} not valid: {'; '.join(first.get('reasons') or [])}"
    return max(float(w[key]) for w in windows), None


def values(results: dict[str, Any]) -> dict[str, tuple[float | None, str | None]]:
    """Each target's value in ``results`` (None when not measured, with why when known)."""
    out: dict[str, tuple[float | None, str | None]] = {}
    pipe = results.get("pipeline") or {}
    if pipe.get("valid") is False:
        out["pipeline_obs_per_s"] = (None, "window not valid: " + "; ".join(pipe.get("reasons") or []))
    else:
        out["pipeline_obs_per_s"] = (pipe.get("records_per_s"), None)
    lat = results.get("latency") or {}
    windows = lat.get("windows") or []
    refused = lat.get("refused")
    for name, key in (("latency_p99_ms", "p99_ms"), ("latency_p999_ms", "p999_ms")):
        out[name] = (None, f"not run: {refused}") if refused else _worst(windows, key)
    rss = results.get("rss") or {}
    devices = rss.get("devices", 0)
    hwm = rss.get("vm_hwm_mb")
    if hwm is not None and devices and devices < 10_000:
        out["worker_rss_mb_10k_devices"] = (hwm, f"measured at {devices:,} devices only")
    else:
        out["worker_rss_mb_10k_devices"] = (hwm, None)
    out["replay_records_per_s"] = ((results.get("replay") or {}).get("records_per_s"), None)
    return out


def evaluate(results: dict[str, Any]) -> dict[str, Any]:
    """Per target: ``target``, ``value``, ``met`` (None: not measured or not judged) and ``note``."""
    out: dict[str, Any] = {}
    for name, (value, note) in values(results).items():
        op, target = TARGETS[name]
        met = None if value is None else (value >= target if op == ">=" else value <= target)
        if note and value is not None:
            met = None  # measured, but not where the target is set
        row: dict[str, Any] = {"target": f"{op} {target:g}", "value": value, "met": met}
        if note:
            row["note"] = note
        out[name] = row
    return out

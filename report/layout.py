"""The report's vocabulary and layout: stages, statuses and the contract's enums in the order the
page lists them, the page-wide budgets and the SVG geometry, and small plain-text formatters of
times, durations and counts (escaping is :mod:`report.safe`'s)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

from report.lanes import SEVERE_STATUSES
from topics import records

STAGES: Final[tuple[str, ...]] = ("goal", "observe", "decide", "act", "evidence", "end", "drop")
# ``blocked`` (preconditions not met) is listed even where the enum predates it
STATUSES: Final[tuple[str, ...]] = tuple(dict.fromkeys((*records.END_STATUSES, "blocked", "active")))
#: Lane severity, most severe first: these statuses, then diverged lanes, then lanes with dead letters.
SEVERITY_LABELS: Final[tuple[str, ...]] = (*SEVERE_STATUSES, "diverged", "dead letters", "other")
# the contract's own enums (topics.records), in the order the overview lists them
DROP_REASONS: Final[tuple[str, ...]] = records.DROP_REASONS
DECISIONS: Final[tuple[str, ...]] = records.DECISIONS
BACKENDS: Final[tuple[str, ...]] = records.BACKENDS
DEAD_LETTER_REASONS: Final[tuple[str, ...]] = records.DEADLETTER_REASONS

# Page-wide budgets (water-filled over the lanes) and per-lane bounds.
TABLE_ROW_BUDGET: Final = 30_000
TABLE_ROWS_MIN: Final = 20
TABLE_ROWS_MAX: Final = 300
SVG_MARK_BUDGET: Final = 50_000
SVG_MARKS_MIN: Final = 40
SVG_MARKS_MAX: Final = 600
#: marks of the one-row strips of the shared time axis (decisions, dispatches, drops, dead letters)
STRIP_MARK_BUDGET: Final = 20_000
STRIP_MARKS_MIN: Final = 10
STRIP_MARKS_MAX: Final = 200
OPEN_LANES_MAX: Final = 40
#: Collapsed lanes carry their body and shared-axis strip as compressed data that the page renders
#: when a lane is opened (or, for the strip, scrolled into view): lanes are packed into chunks of
#: about this many bytes of HTML, each deflated and base64-encoded.
LANE_CHUNK_BYTES: Final = 256 * 1024

# SVG geometry (user units; the chart scales to the page width).
W: Final = 1200.0
X0: Final = 92.0
X1: Final = 1184.0
TOP: Final = 6.0
ROW: Final = 19.0
AXIS: Final = 22.0


def fmt_ms(ms: int | None, pattern: str, suffix: str = "") -> str:
    """``ms`` (epoch milliseconds, UTC) with ``pattern`` and its milliseconds; "—" for None."""
    if ms is None:
        return "—"
    try:
        dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return dt.strftime(pattern) + f".{ms % 1000:03d}{suffix}"


def fmt_time(ms: int | None) -> str:
    return fmt_ms(ms, "%Y-%m-%d %H:%M:%S", "Z")


def fmt_clock(ms: int | None) -> str:
    return fmt_ms(ms, "%H:%M:%S")


def fmt_dur(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    s = ms / 1000
    if s < 60:
        return f"{s:.1f}s".replace(".0s", "s")
    m, sec = divmod(int(s), 60)
    if m < 60:
        return f"{m}m {sec:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h {m:02d}m"


def num(count: int) -> str:
    return f"{count:,}"


def plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def water_fill(sizes: Sequence[int], budget: int, lo: int, hi: int) -> int:
    """The largest per-lane cap c in [lo, hi] with sum(min(size, c)) <= budget (at least lo)."""
    if sum(min(s, hi) for s in sizes) <= budget:
        return hi
    best = lo
    a, b = lo, hi
    while a <= b:
        mid = (a + b) // 2
        if sum(min(s, mid) for s in sizes) <= budget:
            best, a = mid, mid + 1
        else:
            b = mid - 1
    return best

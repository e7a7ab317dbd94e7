"""The swimlane chart of one lane (SVG, marks sampled to a cap) and its strip on the shared time axis."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from report.bands import (
    RESTING,
    StateInterval,
    band_class,
    band_what,
)
from report.lanes import Lane
from report.lanes import rec_int as _int
from report.lanes import rec_str as _str
from report.layout import (
    AXIS,
    ROW,
    STAGES,
    STATUSES,
    SVG_MARKS_MAX,
    TOP,
    X0,
    X1,
    W,
    fmt_clock,
    fmt_dur,
    fmt_time,
)
from report.safe import css_known, esc
from report.sources import Record

# --------------------------------------------------------------------------- the swimlane chart


def sample(items: list[tuple[int, Record]], cap: int) -> list[tuple[int, Record]]:
    """Keep at most `cap` entries: every non-drop stage first (goal and end always), drops sampled."""
    if len(items) <= cap:
        return items
    main = [it for it in items if _str(it[1], "stage") != "drop"]
    drops = [it for it in items if _str(it[1], "stage") == "drop"]
    if len(main) >= cap:
        must = [it for it in main if _str(it[1], "stage") in ("goal", "end")]
        rest = [it for it in main if _str(it[1], "stage") not in ("goal", "end")]
        chosen = must + even_sample(rest, max(0, cap - len(must)))
    else:
        chosen = main + even_sample(drops, cap - len(main))
    return sorted(chosen, key=lambda it: it[0])


def even_sample(items: list[tuple[int, Record]], k: int) -> list[tuple[int, Record]]:
    if k <= 0:
        return []
    if len(items) <= k:
        return items
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def positions(times: Sequence[int]) -> list[float]:
    """x per mark: linear in time, equal times kept apart in sequence order, squeezed to fit."""
    n = len(times)
    if n == 0:
        return []
    span = X1 - X0
    tmin, tmax = times[0], times[-1]
    scale = span / (tmax - tmin) if tmax > tmin else 0.0
    xs = [X0 + (t - tmin) * scale for t in times]
    gap = min(8.0, span / max(n - 1, 1))
    for i in range(1, n):
        xs[i] = max(xs[i], xs[i - 1] + gap)
    if xs[-1] > X1:
        k = span / (xs[-1] - X0)
        xs = [X0 + (x - X0) * k for x in xs]
    return xs


def nice_step(duration: int) -> int:
    steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000]
    steps += [120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 86_400_000]
    for s in steps:
        if duration / s <= 6:
            return s
    return max(1, duration // 6)


def lane_chart(lane: Lane, cap: int) -> tuple[str, int]:
    """The lane's SVG and how many marks it shows."""
    items: list[tuple[int, Record]] = []
    for i, rec in enumerate(lane.entries):
        if _str(rec, "stage") in STAGES:
            items.append((i, rec))
    shown = sample(items, cap)
    # times: a missing at_ms borrows the previous one (sequence order keeps them apart)
    times: list[int] = []
    last = next((t for t in (_int(r, "at_ms") for _, r in shown) if t is not None), 0)
    for _, rec in shown:
        t = _int(rec, "at_ms")
        last = t if t is not None else last
        times.append(last)
    xs = positions(times)
    kinds = [k for k in RESTING if any(i.kind == k for i in lane.states)]
    letters = [*lane.dead_letters, *lane.foreign_dead]
    rows = (*STAGES, *kinds, *(("dead letter",) if letters else ()))
    height = TOP + ROW * len(rows) + AXIS
    row_y = {row: TOP + ROW * i + ROW / 2 for i, row in enumerate(rows)}

    parts = [
        f'<svg class="chart" viewBox="0 0 {W:.0f} {height:.0f}" role="img" '
        f'aria-label="timeline of {esc(lane.experience_id or lane.device_id)}">'
    ]
    for i, row in enumerate(rows):
        y = TOP + ROW * i
        cls = "rowlbl" if row in STAGES else "rowlbl staterow"
        parts.append(
            f'<rect class="band{i % 2}" x="0" y="{y:.0f}" width="{W:.0f}" height="{ROW:.0f}"/>'
            f'<text class="{cls}" x="8" y="{y + ROW / 2 + 4:.0f}">{row.capitalize()}</text>'
        )
    # network and voice state: a band per stretch out of the resting state
    if times:
        for interval in lane.states:
            start = max(interval.start_ms, times[0])
            end = times[-1] if interval.end_ms is None else min(interval.end_ms, times[-1])
            x0 = x_at(start, times, xs)
            x1 = max(x_at(end, times, xs), x0 + 3.0)
            y = row_y[interval.kind] - ROW / 2 + 2
            parts.append(
                f'<rect class="sband {esc(band_class(interval))}" x="{x0:.1f}" y="{y:.1f}" '
                f'width="{x1 - x0:.1f}" height="{ROW - 4:.0f}" rx="3"><title>{esc(interval_text(interval))}'
                "</title></rect>"
            )
    # dead letters, where they arrived
    if times and letters:
        dl_marks = []
        for rec in letters[:SVG_MARKS_MAX]:
            at = _int(rec, "received_at_ms")
            if at is None:
                continue
            dl_tip = (
                f"dead letter · {fmt_clock(at)}\n{_str(rec, 'reason_code')}: {_str(rec, 'detail')}\n"
                f"{_str(rec, 'source_topic')} [{_str(rec, 'partition')}] @{_str(rec, 'offset')}"
            )
            dl_marks.append(
                f'<rect x="{x_at(at, times, xs) - 4:.1f}" y="-4" width="8" height="8" '
                f'transform="rotate(45 {x_at(at, times, xs):.1f} 0)"><title>{esc(dl_tip)}</title></rect>'
            )
        parts.append(
            f'<g class="k-dead" transform="translate(0,{row_y["dead letter"]:.1f})">{"".join(dl_marks)}</g>'
        )
    # time axis
    axis_y = TOP + ROW * len(rows)
    parts.append(f'<line class="axis" x1="{X0:.0f}" y1="{axis_y:.0f}" x2="{X1:.0f}" y2="{axis_y:.0f}"/>')
    if times:
        t0, t1 = times[0], times[-1]
        step = nice_step(max(t1 - t0, 1))
        tick = 0
        path: list[str] = []
        labels: list[str] = []
        while t0 + tick <= t1 or tick == 0:
            x = x_at(t0 + tick, times, xs)
            path.append(f"M{x:.1f} {TOP:.0f}V{axis_y + 4:.0f}")
            labels.append(f'<text x="{x:.1f}" y="{axis_y + 16:.0f}">+{esc(fmt_dur(tick))}</text>')
            tick += step
        parts.append(f'<path class="tick" d="{"".join(path)}"/><g class="ticklbl">{"".join(labels)}</g>')
    # the flow through the non-drop stages
    flow = [
        f"{x:.1f},{row_y[_str(rec, 'stage')]:.0f}"
        for (_, rec), x in zip(shown, xs, strict=True)
        if _str(rec, "stage") != "drop"
    ]
    if len(flow) > 1:
        parts.append(f'<polyline class="flow" points="{" ".join(flow)}"/>')
    # marks, grouped per stage row
    by_stage: dict[str, list[str]] = {s: [] for s in STAGES}
    t_first = times[0] if times else 0
    for (_, rec), x, t in zip(shown, xs, times, strict=True):
        stage = _str(rec, "stage")
        tip = [f"{stage} · {fmt_clock(_int(rec, 'at_ms'))} (+{fmt_dur(t - t_first)})"]
        if _str(rec, "summary"):
            tip.append(_str(rec, "summary"))
        tip.append(f"ref_id: {_str(rec, 'ref_id') or '—'}")
        if _str(rec, "drop_reason"):
            tip.append(f"drop reason: {_str(rec, 'drop_reason')}")
        if stage == "end" and _str(rec, "status"):
            tip.append(f"status: {_str(rec, 'status')}")
        title = esc("\n".join(tip))
        if stage == "end":
            cls = f"st-{css_known(_str(rec, 'status'), STATUSES)}"
            by_stage[stage].append(
                f'<circle class="{cls}" cx="{x:.1f}" r="6.5"><title>{title}</title></circle>'
            )
        else:
            by_stage[stage].append(f'<circle cx="{x:.1f}" r="4.5"><title>{title}</title></circle>')
    for stage, marks in by_stage.items():
        if marks:
            parts.append(
                f'<g class="k-{stage}" transform="translate(0,{row_y[stage]:.1f})">{"".join(marks)}</g>'
            )
    parts.append("</svg>")
    return "".join(parts), len(shown)


def interval_text(interval: StateInterval) -> str:
    end = "end of input" if interval.end_ms is None else fmt_clock(interval.end_ms)
    span = "" if interval.end_ms is None else f" ({fmt_dur(interval.end_ms - interval.start_ms)})"
    return f"{band_what(interval)}: {fmt_clock(interval.start_ms)} → {end}{span}"


def x_at(t: int, times: Sequence[int], xs: Sequence[float]) -> float:
    """The x of time t on the (monotone, piecewise linear) mark scale."""
    j = bisect.bisect_right(times, t)
    if j == 0:
        return xs[0]
    if j >= len(times):
        return xs[-1]
    ta, tb, xa, xb = times[j - 1], times[j], xs[j - 1], xs[j]
    if tb == ta:
        return xa
    return xa + (xb - xa) * (t - ta) / (tb - ta)


@dataclass(frozen=True)
class Axis:
    """The shared time axis: every lane's strip on one linear scale."""

    t0: int
    t1: int

    def x(self, t: int) -> float:
        if self.t1 <= self.t0:
            return X0
        return X0 + (X1 - X0) * (min(max(t, self.t0), self.t1) - self.t0) / (self.t1 - self.t0)


def shared_strip(lane: Lane, axis: Axis, cap: int) -> str:
    """One row per lane on the shared axis: the lane's span, its bands, decisions, dispatches,
    drops and dead letters."""
    window = lane.window()
    if window is None:
        return ""
    lo, hi = window
    h = 18.0
    parts = [f'<svg class="shared" viewBox="0 0 {W:.0f} {h:.0f}" role="img" aria-label="on the shared axis">']
    parts.append(
        f'<rect class="span" x="{axis.x(lo):.1f}" y="7" width="{max(axis.x(hi) - axis.x(lo), 2):.1f}" '
        f'height="4" rx="2"><title>{esc(fmt_time(lo))} → {esc(fmt_time(hi))}</title></rect>'
    )
    for i in lane.states:
        x0 = axis.x(max(i.start_ms, lo))
        x1 = axis.x(hi if i.end_ms is None else min(i.end_ms, hi))
        parts.append(
            f'<rect class="sband {esc(band_class(i))}" x="{x0:.1f}" y="2" '
            f'width="{max(x1 - x0, 2):.1f}" height="14"><title>{esc(interval_text(i))}</title></rect>'
        )
    marks: list[tuple[int, str, str]] = []
    for rec in lane.entries:
        stage = _str(rec, "stage")
        at = _int(rec, "at_ms")
        if at is not None and stage in ("decide", "act", "drop", "end", "goal"):
            marks.append((at, f"k-{stage}", f"{stage}: {_str(rec, 'summary')}"))
    for rec in lane.dead_letters:
        at = _int(rec, "received_at_ms")
        if at is not None:
            marks.append((at, "k-dead", f"dead letter: {_str(rec, 'reason_code')}"))
    if len(marks) > cap:
        # drops are sampled first: every other mark is kept while the cap allows
        main = [m for m in marks if m[1] != "k-drop"]
        drops = [m for m in marks if m[1] == "k-drop"]
        if len(main) >= cap:
            marks = [main[int(i * len(main) / cap)] for i in range(cap)]
        else:
            k = cap - len(main)
            marks = main + [drops[int(i * len(drops) / k)] for i in range(k)]
    for at, cls, tip in marks:
        parts.append(
            f'<circle class="{cls}" cx="{axis.x(at):.1f}" cy="9" r="3.5"><title>{esc(tip)}</title></circle>'
        )
    parts.append("</svg>")
    return "".join(parts)


def strip_size(lane: Lane) -> int:
    return lane.strip_marks

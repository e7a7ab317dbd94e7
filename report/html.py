"""The self-contained HTML incident report.

`render_report` turns the pipeline's output records (docs/CONTRACTS.md §6 decisions, §7 dispatches,
§8 timeline entries, §10 dead letters) and the final statuses of `summary.json` (§12) into one
HTML page: inline CSS, inline JS and inline SVG, no external reference of any kind, every record
string escaped. `render_report_from_dir` does the same from a replay/demo output directory
(reading `divergences.jsonl` and the mode in `summary.json` too) and writes `report.html` there.

Network and voice observations write no timeline entry, so the output files cannot show an outage
or a voice session: replay hands the report the states the pipeline admitted into the device
snapshot (``device_states``, :mod:`report.bands`) and the report draws them as bands, merged and
bounded per lane.

The page is deterministic (same records, same bytes: no wall clock) and bounded: per-lane entry
tables and charts are capped by a page-wide budget, and past ``OPEN_LANES_MAX`` lanes every lane
starts collapsed with its body and shared-axis strip carried deflated and base64-encoded (a few
"lz-K" data blocks); the page's own script inflates a lane and draws it when it is opened (or its
strip when it scrolls into view on the shared axis). The overview, the filters and the lane list
with each lane's status, badges and filter values are plain HTML, drawn at once (page sizes of
large replays: docs/PERFORMANCE.md).

The writer does not hold the records: it scans each output kind once, keeping per lane its
aggregates and an 8-byte handle per record (an offset in the JSONL file), then loads, draws and
lets go of one lane's records at a time (the lane model: :mod:`report.lanes`).
"""

from __future__ import annotations

import base64
import bisect
import json
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Final

from report.bands import (
    BAND_BUDGET,
    BANDS_LANE_MAX,
    BANDS_LANE_MIN,
    RESTING,
    DeviceStateChange,
    StateInterval,
    band_class,
    band_what,
    lane_bands,
)
from report.lanes import DETAIL_ROWS_MAX, NO_EXPERIENCE, SEVERE_STATUSES, Lane, Totals, build_lanes, drawn
from report.lanes import rec_int as _int
from report.lanes import rec_str as _str
from report.safe import shown_id, shown_value
from report.sources import FileRecords, ListRecords, Record, Sources, loads
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
_W: Final = 1200.0
_X0: Final = 92.0
_X1: Final = 1184.0
_TOP: Final = 6.0
_ROW: Final = 19.0
_AXIS: Final = 22.0


# --------------------------------------------------------------------------- small helpers


def _e(value: object) -> str:
    """Escape any record value for HTML text or a quoted attribute."""
    return escape("" if value is None else str(value), quote=True)


def _known(value: str, known: Iterable[str]) -> str:
    """A CSS-safe class suffix: the value itself when it is one of the known enum values."""
    return value if value in known else "other"


def _fmt_ms(ms: int | None, pattern: str, suffix: str = "") -> str:
    """``ms`` (epoch milliseconds, UTC) with ``pattern`` and its milliseconds; "—" for None."""
    if ms is None:
        return "—"
    try:
        dt = datetime.fromtimestamp(ms / 1000, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return dt.strftime(pattern) + f".{ms % 1000:03d}{suffix}"


def _fmt_time(ms: int | None) -> str:
    return _fmt_ms(ms, "%Y-%m-%d %H:%M:%S", "Z")


def _fmt_clock(ms: int | None) -> str:
    return _fmt_ms(ms, "%H:%M:%S")


def _fmt_dur(ms: int) -> str:
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


def _n(count: int) -> str:
    return f"{count:,}"


def _plural(count: int, noun: str) -> str:
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def _water_fill(sizes: Sequence[int], budget: int, lo: int, hi: int) -> int:
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


# --------------------------------------------------------------------------- overview


def _count_table(title: str, counts: Counter[str], order: Sequence[str], css: str, empty: str) -> str:
    keys = [k for k in order if counts.get(k)] + sorted(k for k in counts if k not in order)
    total = sum(counts.values())
    head = f'<h3>{_e(title)} <span class="tot">{_n(total)}</span></h3>'
    if not keys:
        return f'<div class="card">{head}<p class="muted">{_e(empty)}</p></div>'
    top = max(counts.values())
    rows = []
    for k in keys:
        c = counts[k]
        width = max(2.0, 100.0 * c / top)
        cls = f"{css}-{_known(k, order)}" if css else ""
        rows.append(
            f'<tr><td class="mono">{_e(k or "—")}</td><td class="num">{_n(c)}</td>'
            f'<td class="barcell"><span class="bar {cls}" style="width:{width:.1f}%"></span></td></tr>'
        )
    return f'<div class="card">{head}<table class="counts">{"".join(rows)}</table></div>'


def _status_strip(counts: Counter[str]) -> str:
    total = sum(counts.values())
    if not total:
        return ""
    keys = [k for k in STATUSES if counts.get(k)] + sorted(k for k in counts if k not in STATUSES)
    segs = "".join(
        f'<span class="seg st-{_known(k, STATUSES)}" style="width:{100.0 * counts[k] / total:.3f}%" '
        f'title="{_e(k)}: {_n(counts[k])}"></span>'
        for k in keys
    )
    return f'<div class="strip">{segs}</div>'


def _overview(lanes: Sequence[Lane], totals: Totals) -> str:
    exp_lanes = [lane for lane in lanes if lane.is_experience]
    by_status: Counter[str] = Counter(lane.status for lane in exp_lanes)
    for s in STATUSES:
        by_status.setdefault(s, 0)
    drops, dead = totals.drops, totals.dead
    by_decision, by_backend = totals.by_decision, totals.by_backend
    local = totals.local_dispatches
    devices = {lane.device_id for lane in lanes if lane.device_id}

    status_rows = "".join(
        f'<tr><td><span class="badge st-{_known(k, STATUSES)}">{_e(k)}</span></td>'
        f'<td class="num">{_n(c)}</td></tr>'
        for k, c in sorted(by_status.items(), key=lambda kc: (kc[0] not in STATUSES, _status_rank(kc[0])))
    )
    stats = (
        '<div class="stats">'
        f'<div class="stat"><b>{_n(len(exp_lanes))}</b><span>experiences</span></div>'
        f'<div class="stat"><b>{_n(len(devices))}</b><span>devices</span></div>'
        f'<div class="stat"><b>{_n(totals.timeline)}</b><span>timeline entries</span></div>'
        f'<div class="stat"><b>{_n(totals.decisions)}</b><span>decisions</span></div>'
        f'<div class="stat"><b>{_n(totals.dispatches)}</b><span>dispatches</span>'
        f"<small>{_n(totals.dispatches - local)} from decisions · {_n(local)} local</small></div>"
        f'<div class="stat"><b>{_n(sum(drops.values()))}</b><span>drops</span></div>'
        f'<div class="stat"><b>{_n(totals.dead_letters)}</b><span>dead letters</span></div>'
        "</div>"
    )
    status_card = (
        f'<div class="card"><h3>Experiences by final status <span class="tot">{_n(len(exp_lanes))}</span>'
        f'</h3>{_status_strip(by_status)}<table class="counts status-counts">{status_rows}</table></div>'
    )
    cards = (
        status_card
        + _count_table("Drop reasons", drops, DROP_REASONS, "dr", "No drops.")
        + _count_table("Dead letters by reason", dead, DEAD_LETTER_REASONS, "dl", "No dead letters.")
        + _count_table("Decisions", by_decision, DECISIONS, "dc", "No decisions.")
        + _count_table("Decision backends", by_backend, BACKENDS, "be", "No decisions.")
    )
    return f'<section id="overview"><h2>Fleet overview</h2>{stats}<div class="cards">{cards}</div></section>'


def _status_rank(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)


# --------------------------------------------------------------------------- the swimlane chart


def _sample(items: list[tuple[int, Record]], cap: int) -> list[tuple[int, Record]]:
    """Keep at most `cap` entries: every non-drop stage first (goal and end always), drops sampled."""
    if len(items) <= cap:
        return items
    main = [it for it in items if _str(it[1], "stage") != "drop"]
    drops = [it for it in items if _str(it[1], "stage") == "drop"]
    if len(main) >= cap:
        must = [it for it in main if _str(it[1], "stage") in ("goal", "end")]
        rest = [it for it in main if _str(it[1], "stage") not in ("goal", "end")]
        chosen = must + _even(rest, max(0, cap - len(must)))
    else:
        chosen = main + _even(drops, cap - len(main))
    return sorted(chosen, key=lambda it: it[0])


def _even(items: list[tuple[int, Record]], k: int) -> list[tuple[int, Record]]:
    if k <= 0:
        return []
    if len(items) <= k:
        return items
    step = len(items) / k
    return [items[int(i * step)] for i in range(k)]


def _positions(times: Sequence[int]) -> list[float]:
    """x per mark: linear in time, equal times kept apart in sequence order, squeezed to fit."""
    n = len(times)
    if n == 0:
        return []
    span = _X1 - _X0
    tmin, tmax = times[0], times[-1]
    scale = span / (tmax - tmin) if tmax > tmin else 0.0
    xs = [_X0 + (t - tmin) * scale for t in times]
    gap = min(8.0, span / max(n - 1, 1))
    for i in range(1, n):
        xs[i] = max(xs[i], xs[i - 1] + gap)
    if xs[-1] > _X1:
        k = span / (xs[-1] - _X0)
        xs = [_X0 + (x - _X0) * k for x in xs]
    return xs


def _nice_step(duration: int) -> int:
    steps = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 15_000, 30_000, 60_000]
    steps += [120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000, 7_200_000, 21_600_000, 86_400_000]
    for s in steps:
        if duration / s <= 6:
            return s
    return max(1, duration // 6)


def _chart(lane: Lane, cap: int) -> tuple[str, int]:
    """The lane's SVG and how many marks it shows."""
    items: list[tuple[int, Record]] = []
    for i, rec in enumerate(lane.entries):
        if _str(rec, "stage") in STAGES:
            items.append((i, rec))
    shown = _sample(items, cap)
    # times: a missing at_ms borrows the previous one (sequence order keeps them apart)
    times: list[int] = []
    last = next((t for t in (_int(r, "at_ms") for _, r in shown) if t is not None), 0)
    for _, rec in shown:
        t = _int(rec, "at_ms")
        last = t if t is not None else last
        times.append(last)
    xs = _positions(times)
    kinds = [k for k in RESTING if any(i.kind == k for i in lane.states)]
    letters = [*lane.dead_letters, *lane.foreign_dead]
    rows = (*STAGES, *kinds, *(("dead letter",) if letters else ()))
    height = _TOP + _ROW * len(rows) + _AXIS
    row_y = {row: _TOP + _ROW * i + _ROW / 2 for i, row in enumerate(rows)}

    parts = [
        f'<svg class="chart" viewBox="0 0 {_W:.0f} {height:.0f}" role="img" '
        f'aria-label="timeline of {_e(lane.experience_id or lane.device_id)}">'
    ]
    for i, row in enumerate(rows):
        y = _TOP + _ROW * i
        cls = "rowlbl" if row in STAGES else "rowlbl staterow"
        parts.append(
            f'<rect class="band{i % 2}" x="0" y="{y:.0f}" width="{_W:.0f}" height="{_ROW:.0f}"/>'
            f'<text class="{cls}" x="8" y="{y + _ROW / 2 + 4:.0f}">{row.capitalize()}</text>'
        )
    # network and voice state: a band per stretch out of the resting state
    if times:
        for interval in lane.states:
            start = max(interval.start_ms, times[0])
            end = times[-1] if interval.end_ms is None else min(interval.end_ms, times[-1])
            x0 = _x_at(start, times, xs)
            x1 = max(_x_at(end, times, xs), x0 + 3.0)
            y = row_y[interval.kind] - _ROW / 2 + 2
            parts.append(
                f'<rect class="sband {_e(band_class(interval))}" x="{x0:.1f}" y="{y:.1f}" '
                f'width="{x1 - x0:.1f}" height="{_ROW - 4:.0f}" rx="3"><title>{_e(_interval_text(interval))}'
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
                f"dead letter · {_fmt_clock(at)}\n{_str(rec, 'reason_code')}: {_str(rec, 'detail')}\n"
                f"{_str(rec, 'source_topic')} [{_str(rec, 'partition')}] @{_str(rec, 'offset')}"
            )
            dl_marks.append(
                f'<rect x="{_x_at(at, times, xs) - 4:.1f}" y="-4" width="8" height="8" '
                f'transform="rotate(45 {_x_at(at, times, xs):.1f} 0)"><title>{_e(dl_tip)}</title></rect>'
            )
        parts.append(
            f'<g class="k-dead" transform="translate(0,{row_y["dead letter"]:.1f})">{"".join(dl_marks)}</g>'
        )
    # time axis
    axis_y = _TOP + _ROW * len(rows)
    parts.append(f'<line class="axis" x1="{_X0:.0f}" y1="{axis_y:.0f}" x2="{_X1:.0f}" y2="{axis_y:.0f}"/>')
    if times:
        t0, t1 = times[0], times[-1]
        step = _nice_step(max(t1 - t0, 1))
        tick = 0
        path: list[str] = []
        labels: list[str] = []
        while t0 + tick <= t1 or tick == 0:
            x = _x_at(t0 + tick, times, xs)
            path.append(f"M{x:.1f} {_TOP:.0f}V{axis_y + 4:.0f}")
            labels.append(f'<text x="{x:.1f}" y="{axis_y + 16:.0f}">+{_e(_fmt_dur(tick))}</text>')
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
        tip = [f"{stage} · {_fmt_clock(_int(rec, 'at_ms'))} (+{_fmt_dur(t - t_first)})"]
        if _str(rec, "summary"):
            tip.append(_str(rec, "summary"))
        tip.append(f"ref_id: {_str(rec, 'ref_id') or '—'}")
        if _str(rec, "drop_reason"):
            tip.append(f"drop reason: {_str(rec, 'drop_reason')}")
        if stage == "end" and _str(rec, "status"):
            tip.append(f"status: {_str(rec, 'status')}")
        title = _e("\n".join(tip))
        if stage == "end":
            cls = f"st-{_known(_str(rec, 'status'), STATUSES)}"
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


def _interval_text(interval: StateInterval) -> str:
    end = "end of input" if interval.end_ms is None else _fmt_clock(interval.end_ms)
    span = "" if interval.end_ms is None else f" ({_fmt_dur(interval.end_ms - interval.start_ms)})"
    return f"{band_what(interval)}: {_fmt_clock(interval.start_ms)} → {end}{span}"


def _x_at(t: int, times: Sequence[int], xs: Sequence[float]) -> float:
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


# --------------------------------------------------------------------------- per-lane sections


def _rendered(n: int, cap: int) -> tuple[list[int], int]:
    """Positions of the entry rows a lane's table shows, and where the "more" row goes (-1: none)."""
    if n <= cap:
        return list(range(n)), -1
    head_n = cap // 2
    tail_n = cap - head_n
    return [*range(head_n), *range(n - tail_n, n)], head_n


def _anchors(index: int, lane: Lane, cap: int) -> dict[str, str]:
    """event ID -> the element of this lane that shows it: a timeline row, or a network/voice band."""
    found: dict[str, str] = {}
    for k, interval in enumerate(lane.states):
        found.setdefault(interval.start_event, f"l{index}-s{k}")
        if interval.end_event:
            found.setdefault(interval.end_event, f"l{index}-s{k}")
    shown, _ = _rendered(len(lane.entries), cap)
    for pos in shown:
        rec = lane.entries[pos]
        if _str(rec, "stage") in ("observe", "drop", "evidence"):
            found[_str(rec, "ref_id")] = f"l{index}-e{pos}"
    return found


def _ref_link(event_id: str, anchors: Mapping[str, str]) -> str:
    target = anchors.get(event_id)
    if not event_id:
        return '<span class="muted">—</span>'
    if target is None:
        return _e(event_id)
    return f'<a class="jump" href="#{target}" data-jump="{target}">{_e(event_id)}</a>'


def _entries_table(index: int, lane: Lane, cap: int) -> str:
    entries = lane.entries
    if not entries:
        return '<p class="muted">No timeline entries.</p>'
    t0 = next((t for t in (_int(r, "at_ms") for r in entries) if t is not None), None)

    def row(pos: int) -> str:
        rec = entries[pos]
        stage = _str(rec, "stage")
        at = _int(rec, "at_ms")
        rel = f"+{_fmt_dur(at - t0)}" if at is not None and t0 is not None else ""
        note = _str(rec, "drop_reason") or (_str(rec, "status") if stage == "end" else "")
        return (
            f'<tr id="l{index}-e{pos}"><td class="mono num">{_e(_str(rec, "seq"))}</td>'
            f'<td class="mono" title="{_e(_fmt_time(at))}">{_e(_fmt_clock(at))}</td>'
            f'<td class="mono rel">{_e(rel)}</td>'
            f'<td><span class="stg k-{_known(stage, STAGES)}">{_e(stage)}</span></td>'
            f'<td class="mono id">{_e(_str(rec, "ref_id"))}</td>'
            f"<td>{_e(_str(rec, 'summary'))}</td>"
            f'<td class="mono">{_e(note)}</td></tr>'
        )

    shown, gap = _rendered(len(entries), cap)
    rows = []
    for k, pos in enumerate(shown):
        if k == gap:
            hidden = len(entries) - cap
            rows.append(
                f'<tr class="more"><td colspan="7">… {_n(hidden)} more entries not shown '
                f"(first {gap} and last {cap - gap} of {_n(len(entries))}) …</td></tr>"
            )
        rows.append(row(pos))
    return (
        '<div class="scroll"><table class="entries"><thead><tr><th>seq</th><th>time (UTC)</th><th>Δ</th>'
        "<th>stage</th><th>ref_id</th><th>summary</th><th>drop reason / status</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _capped(rows: list[str], total: int, what: str) -> str:
    more = total - len(rows)
    if more > 0:
        rows.append(f'<tr class="more"><td colspan="9">… {_n(more)} more {_e(what)} …</td></tr>')
    return "".join(rows)


def _divergence_text(div: Record) -> str:
    kind = _str(div, "kind")
    if kind == "different":
        recorded, replayed = (
            json.dumps(shown_value(div.get(k)), ensure_ascii=False) for k in ("recorded", "replayed")
        )
        return f"{_str(div, 'field')}: recorded {recorded} → replayed {replayed}"
    if kind == "not_reproduced":
        return f"recorded decision {shown_id(div.get('recorded')) or '?'} was not reproduced by the replay"
    if kind == "no_recorded_decision":
        return "no recorded decision for this trigger: the rules decided"
    if kind == "unreadable_recorded_decision":
        where = f"{_str(div, 'source_topic')} [{_str(div, 'partition')}] @{_str(div, 'offset')}"
        return f"recorded decision at {where} is unreadable ({_str(div, 'why')}): the rules decided"
    return kind or "diverged"


def _decisions_html(lane: Lane, anchors: Mapping[str, str]) -> str:
    diverged: dict[str, list[Record]] = {}
    for div in lane.divergences:
        diverged.setdefault(_str(div, "trigger_event_id"), []).append(div)
    if not lane.decisions and not diverged:
        return ""
    recs = sorted(lane.decisions, key=lambda r: _int(r, "decided_at_ms") or 0)
    rows = []
    for rec in recs[:DETAIL_ROWS_MAX]:
        budget = rec.get("budget_after")
        budget_txt = (
            " ".join(f"{k}={v}" for k, v in budget.items())
            if isinstance(budget, Mapping)
            else _str(rec, "budget_after")
        )
        decision = _str(rec, "decision")
        backend = _str(rec, "backend")
        trigger = _str(rec, "trigger_event_id")
        divs = diverged.pop(trigger, [])
        mark = ""
        if divs:
            items = "".join(f"<li>{_e(_divergence_text(d))}</li>" for d in divs)
            mark = f'<span class="badge diverged">diverged</span><ul class="divs">{items}</ul>'
        rows.append(
            f'<tr class="{"diverged" if divs else ""}" data-decision-id="{_e(_str(rec, "decision_id"))}">'
            f'<td class="mono">{_e(_fmt_clock(_int(rec, "decided_at_ms")))}</td>'
            f'<td><span class="badge dc-{_known(decision, DECISIONS)}">{_e(decision)}</span>{mark}</td>'
            f'<td class="mono">{_e(_str(rec, "reason_code"))}</td>'
            f'<td><span class="badge be-{_known(backend, BACKENDS)}">{_e(backend)}</span></td>'
            f"<td>{_e(_str(rec, 'rationale'))}</td>"
            f'<td class="mono id">{_ref_link(trigger, anchors)}</td>'
            f'<td class="mono small">{_e(budget_txt)}</td></tr>'
        )
    html = ""
    if recs:
        html = (
            f"<h4>Decisions ({_n(len(recs))})</h4>"
            '<div class="scroll"><table class="detail decisions"><thead><tr><th>time</th><th>decision</th>'
            "<th>reason</th><th>backend</th><th>rationale</th><th>trigger</th><th>budget after</th></tr>"
            f"</thead><tbody>{_capped(rows, len(recs), 'decisions')}</tbody></table></div>"
        )
    if diverged:
        items = "".join(
            f'<li class="diverged">{_ref_link(trigger, anchors)}: {_e(_divergence_text(d))}</li>'
            for trigger, divs in diverged.items()
            for d in divs
        )
        html += f'<h4>Divergences without a replayed decision</h4><ul class="divs">{items}</ul>'
    return html


def _dispatches_html(lane: Lane, anchors: Mapping[str, str]) -> str:
    if not lane.dispatches:
        return ""
    recs = sorted(lane.dispatches, key=lambda r: _int(r, "created_at_ms") or 0)
    rows = []
    for rec in recs[:DETAIL_ROWS_MAX]:
        requests = rec.get("requests")
        ops: list[str] = []
        if isinstance(requests, list):
            for req in requests:
                if isinstance(req, Mapping):
                    ops.append(f"{_str(req, 'capability')}.{_str(req, 'operation')}")
        ops_html = (
            " ".join(f'<span class="op">{_e(op)}</span>' for op in ops) or '<span class="muted">—</span>'
        )
        tts = _str(rec, "tts")
        origin = "local" if rec.get("decision_id") is None else _str(rec, "decision_id")
        rows.append(
            f'<tr><td class="mono">{_e(_fmt_clock(_int(rec, "created_at_ms")))}</td>'
            f"<td>{ops_html}</td>"
            f"<td>{_e(tts) if tts else '<span class=muted>—</span>'}</td>"
            f'<td class="mono id trig">{_ref_link(_str(rec, "trigger_event_id"), anchors)}</td>'
            f'<td class="mono small">{_e(_str(rec, "kind"))}</td>'
            f'<td class="mono id">{_e(_str(rec, "dispatch_id"))}</td>'
            f'<td class="mono id">{_e(origin)}</td></tr>'
        )
    return (
        f"<h4>Dispatches ({_n(len(recs))})</h4>"
        '<div class="scroll"><table class="detail dispatches"><thead><tr><th>time</th><th>requests</th>'
        "<th>tts</th><th>trigger</th><th>kind</th><th>dispatch_id</th><th>decision</th></tr></thead>"
        f"<tbody>{_capped(rows, len(recs), 'dispatches')}</tbody></table></div>"
    )


def _dead_letters_html(lane: Lane) -> str:
    recs = [(r, False) for r in lane.dead_letters] + [(r, True) for r in lane.foreign_dead]
    total = lane.n_dead + lane.n_foreign
    if not recs:
        return ""
    recs.sort(key=lambda rf: _int(rf[0], "received_at_ms") or 0)
    rows = []
    for rec, foreign in recs[:DETAIL_ROWS_MAX]:
        reason = _str(rec, "reason_code")
        paths = rec.get("offending_paths")
        paths_txt = ", ".join(str(p) for p in paths) if isinstance(paths, list) else ""
        source = f"{_str(rec, 'source_topic')} [{_str(rec, 'partition')}] @{_str(rec, 'offset')}"
        note = f" (from device {shown_id(rec.get('key'))}, naming this experience)" if foreign else ""
        # the payload copy is never shown: the source topic, partition and offset point to the original
        rows.append(
            f'<tr class="dlrow" data-reason="{_e(reason)}">'
            f'<td class="mono">{_e(_fmt_clock(_int(rec, "received_at_ms")))}</td>'
            f'<td><span class="badge dl-{_known(reason, DEAD_LETTER_REASONS)}">{_e(reason)}</span></td>'
            f'<td class="mono small">{_e(source)}</td>'
            f'<td class="mono id">{_e(shown_id(rec.get("event_id")) or "—")}</td>'
            f"<td>{_e(_str(rec, 'detail'))}{_e(note)}</td>"
            f'<td class="mono small">{_e(paths_txt or "—")}</td></tr>'
        )
    return (
        f"<h4>Dead letters ({_n(total)})</h4>"
        '<div class="scroll"><table class="detail deadletters"><thead><tr><th>received</th><th>reason</th>'
        "<th>source (topic [partition] @offset)</th><th>event_id</th><th>detail</th>"
        "<th>offending paths</th></tr></thead>"
        f"<tbody>{_capped(rows, total, 'dead letters')}</tbody></table></div>"
    )


def _states_html(index: int, lane: Lane) -> str:
    if not lane.states:
        return ""
    items = "".join(
        f'<li id="l{index}-s{k}" class="st-item {_e(band_class(i))}">'
        f"<b>{_e(_interval_text(i))}</b> "
        f'<span class="mono id">{_e(i.start_event)}{" → " + _e(i.end_event) if i.end_event else ""}</span>'
        "</li>"
        for k, i in enumerate(lane.states)
    )
    return f'<h4>Network and voice state</h4><ul class="states">{items}</ul>'


def _evidence_html(lane: Lane) -> str:
    end_at = next((i for i, r in enumerate(lane.entries) if _str(r, "stage") == "end"), None)
    upto = lane.entries if end_at is None else lane.entries[:end_at]
    evidence = [r for r in upto if _str(r, "stage") == "evidence"]
    if end_at is None:
        title = "Evidence so far (not closed)"
    else:
        end = lane.entries[end_at]
        ended = f"{_str(end, 'status') or '?'} at {_fmt_clock(_int(end, 'at_ms'))}"
        title = f"Evidence that closed it (ended {ended})"
    if not evidence:
        return f'<h4>{_e(title)}</h4><p class="muted">No evidence entries.</p>'
    more = len(evidence) - DETAIL_ROWS_MAX
    items = "".join(
        f'<li><span class="mono">{_e(_fmt_clock(_int(r, "at_ms")))}</span> {_e(_str(r, "summary"))} '
        f'<span class="mono id">{_e(_str(r, "ref_id"))}</span></li>'
        for r in evidence[-DETAIL_ROWS_MAX:]
    )
    note = f'<li class="muted">… {_n(more)} earlier evidence entries …</li>' if more > 0 else ""
    return f'<h4>{_e(title)}</h4><ul class="evidence">{note}{items}</ul>'


@dataclass(frozen=True)
class _Axis:
    """The shared time axis: every lane's strip on one linear scale."""

    t0: int
    t1: int

    def x(self, t: int) -> float:
        if self.t1 <= self.t0:
            return _X0
        return _X0 + (_X1 - _X0) * (min(max(t, self.t0), self.t1) - self.t0) / (self.t1 - self.t0)


def _shared_strip(lane: Lane, axis: _Axis, cap: int) -> str:
    """One row per lane on the shared axis: the lane's span, its bands, decisions, dispatches,
    drops and dead letters."""
    window = lane.window()
    if window is None:
        return ""
    lo, hi = window
    h = 18.0
    parts = [
        f'<svg class="shared" viewBox="0 0 {_W:.0f} {h:.0f}" role="img" aria-label="on the shared axis">'
    ]
    parts.append(
        f'<rect class="span" x="{axis.x(lo):.1f}" y="7" width="{max(axis.x(hi) - axis.x(lo), 2):.1f}" '
        f'height="4" rx="2"><title>{_e(_fmt_time(lo))} → {_e(_fmt_time(hi))}</title></rect>'
    )
    for i in lane.states:
        x0 = axis.x(max(i.start_ms, lo))
        x1 = axis.x(hi if i.end_ms is None else min(i.end_ms, hi))
        parts.append(
            f'<rect class="sband {_e(band_class(i))}" x="{x0:.1f}" y="2" '
            f'width="{max(x1 - x0, 2):.1f}" height="14"><title>{_e(_interval_text(i))}</title></rect>'
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
            f'<circle class="{cls}" cx="{axis.x(at):.1f}" cy="9" r="3.5"><title>{_e(tip)}</title></circle>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _strip_size(lane: Lane) -> int:
    return lane.strip_marks


class _LaneData:
    """The lane list, and the bodies and strips of its collapsed lanes, packed: the list deflated as
    one stream ("lz-list"), the bodies and strips in deflated chunks ("lz-K"), all base64-encoded.

    It holds only compressed data and the chunk being filled (at most ~``LANE_CHUNK_BYTES`` of HTML).
    """

    def __init__(self, chunk_bytes: int = LANE_CHUNK_BYTES) -> None:
        self.chunk_bytes = chunk_bytes
        self.encoded: list[str] = []
        self._current: list[tuple[str, str]] = []
        self._size = 0
        self._list = zlib.compressobj(9, zlib.DEFLATED, -15)
        self._listed: list[bytes] = []

    def append_list(self, html: str) -> None:
        """Append to the lane list (the page's script puts it in place when it starts)."""
        self._listed.append(self._list.compress(html.encode("utf-8")))

    def add(self, strip: str, body: str) -> tuple[int, int]:
        """Store a lane's strip and body; return its (chunk, slot)."""
        where = (len(self.encoded), len(self._current))
        self._current.append((strip, body))
        self._size += len(strip) + len(body)
        if self._size >= self.chunk_bytes:
            self.flush()
        return where

    def flush(self) -> None:
        if not self._current:
            return
        data = json.dumps(self._current, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        packer = zlib.compressobj(9, zlib.DEFLATED, -15)
        self.encoded.append(base64.b64encode(packer.compress(data) + packer.flush()).decode("ascii"))
        self._current, self._size = [], 0

    def html(self) -> str:
        self.flush()
        self._listed.append(self._list.flush())
        listed = base64.b64encode(b"".join(self._listed)).decode("ascii")
        self._listed = []
        return f'<script type="{LANE_DATA_TYPE}" id="lz-list">{listed}</script>' + "".join(
            f'<script type="{LANE_DATA_TYPE}" id="lz-{k}">{chunk}</script>'
            for k, chunk in enumerate(self.encoded)
        )


#: the type of the (never executed) script elements that carry the lanes' data
LANE_DATA_TYPE: Final = "application/x-guardian-lanes"


def decode_lane_list(block: str) -> str:
    """The ``lz-list`` block's HTML (the lane list): what the page's script does, in Python."""
    return zlib.decompress(base64.b64decode(block), -15).decode("utf-8")


def decode_lane_data(chunk: str) -> list[tuple[str, str]]:
    """One ``lz-K`` chunk's lanes as (strip, body) HTML: what the page's script does, in Python."""
    data = json.loads(zlib.decompress(base64.b64decode(chunk), -15).decode("utf-8"))
    return [(str(strip), str(body)) for strip, body in data]


def _lane_html(
    index: int,
    lane: Lane,
    table_cap: int,
    svg_cap: int,
    strip_cap: int,
    open_: bool,
    axis: _Axis,
    packed: _LaneData | None = None,
) -> str:
    """The lane's section; with ``packed``, its body and strip go there and render on demand."""
    status = lane.status
    times = [t for t in (_int(r, "at_ms") for r in lane.entries) if t is not None]
    span = f"{_fmt_time(min(times))} · {_fmt_dur(max(times) - min(times))}" if times else "no timeline"
    drop_reasons = sorted({_str(r, "drop_reason") for r in lane.entries if _str(r, "stage") == "drop"})
    drops = sum(1 for r in lane.entries if _str(r, "stage") == "drop")
    dead = lane.n_dead + lane.n_foreign
    if lane.is_experience:
        name = f'<span class="mono exp">{_e(lane.experience_id)}</span>'
        badge = f'<span class="badge st-{_known(status, STATUSES)}">{_e(status)}</span>'
    else:
        name = '<span class="noexp">no experience</span>'
        badge = '<span class="badge st-other">unscoped</span>'
    if lane.n_div:
        badge += f'<span class="badge diverged">{_plural(lane.n_div, "divergence")}</span>'
    if dead:
        badge += f'<span class="badge deadcount">{_plural(dead, "dead letter")}</span>'
    meta = (
        f"{_n(len(lane.entries))} {'entry' if len(lane.entries) == 1 else 'entries'} · "
        f"{_plural(drops, 'drop')} · {_plural(len(lane.decisions), 'decision')} · "
        f"{_n(len(lane.dispatches))} {'dispatch' if len(lane.dispatches) == 1 else 'dispatches'} · "
        f"{_plural(dead, 'dead letter')} · {span}"
    )
    summary = (
        f"<summary>{name}"
        f'<button type="button" class="dev mono" data-filter-device="{_e(lane.device_id)}" '
        f'title="show only this device">{_e(lane.device_id or "?")}</button>'
        f'{badge}<span class="meta">{_e(meta)}</span>'
    )
    strip = _shared_strip(lane, axis, strip_cap)
    anchors = _anchors(index, lane, table_cap)
    body: list[str] = []
    if lane.entries:
        chart, shown = _chart(lane, svg_cap)
        body.append(chart)
        charted = sum(1 for r in lane.entries if _str(r, "stage") in STAGES)
        if shown < charted:
            body.append(
                f'<p class="cap">Chart shows {_n(shown)} of {_n(charted)} entries: every goal, observe, '
                "decide, act, evidence and end entry is kept first; drops are sampled evenly.</p>"
            )
    facts = _states_html(index, lane) + _dead_letters_html(lane)
    if lane.is_experience:
        facts += _decisions_html(lane, anchors) + _dispatches_html(lane, anchors) + _evidence_html(lane)
    if facts:
        body.append(f'<div class="facts">{facts}</div>')
    body.append(
        f'<details class="tbl"{" open" if open_ else ""}><summary>Timeline entries '
        f"({_n(len(lane.entries))})</summary>{_entries_table(index, lane, table_cap)}</details>"
    )

    def words(values: Iterable[str]) -> str:
        return _e(" ".join(sorted({v for v in values if v})))

    body_html = "".join(body)
    where = ""
    if packed is not None:
        chunk, slot = packed.add(strip, body_html)
        strip, body_html = "", ""
        where = f' data-chunk="{chunk}" data-slot="{slot}"'

    return (
        f'<section class="lane" id="lane-{index}" data-experience="{_e(lane.experience_id)}" '
        f'data-device="{_e(lane.device_id)}" data-status="{_e(status)}" data-order="{index}" '
        f'data-sev="{lane.severity()}" data-decisions="{words(_str(r, "decision") for r in lane.decisions)}" '
        f'data-backends="{words(_str(r, "backend") for r in lane.decisions)}" '
        f'data-drops="{words(drop_reasons)}" '
        f'data-dead="{words(lane.dead_values)}" data-diverged="{lane.n_div}"{where}>'
        f'<details class="lanebox"{" open" if open_ else ""}>{summary}{strip}</summary>'
        f'<div class="lanebody">{body_html}</div></details></section>'
    )


# --------------------------------------------------------------------------- the page

_CSS: Final = """
:root{--fg:#1f2937;--muted:#6b7280;--line:#e5e7eb;--bg:#f7f8fa;--card:#fff;
--goal:#4f46e5;--observe:#0284c7;--decide:#d97706;--act:#7c3aed;--evidence:#059669;--end:#334155;--drop:#dc2626;
--completed:#15803d;--aborted:#c2410c;--returned:#0e7490;--superseded:#7c3aed;--failed:#b91c1c;--active:#2563eb;--blocked:#a16207;
--other:#9ca3af}
*{box-sizing:border-box}
html{background:var(--bg)}
body{margin:0;font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Noto Sans CJK KR","Noto Sans KR",
"Apple SD Gothic Neo","Malgun Gothic",sans-serif;color:var(--fg)}
[hidden]{display:none!important}
.mono,code{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,"DejaVu Sans Mono",monospace;
font-size:12.5px}
header{background:#fff;border-bottom:1px solid var(--line);padding:18px 28px 14px}
header h1{margin:0;font-size:22px;font-weight:650}
header .note{color:var(--muted);margin-top:4px}
main{padding:8px 28px 40px;max-width:1500px}
h2{font-size:17px;margin:22px 0 10px}
h3{font-size:12px;margin:0 0 8px;text-transform:uppercase;letter-spacing:.03em;color:#374151}
h3 .tot{float:right;color:var(--muted);font-weight:500}
h4{font-size:13px;margin:12px 0 6px;color:#374151}
.muted{color:var(--muted)}
.stats{display:flex;flex-wrap:wrap;gap:10px;margin-bottom:12px}
.stat{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:10px 16px;min-width:120px}
.stat b{display:block;font-size:22px;font-weight:650}
.stat span{color:var(--muted)}
.stat small{display:block;color:var(--muted);font-size:11px}
.cards{display:grid;grid-template-columns:repeat(auto-fill,minmax(220px,1fr));gap:12px}
.card{background:var(--card);border:1px solid var(--line);border-radius:8px;padding:12px 14px}
table{border-collapse:collapse}
.counts{width:100%}
.counts td{padding:2px 4px;vertical-align:middle}
.counts td.num{text-align:right;width:4em;font-variant-numeric:tabular-nums}
.counts td.barcell{width:45%}
.bar{display:block;height:9px;border-radius:3px;background:#94a3b8}
.strip{display:flex;height:12px;border-radius:4px;overflow:hidden;margin:0 0 8px;background:var(--line)}
.strip .seg{display:block;height:100%}
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;color:#fff;background:var(--other);
white-space:nowrap}
.st-completed{background:var(--completed);fill:var(--completed)}
.st-aborted{background:var(--aborted);fill:var(--aborted)}
.st-returned{background:var(--returned);fill:var(--returned)}
.st-superseded{background:var(--superseded);fill:var(--superseded)}
.st-failed{background:var(--failed);fill:var(--failed)}
.st-blocked{background:var(--blocked);fill:var(--blocked)}
.st-active{background:var(--active);fill:var(--active)}
.st-other{background:var(--other);fill:var(--other)}
.dr-stale,.dr-clock_skew,.dr-out_of_order,.dr-duplicate{background:#94a3b8}
.dr-debounced,.dr-uncorrelated,.dr-not_subscribed{background:#60a5fa}
.dr-budget_exhausted,.dr-winding_down,.dr-stale_etag{background:#f59e0b}
.dr-plan_rejected{background:#dc2626}
.dr-condition_not_met{background:#a16207}
.dl-privacy_violation,.dl-cross_device{background:#dc2626}.dl-fact_invalid,.dl-plan_invalid{background:#f59e0b}
.dc-continue{background:#64748b}.dc-ask_user{background:#0891b2}.dc-replan{background:#7c3aed}
.dc-abort{background:#c2410c}.dc-return_to_station{background:#0e7490}.dc-complete{background:#15803d}
.be-rules{background:#475569}.be-gemini{background:#2563eb}.be-fallback{background:#d97706}
.filters{position:sticky;top:0;z-index:5;background:rgba(247,248,250,.96);backdrop-filter:blur(2px);
padding:10px 0;border-bottom:1px solid var(--line);display:flex;gap:10px;align-items:center;flex-wrap:wrap}
.filters input,.filters select,.filters button{font:inherit;padding:5px 8px;border:1px solid #cbd5e1;
border-radius:6px;background:#fff}
.filters input[type=search]{width:280px}
.lane .exp,.banner .mono{overflow-wrap:anywhere}
.filters .count{color:var(--muted);margin-left:auto}
.legend{display:flex;gap:12px;flex-wrap:wrap;color:var(--muted);font-size:12px;margin:8px 0 4px}
.legend i{display:inline-block;width:10px;height:10px;border-radius:50%;margin-right:4px;vertical-align:-1px}
.lane{background:var(--card);border:1px solid var(--line);border-radius:8px;margin:10px 0}
.lanebox>summary{cursor:pointer;padding:9px 14px;display:flex;gap:10px;align-items:center;flex-wrap:wrap;
list-style-position:inside}
.lanebox[open]>summary{border-bottom:1px solid var(--line)}
.lane .exp{font-weight:600;font-size:13.5px}
.lane .noexp{font-style:italic;color:var(--muted)}
.lane .dev{border:1px solid #cbd5e1;background:#f1f5f9;border-radius:5px;padding:0 6px;cursor:pointer;
color:#334155}
.lane .meta{color:var(--muted);font-size:12px}
.lanebody{padding:8px 14px 12px}
.packed>.lane{content-visibility:auto;contain-intrinsic-size:auto 44px}
svg.chart{display:block;width:100%;height:auto;font-family:system-ui,sans-serif}
.band0{fill:#fafafa}.band1{fill:#f3f4f6}
.rowlbl{font-size:11px;fill:#4b5563}
.axis{stroke:#9ca3af;stroke-width:1}
.tick{stroke:#e5e7eb;stroke-width:1;fill:none}
.ticklbl{font-size:10px;fill:#6b7280;text-anchor:middle}
.flow{fill:none;stroke:#94a3b8;stroke-width:1;stroke-dasharray:3 2}
svg circle{stroke:#fff;stroke-width:1.2}
g.k-end circle{stroke:#111827;stroke-width:1.5}
.k-goal{fill:var(--goal)}.k-observe{fill:var(--observe)}.k-decide{fill:var(--decide)}.k-act{fill:var(--act)}
.k-evidence{fill:var(--evidence)}.k-end{fill:var(--end)}.k-drop{fill:var(--drop)}
g.k-drop circle{fill:#fff;stroke:var(--drop);stroke-width:1.6}
.stg{display:inline-block;padding:0 6px;border-radius:4px;font-size:11.5px;color:#fff;background:var(--other)}
.stg.k-goal{background:var(--goal)}.stg.k-observe{background:var(--observe)}.stg.k-decide{background:var(--decide)}
.stg.k-act{background:var(--act)}.stg.k-evidence{background:var(--evidence)}.stg.k-end{background:var(--end)}
.stg.k-drop{background:#fee2e2;color:#991b1b}
.cap{color:#92400e;background:#fffbeb;border:1px solid #fde68a;border-radius:6px;padding:4px 8px;
font-size:12px}
.facts{display:block}
.detail,.entries{width:100%;font-size:12.5px}
.detail th,.entries th{text-align:left;font-weight:600;color:#4b5563;border-bottom:1px solid var(--line);
padding:3px 6px;background:#f9fafb}
.detail td,.entries td{border-bottom:1px solid #f1f5f9;padding:3px 6px;vertical-align:top}
.entries td.num{text-align:right}
.entries .rel{color:var(--muted)}
td.id{color:#475569;word-break:break-all}
.small{font-size:11.5px;color:#475569}
.op{display:inline-block;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px;background:#ede9fe;
color:#5b21b6;border-radius:4px;padding:0 5px;margin:0 3px 2px 0}
tr.more td{color:#92400e;background:#fffbeb;text-align:center;font-style:italic}
ul.evidence{margin:0;padding-left:18px}
ul.evidence li{margin:1px 0}
details.tbl{margin-top:10px}
details.tbl>summary{cursor:pointer;color:#374151;font-weight:600;font-size:13px}
footer{color:var(--muted);font-size:12px;padding:0 28px 30px}
.st-blocked{background:#a16207;fill:#a16207}
.scroll{overflow-x:auto;max-width:100%}
.banner{margin-top:10px;padding:8px 12px;border-radius:6px;border:1px solid #bfdbfe;background:#eff6ff}
.banner.mode-recorded{border-color:#c7d2fe;background:#eef2ff}
.banner.mode-model{border-color:#fde68a;background:#fffbeb}
.badge.diverged{background:#be185d;margin-left:4px}.badge.deadcount{background:#7f1d1d}
tr.diverged td{background:#fdf2f8}
ul.divs{margin:2px 0 0;padding-left:18px;font-size:12px;color:#9d174d}
.sband{opacity:.85}
.sb-network-disconnected{fill:#dc2626;background:#dc2626}
.sb-network-reconnecting{fill:#f59e0b;background:#f59e0b}
.sb-voice-active{fill:#8b5cf6;background:#8b5cf6}
.sb-voice-other,.sb-network-other{fill:#64748b;background:#64748b}
.sb-network-flapping{fill:#be185d;background:#be185d}
.sb-voice-flapping{fill:#5b21b6;background:#5b21b6}
.rowlbl.staterow{font-style:italic}
ul.states{margin:0;padding-left:0;list-style:none}
ul.states li{margin:2px 0;padding:2px 8px;border-radius:4px;color:#fff}
ul.states li .id{color:#f8fafc}
.legend i.sq{border-radius:2px}
svg.shared{display:none;width:100%;height:auto;flex-basis:100%}
html.shared-axis svg.shared{display:block}
svg.shared .span{fill:#cbd5e1}
svg.shared circle{stroke:none}
svg.shared .k-dead,g.k-dead rect{fill:#7f1d1d}
svg.ruler{flex-basis:100%;padding:0 15px}
.jumped{outline:2px solid #f59e0b;outline-offset:1px}
a.jump{color:#1d4ed8}
.chk{white-space:nowrap;color:#374151}
@media (max-width:640px){
header{padding:12px 12px 10px}
main{padding:6px 10px 30px}
footer{padding:0 12px 20px}
.filters{position:static}
.filters input[type=search],.filters select{width:100%}
.filters .count{margin-left:0}
.cards{grid-template-columns:1fr}
.stat{min-width:0;flex:1 1 40%}
.lanebox>summary{padding:8px 10px}
svg.ruler{padding:0 11px}
.lanebody{padding:6px 8px 10px}
}
"""

_JS: Final = """
(function () {
  "use strict";
  var root = document.documentElement;
  function byId(id) { return document.getElementById(id); }
  function unpack(id) {
    var bin = atob(byId(id).textContent), bytes = new Uint8Array(bin.length), i;
    for (i = 0; i < bin.length; i += 1) { bytes[i] = bin.charCodeAt(i); }
    return new TextDecoder("utf-8").decode(inflate(bytes));
  }
  var list = byId("lane-list");
  // a packed lane list is put in place first: the lanes are then the page's like any others
  if (byId("lz-list")) { list.innerHTML = unpack("lz-list"); }
  var lanes = Array.prototype.slice.call(document.querySelectorAll("section.lane"));
  var text = byId("f-text"), count = byId("f-count"), sort = byId("f-sort"), shared = byId("f-shared");
  // hash key -> [select, lane attribute, attribute holds several space-separated values]
  var selects = {
    device: [byId("f-device"), "data-device", false],
    status: [byId("f-status"), "data-status", false],
    decision: [byId("f-decision"), "data-decisions", true],
    backend: [byId("f-backend"), "data-backends", true],
    drop: [byId("f-drop"), "data-drops", true],
    dead: [byId("f-dead"), "data-dead", true]
  };
  var keys = Object.keys(selects);
  // raw DEFLATE (RFC 1951) decoder, after zlib's puff.c: synchronous, so a lane renders in the same task
  function inflate(src) {
    var out = new Uint8Array(src.length * 8 + 1024), outLen = 0, pos = 0, bitBuf = 0, bitCnt = 0;
    function need(n) {
      while (bitCnt < n) {
        if (pos >= src.length) { throw new Error("lane data truncated"); }
        bitBuf |= src[pos++] << bitCnt; bitCnt += 8;
      }
    }
    function bits(n) {
      need(n);
      var v = bitBuf & ((1 << n) - 1);
      bitBuf >>>= n; bitCnt -= n;
      return v;
    }
    function room(n) {
      if (outLen + n <= out.length) { return; }
      var size = out.length * 2;
      while (size < outLen + n) { size *= 2; }
      var bigger = new Uint8Array(size);
      bigger.set(out.subarray(0, outLen));
      out = bigger;
    }
    function huff(lengths, n) {
      var count = new Uint16Array(16), offs = new Uint16Array(16), sym = new Uint16Array(n), i;
      for (i = 0; i < n; i += 1) { count[lengths[i]] += 1; }
      count[0] = 0;
      for (i = 1; i < 16; i += 1) { offs[i] = offs[i - 1] + count[i - 1]; }
      for (i = 0; i < n; i += 1) { if (lengths[i]) { sym[offs[lengths[i]]++] = i; } }
      return {count: count, sym: sym};
    }
    function decode(h) {
      var code = 0, first = 0, index = 0, len, c;
      for (len = 1; len < 16; len += 1) {
        code |= bits(1);
        c = h.count[len];
        if (code - c < first) { return h.sym[index + (code - first)]; }
        index += c; first += c; first <<= 1; code <<= 1;
      }
      throw new Error("bad lane data");
    }
    var LBASE = [3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31, 35, 43, 51, 59, 67, 83, 99, 115,
      131, 163, 195, 227, 258];
    var LEXT = [0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0];
    var DBASE = [1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193, 257, 385, 513, 769, 1025, 1537,
      2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577];
    var DEXT = [0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12,
      13, 13];
    var ORDER = [16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15];
    var fixedL = null, fixedD = null;
    function codes(lencode, distcode) {
      var symbol, len, dist, i;
      for (;;) {
        symbol = decode(lencode);
        if (symbol < 256) { room(1); out[outLen++] = symbol; continue; }
        if (symbol === 256) { return; }
        symbol -= 257;
        if (symbol >= 29) { throw new Error("bad lane data"); }
        len = LBASE[symbol] + bits(LEXT[symbol]);
        symbol = decode(distcode);
        if (symbol >= 30) { throw new Error("bad lane data"); }
        dist = DBASE[symbol] + bits(DEXT[symbol]);
        if (dist > outLen) { throw new Error("bad lane data"); }
        room(len);
        for (i = 0; i < len; i += 1) { out[outLen] = out[outLen - dist]; outLen += 1; }
      }
    }
    var last, type, i, n;
    do {
      last = bits(1);
      type = bits(2);
      if (type === 0) {
        bitBuf = 0; bitCnt = 0;
        if (pos + 4 > src.length) { throw new Error("lane data truncated"); }
        n = src[pos] | (src[pos + 1] << 8);
        pos += 4;
        if (pos + n > src.length) { throw new Error("lane data truncated"); }
        room(n);
        out.set(src.subarray(pos, pos + n), outLen);
        outLen += n; pos += n;
      } else if (type === 1) {
        if (fixedL === null) {
          var l = new Uint8Array(288);
          for (i = 0; i < 144; i += 1) { l[i] = 8; }
          for (; i < 256; i += 1) { l[i] = 9; }
          for (; i < 280; i += 1) { l[i] = 7; }
          for (; i < 288; i += 1) { l[i] = 8; }
          fixedL = huff(l, 288);
          var d = new Uint8Array(30);
          for (i = 0; i < 30; i += 1) { d[i] = 5; }
          fixedD = huff(d, 30);
        }
        codes(fixedL, fixedD);
      } else if (type === 2) {
        var nlen = bits(5) + 257, ndist = bits(5) + 1, ncode = bits(4) + 4;
        var lengths = new Uint8Array(320);
        for (i = 0; i < ncode; i += 1) { lengths[ORDER[i]] = bits(3); }
        for (; i < 19; i += 1) { lengths[ORDER[i]] = 0; }
        var lencode = huff(lengths, 19);
        lengths = new Uint8Array(320);
        var index = 0, symbol, len, prev;
        while (index < nlen + ndist) {
          symbol = decode(lencode);
          if (symbol < 16) { lengths[index++] = symbol; continue; }
          len = 0;
          if (symbol === 16) {
            if (index === 0) { throw new Error("bad lane data"); }
            prev = lengths[index - 1];
            symbol = 3 + bits(2);
            len = prev;
          } else if (symbol === 17) {
            symbol = 3 + bits(3);
          } else {
            symbol = 11 + bits(7);
          }
          if (index + symbol > nlen + ndist) { throw new Error("bad lane data"); }
          while (symbol--) { lengths[index++] = len; }
        }
        codes(huff(lengths.subarray(0, nlen), nlen), huff(lengths.subarray(nlen, nlen + ndist), ndist));
      } else {
        throw new Error("bad lane data");
      }
    } while (!last);
    return out.subarray(0, outLen);
  }
  // lanes drawn on demand: data-chunk / data-slot name their (strip, body) in a "lz-K" data block
  var chunks = {}, recent = [];
  function chunk(k) {
    if (!chunks[k]) {
      chunks[k] = JSON.parse(unpack("lz-" + k));
      recent.push(k);
      if (recent.length > 4) { delete chunks[recent.shift()]; }
    }
    return chunks[k];
  }
  function packed(lane, part, flag) {
    var k = lane.getAttribute("data-chunk");
    if (k === null || lane.hasAttribute(flag)) { return null; }
    lane.setAttribute(flag, "");
    return chunk(k)[Number(lane.getAttribute("data-slot"))][part];
  }
  function drawBody(lane) {
    var html = packed(lane, 1, "data-drawn");
    if (html !== null) { lane.querySelector(".lanebody").innerHTML = html; }
  }
  function drawStrip(lane) {
    var html = packed(lane, 0, "data-strip");
    if (html) { lane.querySelector("details.lanebox > summary").insertAdjacentHTML("beforeend", html); }
  }
  var onDemand = lanes.some(function (lane) { return lane.hasAttribute("data-chunk"); });
  var seen = null;
  if (onDemand) {
    list.addEventListener("toggle", function (ev) {
      var box = ev.target;
      if (box.classList && box.classList.contains("lanebox") && box.open) { drawBody(box.parentNode); }
    }, true);
    if (window.IntersectionObserver) {
      seen = new IntersectionObserver(function (entries) {
        if (!shared.checked) { return; }
        entries.forEach(function (en) { if (en.isIntersecting) { drawStrip(en.target); } });
      }, {rootMargin: "400px 0px"});
    }
  }
  // (re)observing reports each lane's current visibility, so the strips in view are drawn
  function watchStrips() {
    if (!seen) {
      if (onDemand && shared.checked) {
        lanes.forEach(function (lane) { if (!lane.hidden) { drawStrip(lane); } });
      }
      return;
    }
    seen.disconnect();
    if (shared.checked) { lanes.forEach(function (lane) { if (!lane.hidden) { seen.observe(lane); } }); }
  }
  function matches(lane, attr, value, multi) {
    var v = lane.getAttribute(attr) || "";
    return multi ? (" " + v + " ").indexOf(" " + value + " ") >= 0 : v === value;
  }
  function num(lane, attr) { return Number(lane.getAttribute(attr)) || 0; }
  var ordered = "time";
  function apply() {
    var q = text.value.trim().toLowerCase(), shown = 0;
    lanes.forEach(function (lane) {
      var e = lane.getAttribute("data-experience") || "";
      var ld = lane.getAttribute("data-device") || "";
      var ok = !q || e.toLowerCase().indexOf(q) >= 0 || ld.toLowerCase().indexOf(q) >= 0;
      keys.forEach(function (k) {
        var s = selects[k];
        if (ok && s[0].value) { ok = matches(lane, s[1], s[0].value, s[2]); }
      });
      if (lane.hidden === ok) { lane.hidden = !ok; }
      if (ok) { shown += 1; }
    });
    var bySeverity = sort.value === "severity";
    // the lanes are moved only when the order changes (they start in time order)
    if (bySeverity !== (ordered === "severity")) {
      lanes.slice().sort(function (a, b) {
        var d = bySeverity ? num(a, "data-sev") - num(b, "data-sev") : 0;
        if (d !== 0) { return d; }
        return num(a, "data-order") - num(b, "data-order");
      }).forEach(function (lane) { list.appendChild(lane); });
      ordered = bySeverity ? "severity" : "time";
    }
    root.classList.toggle("shared-axis", shared.checked);
    watchStrips();
    count.textContent = shown + " of " + lanes.length + " lanes shown";
    var p = new URLSearchParams();
    if (q) { p.set("q", text.value.trim()); }
    keys.forEach(function (k) { if (selects[k][0].value) { p.set(k, selects[k][0].value); } });
    if (bySeverity) { p.set("sort", "severity"); }
    if (shared.checked) { p.set("axis", "shared"); }
    var h = p.toString();
    if (history.replaceState) { history.replaceState(null, "", h ? "#" + h : location.pathname); }
  }
  function setSelect(sel, value) {
    sel.value = "";
    for (var i = 0; i < sel.options.length; i += 1) {
      if (sel.options[i].value === value) { sel.value = value; return; }
    }
  }
  function fromHash() {
    var p = new URLSearchParams(location.hash.replace(/^#/, ""));
    text.value = p.get("q") || "";
    keys.forEach(function (k) { setSelect(selects[k][0], p.get(k) || ""); });
    setSelect(sort, p.get("sort") || "time");
    shared.checked = p.get("axis") === "shared";
  }
  // an element of a lane's body ("l<lane>-…"), drawing that lane first if it is drawn on demand
  function target(id) {
    var el = byId(id), m = /^l(\\d+)-/.exec(id), lane = m ? byId("lane-" + m[1]) : null;
    if (!el && lane) { drawBody(lane); el = byId(id); }
    return el;
  }
  function jump(id) {
    var el = target(id);
    if (!el) { return false; }
    for (var n = el.parentNode; n; n = n.parentNode) {
      if (n.tagName === "DETAILS") { n.open = true; }
      if (n.tagName === "SECTION" && n.hidden) { n.hidden = false; }
    }
    var old = document.querySelector(".jumped");
    if (old) { old.classList.remove("jumped"); }
    el.classList.add("jumped");
    el.scrollIntoView({block: "center"});
    return true;
  }
  function openAll(open) {
    lanes.forEach(function (lane) {
      if (lane.hidden) { return; }
      var box = lane.querySelector("details.lanebox");
      if (box) { box.open = open; }
    });
  }
  var timer = null;
  text.addEventListener("input", function () { clearTimeout(timer); timer = setTimeout(apply, 120); });
  keys.forEach(function (k) { selects[k][0].addEventListener("change", apply); });
  sort.addEventListener("change", apply);
  shared.addEventListener("change", apply);
  byId("f-reset").addEventListener("click", function () {
    text.value = ""; keys.forEach(function (k) { selects[k][0].value = ""; });
    sort.value = "time"; shared.checked = false; apply();
  });
  byId("f-expand").addEventListener("click", function () { openAll(true); });
  byId("f-collapse").addEventListener("click", function () { openAll(false); });
  document.addEventListener("click", function (ev) {
    var t = ev.target;
    if (!t || !t.getAttribute) { return; }
    if (t.getAttribute("data-filter-device") !== null) {
      ev.preventDefault();
      setSelect(selects.device[0], t.getAttribute("data-filter-device"));
      apply();
    } else if (t.getAttribute("data-jump") !== null) {
      if (jump(t.getAttribute("data-jump"))) { ev.preventDefault(); }
    }
  });
  function route() {
    var h = location.hash.replace(/^#/, "");
    if (h && h.indexOf("=") < 0 && target(h)) { jump(h); return; }
    fromHash(); apply();
  }
  window.addEventListener("hashchange", route);
  // a link to an element ("#l2-e5") survives the filters writing their state into the hash
  var first = location.hash.replace(/^#/, "");
  fromHash();
  apply();
  if (first && first.indexOf("=") < 0 && target(first)) { jump(first); }
  root.setAttribute("data-js", "ready");
  // when the page was ready, in ms since navigation started (what the report's bench reads)
  root.setAttribute("data-ready-ms", String(Math.round(window.performance ? performance.now() : 0)));
}());
"""

# Counts what the CSP blocked (a browser test asserts zero); registered before anything loads.
_PROBE_JS: Final = (
    'document.addEventListener("securitypolicyviolation",function(){var r=document.documentElement;'
    'r.setAttribute("data-blocked",String((Number(r.getAttribute("data-blocked"))||0)+1));});'
)

# Nothing may leave the page: no fetch, no image, no font, no frame.
_CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)


def _options(values: Iterable[str], order: Sequence[str]) -> str:
    present = set(values)
    keys = [k for k in order if k in present] + sorted(k for k in present if k not in order)
    return "".join(f'<option value="{_e(k)}">{_e(k)}</option>' for k in keys if k)


def _filters(lanes: Sequence[Lane], ruler: str) -> str:
    """The sticky bar of filters and order, with the shared time axis' ruler (shown in that mode)."""
    devices = sorted({lane.device_id for lane in lanes if lane.device_id})
    statuses = sorted({lane.status for lane in lanes}, key=lambda s: (_status_rank(s), s))
    dev_opts = "".join(f'<option value="{_e(d)}">{_e(d)}</option>' for d in devices)
    st_opts = "".join(
        f'<option value="{_e(s)}">{_e("no experience" if s == NO_EXPERIENCE else s)}</option>'
        for s in statuses
    )
    decisions = _options((v for lane in lanes for v in lane.decision_values), DECISIONS)
    backends = _options((v for lane in lanes for v in lane.backend_values), BACKENDS)
    drops = _options((v for lane in lanes for v in lane.drop_values), DROP_REASONS)
    dead = _options((v for lane in lanes for v in lane.dead_values), DEAD_LETTER_REASONS)
    return (
        '<div class="filters" id="filters" role="search">'
        '<input type="search" id="f-text" placeholder="filter by experience or device id…" '
        'aria-label="filter by experience or device id" autocomplete="off">'
        '<select id="f-device" aria-label="device">'
        f'<option value="">all devices ({_n(len(devices))})</option>'
        f"{dev_opts}</select>"
        f'<select id="f-status" aria-label="status"><option value="">all statuses</option>{st_opts}</select>'
        '<select id="f-decision" aria-label="decision"><option value="">any decision</option>'
        f"{decisions}</select>"
        '<select id="f-backend" aria-label="backend"><option value="">any backend</option>'
        f"{backends}</select>"
        '<select id="f-drop" aria-label="drop reason"><option value="">any drop reason</option>'
        f"{drops}</select>"
        '<select id="f-dead" aria-label="dead-letter reason"><option value="">any dead-letter reason</option>'
        f"{dead}</select>"
        '<select id="f-sort" aria-label="order of the lanes"><option value="time">by device and time</option>'
        '<option value="severity">most severe first</option></select>'
        '<label class="chk"><input type="checkbox" id="f-shared"> shared time axis</label>'
        '<button type="button" id="f-reset">reset</button>'
        '<button type="button" id="f-expand">expand shown</button>'
        '<button type="button" id="f-collapse">collapse shown</button>'
        f'<span class="count" id="f-count">{_n(len(lanes))} lanes</span>{ruler}</div>'
    )


def _legend(with_states: bool, with_dead: bool) -> str:
    stages = "".join(f'<span><i style="background:var(--{s})"></i>{s}</span>' for s in STAGES)
    tail = "<span>· end marks take the status colour; hollow marks are drops</span>"
    states = ""
    if with_states:
        states = (
            '<span>bands:</span><span><i class="sq sb-network-disconnected"></i>network disconnected</span>'
            '<span><i class="sq sb-network-reconnecting"></i>network reconnecting</span>'
            '<span><i class="sq sb-voice-active"></i>voice session</span>'
            '<span><i class="sq sb-network-flapping"></i><i class="sq sb-voice-flapping"></i>flapping '
            "(stretches close in time, merged)</span>"
        )
    if with_dead:
        states += '<span><i class="sq" style="background:#7f1d1d"></i>dead letter</span>'
    return f'<div class="legend"><span>stages:</span>{stages}{tail}{states}</div>'


def _axis_svg(axis: _Axis) -> str:
    """The ruler of the shared time axis (clock times, UTC)."""
    step = _nice_step(max(axis.t1 - axis.t0, 1))
    first = -(-axis.t0 // step) * step
    labels: list[str] = []
    t = first
    while t <= axis.t1 and len(labels) < 12:
        labels.append(f'<text x="{axis.x(t):.1f}" y="14">{_e(_fmt_clock(t))}</text>')
        t += step
    return (
        f'<svg class="shared ruler" viewBox="0 0 {_W:.0f} 18" role="img" aria-label="shared time axis">'
        f'<g class="ticklbl">{"".join(labels)}</g></svg>'
    )


_MODE_TEXT: Final[dict[str, str]] = {
    "recorded": "decisions reused from the input's recorded decisions; every difference is a divergence",
    "rules": "decisions recomputed by the deterministic rules",
    "model": "decisions asked again of the configured model backend",
}


def _replay_banner(mode: str | None, totals: Totals) -> str:
    if not mode:
        return ""
    text = _MODE_TEXT.get(mode, "")
    divs = ""
    if mode == "recorded" or totals.divergences:
        divs = f" · <b>{_plural(totals.divergences, 'divergence')}</b>"
    rest = ""
    if totals.unplaced:
        items = "".join(
            f'<li class="diverged"><span class="mono">{_e(shown_id(d.get("trigger_event_id")) or "—")}'
            "</span>: "
            f"{_e(_divergence_text(d))}</li>"
            for d in totals.unplaced[:DETAIL_ROWS_MAX]
        )
        more = totals.n_unplaced - len(totals.unplaced)
        if more > 0:
            items += f'<li class="muted">… {_n(more)} more divergences in divergences.jsonl …</li>'
        rest = f'<ul class="divs">{items}</ul>'
    return (
        f'<div class="banner mode-{_known(mode, tuple(_MODE_TEXT))}" id="replay-mode">Replay · decisions '
        f"<b>{_e(mode)}</b>: {_e(text)}{divs}{rest}</div>"
    )


def render_report(
    *,
    decisions: Sequence[Record],
    dispatches: Sequence[Record],
    timeline: Sequence[Record],
    dead_letters: Sequence[Record],
    statuses: Mapping[str, str],
    title: str = "Guardian incident report",
    generated_note: str = "",
    divergences: Sequence[Record] = (),
    replay_mode: str | None = None,
    device_states: Iterable[DeviceStateChange] = (),
    on_demand: bool | None = None,
) -> str:
    """One self-contained HTML page (no external reference) for the given output records.

    ``divergences`` are replay's (``divergences.jsonl``) and ``replay_mode`` its ``--decisions``
    mode (shown in a banner); ``device_states`` are the network and voice states the pipeline
    admitted (:class:`report.bands.AdmittedStates`), drawn as bands since they write no timeline
    entry.

    With more than ``OPEN_LANES_MAX`` lanes (or ``on_demand=True``) the lanes start collapsed and
    each lane's body and shared-axis strip are carried compressed (:class:`_LaneData`): the page
    draws them when the lane is opened or, for the strip, scrolled into view on the shared axis.
    """
    sources = Sources(
        ListRecords(decisions),
        ListRecords(dispatches),
        ListRecords(timeline),
        ListRecords(dead_letters),
        ListRecords(divergences),
    )
    return "".join(
        _page(
            sources,
            statuses,
            title=title,
            generated_note=generated_note,
            replay_mode=replay_mode,
            device_states=device_states,
            on_demand=on_demand,
        )
    )


def _page(
    sources: Sources,
    statuses: Mapping[str, str],
    *,
    title: str,
    generated_note: str | Callable[[Totals], str],
    replay_mode: str | None,
    device_states: Iterable[DeviceStateChange],
    on_demand: bool | None,
) -> Iterator[str]:
    """The page, in pieces; it holds the lanes' aggregates and handles, one lane's records at a
    time, and (on demand) the compressed lane data."""
    lanes, totals = build_lanes(sources, statuses, device_states)
    band_cap = _water_fill([len(lane.states) for lane in lanes], BAND_BUDGET, BANDS_LANE_MIN, BANDS_LANE_MAX)
    for lane in lanes:
        window = lane.window()
        if window is not None and lane.states:
            lane.states = lane_bands(lane.states, window[0], window[1], band_cap)
    sizes = [len(lane.h_entries) for lane in lanes]
    table_cap = _water_fill(sizes, TABLE_ROW_BUDGET, TABLE_ROWS_MIN, TABLE_ROWS_MAX)
    svg_cap = _water_fill(sizes, SVG_MARK_BUDGET, SVG_MARKS_MIN, SVG_MARKS_MAX)
    strip_cap = _water_fill(
        [_strip_size(lane) for lane in lanes], STRIP_MARK_BUDGET, STRIP_MARKS_MIN, STRIP_MARKS_MAX
    )
    if on_demand is None:
        on_demand = len(lanes) > OPEN_LANES_MAX
    open_ = not on_demand and len(lanes) <= OPEN_LANES_MAX
    packed = _LaneData() if on_demand else None
    capped_tables = sum(1 for s in sizes if s > table_cap)
    capped_charts = sum(1 for s in sizes if s > svg_cap)
    windows = [w for w in (lane.window() for lane in lanes) if w is not None]
    axis = _Axis(min(w[0] for w in windows), max(w[1] for w in windows)) if windows else _Axis(0, 0)

    notes = []
    if capped_tables or capped_charts:
        notes.append(
            f'<p class="cap">This page is bounded: entry tables show at most {_n(table_cap)} rows per lane '
            f"(first and last halves; {_n(capped_tables)} lanes cut) and charts at most {_n(svg_cap)} marks "
            f"per lane ({_n(capped_charts)} lanes sampled). The JSONL files hold every record.</p>"
        )
    if not open_:
        notes.append(
            f'<p class="muted">{_n(len(lanes))} lanes: collapsed (a lane is drawn when it is opened); '
            'filter, then use "expand shown".</p>'
        )
    note = generated_note(totals) if callable(generated_note) else generated_note
    note_html = f'<div class="note">{_e(note)}</div>' if note else ""
    yield (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        '<link rel="icon" href="data:,">'
        f"<title>{_e(title)}</title><style>{_CSS}</style><script>{_PROBE_JS}</script></head><body>"
        f"<header><h1>{_e(title)}</h1>{note_html}{_replay_banner(replay_mode, totals)}"
        "</header><main>"
        + _overview(lanes, totals)
        + '<section id="lanes"><h2>Experiences</h2>'
        + _filters(lanes, _axis_svg(axis))
        + _legend(any(lane.states for lane in lanes), totals.dead_letters > 0)
        + "".join(notes)
        + ('<div id="lane-list" class="packed">' if packed is not None else '<div id="lane-list">')
    )
    for i, lane in enumerate(lanes, 1):
        with drawn(lane, sources):
            html = _lane_html(i, lane, table_cap, svg_cap, strip_cap, open_, axis, packed)
        if packed is None:
            yield html
        else:
            packed.append_list(html)
    if not lanes:
        empty = '<p class="muted">No experiences and no timeline entries.</p>'
        if packed is None:
            yield empty
        else:
            packed.append_list(empty)
    yield (
        "</div></section></main>"
        "<footer>Times are UTC. Hover a mark for its summary, ref_id and drop reason. "
        "Lanes are grouped by experience; entries without an experience form a per-device "
        "“no experience” lane, which also holds the device's dead letters received outside any "
        "experience. Network and voice records update only the device snapshot: their bands are "
        "drawn from what the pipeline admitted into it (flapping bands merge stretches close in "
        "time). Dead letters never show a payload.</footer>"
    )
    if packed is not None:
        yield packed.html()
    yield f"<script>{_JS}</script></body></html>\n"


# --------------------------------------------------------------------------- from a directory


def render_report_from_dir(
    out_dir: Path,
    *,
    title: str = "Guardian incident report",
    device_states: Iterable[DeviceStateChange] = (),
    on_demand: bool | None = None,
    made_from: str = "",
) -> Path:
    """Read a replay/demo output directory and write `report.html` into it; return its path.

    ``made_from``: what the outputs were made from (a sentence); default: the directory's name.

    ``device_states``: the network and voice states the pipeline admitted (the output files
    do not hold them); without them the report has no network or voice bands.

    The output files are read twice and never held: a first pass keeps per lane its aggregates
    (counts, time window, status, filter values) and an 8-byte offset per record; then each lane's
    records are read back, drawn (and, on demand, compressed) and let go before the next lane's.
    """
    out_dir = Path(out_dir)
    summary_path = out_dir / "summary.json"
    statuses: dict[str, str] = {}
    mode: str | None = None
    if summary_path.exists():
        summary = loads(summary_path.read_text(encoding="utf-8"))
        experiences = summary.get("experiences") if isinstance(summary, dict) else None
        if isinstance(experiences, dict):
            statuses = {str(k): str(v) for k, v in experiences.items()}
        if isinstance(summary, dict) and isinstance(summary.get("decisions_mode"), str):
            mode = summary["decisions_mode"]
    sources = Sources(
        FileRecords(out_dir / "decisions.jsonl"),
        FileRecords(out_dir / "dispatch.jsonl"),
        FileRecords(out_dir / "timeline.jsonl"),
        FileRecords(out_dir / "deadletter.jsonl"),
        FileRecords(out_dir / "divergences.jsonl"),
    )

    def note(totals: Totals) -> str:
        source = made_from or f"From {out_dir.name or '.'}/:"
        return (
            f"{source} {_n(totals.timeline)} timeline entries, "
            f"{_n(totals.decisions)} decisions, {_n(totals.dispatches)} dispatches, "
            f"{_n(totals.dead_letters)} dead letters."
        )

    target = out_dir / "report.html"
    partial = out_dir / "report.html.partial"
    try:
        with partial.open("w", encoding="utf-8") as fh:
            for piece in _page(
                sources,
                statuses,
                title=title,
                generated_note=note,
                replay_mode=mode,
                device_states=device_states,
                on_demand=on_demand,
            ):
                fh.write(piece)
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return target

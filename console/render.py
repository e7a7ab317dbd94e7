"""What the console shows of its state: a lane drawn by the report's own code, the overview, an
experience's records as kcat ``-J`` lines and its offline report. Plain functions (no I/O).

A lane is drawn exactly as the incident report draws it (:func:`report.lane_view.lane_html` over
:func:`report.lanes.build_lanes`), so what an analyst sees later is what the operator saw live.
Every string from a record or a worker is escaped; dead letters show reason and coordinates,
never a payload.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from console.state import ConsoleState, Held
from console.workers import WorkerView
from guardian.kcat_json import kcat_line
from report import render_report
from report.bands import BANDS_LANE_MAX
from report.chart import Axis
from report.lane_view import lane_html
from report.lanes import build_lanes, drawn
from report.layout import SVG_MARKS_MAX, TABLE_ROWS_MAX, fmt_time, num
from report.safe import esc, shown_id
from report.sources import ListRecords, Sources
from topics.names import TopicNames
from topics.records import BACKENDS, DEADLETTER_REASONS, DECISIONS, DROP_REASONS


def _sources(held: Iterable[Held]) -> Sources:
    by_kind: dict[str, list[dict[str, Any]]] = {
        "timeline": [],
        "decisions": [],
        "dispatch": [],
        "deadletter": [],
    }
    for h in held:
        by_kind[h.kind].append(h.record)
    return Sources(
        ListRecords(by_kind["decisions"]),
        ListRecords(by_kind["dispatch"]),
        ListRecords(by_kind["timeline"]),
        ListRecords(by_kind["deadletter"]),
        ListRecords([]),
    )


def lane_fragment(state: ConsoleState, key: str) -> str | None:
    """The lane ``key`` as the report draws it (an HTML fragment), or None when it is not held."""
    lane_state = state.lanes.get(key)
    if lane_state is None:
        return None
    sources = _sources(state.records_of(key))
    lanes, _ = build_lanes(sources, {})
    lane = next((x for x in lanes if x.key == key), None)
    if lane is None:
        return None
    window = lane.window()
    axis = Axis(window[0], window[1]) if window is not None else Axis(0, 0)
    with drawn(lane, sources):
        html = lane_html(1, lane, TABLE_ROWS_MAX, SVG_MARKS_MAX, BANDS_LANE_MAX, True, axis)
    note = ""
    if lane_state.evicted:
        note = (
            f'<p class="cap">The console holds the last {num(len(lane_state.records))} records of this '
            f"lane; {num(lane_state.evicted)} earlier ones are no longer held.</p>"
        )
    return note + html


def kcat_lines(state: ConsoleState, key: str, topics: TopicNames) -> bytes:
    """The lane's held records (and its device's dead letters) as kcat ``-J`` lines."""
    names = {"timeline": topics.timeline, "decisions": topics.decisions}
    names |= {"dispatch": topics.dispatch, "deadletter": topics.deadletter}
    return b"".join(
        kcat_line(names[h.kind], h.partition, h.offset, h.ts, h.key, h.value) + b"\n"
        for h in state.records_of(key)
    )


def offline_report(state: ConsoleState, key: str) -> str | None:
    """The incident report (the same page ``guardian replay`` writes) of the lane's held records."""
    lane = state.lanes.get(key)
    if lane is None:
        return None
    by_kind: dict[str, list[dict[str, Any]]] = {
        "timeline": [],
        "decisions": [],
        "dispatch": [],
        "deadletter": [],
    }
    for h in state.records_of(key):
        by_kind[h.kind].append(h.record)
    statuses = {lane.experience_id: lane.status} if lane.experience_id else {}
    return render_report(
        decisions=by_kind["decisions"],
        dispatches=by_kind["dispatch"],
        timeline=by_kind["timeline"],
        dead_letters=by_kind["deadletter"],
        statuses=statuses,
        title=f"Guardian report · {lane.experience_id or lane.device_id or 'unscoped'}",
        generated_note=f"From the live console's held records of this lane ({num(len(lane.records))}).",
    )


def _counts(title: str, counts: Counter[str], order: Sequence[str], filter_name: str = "") -> str:
    keys = [k for k in order if counts.get(k)] + sorted(k for k in counts if k not in order and counts[k])
    rows = "".join(
        f"<tr><td>{_filter_link(filter_name, k)}</td><td class='num'>{num(counts[k])}</td></tr>" for k in keys
    )
    body = rows or '<tr><td class="muted" colspan="2">none</td></tr>'
    return f'<div class="card"><h3>{esc(title)}</h3><table class="counts">{body}</table></div>'


def _filter_link(name: str, value: str) -> str:
    if not name:
        return esc(value)
    return f'<a href="#" class="flt" data-filter="{esc(name)}" data-value="{esc(value)}">{esc(value)}</a>'


def _workers(workers: Sequence[WorkerView]) -> str:
    if not workers:
        return (
            '<div class="card"><h3>Workers</h3><p class="muted">No worker URL given '
            "(--worker or GUARDIAN_CONSOLE_WORKERS).</p></div>"
        )
    rows = []
    for w in workers:
        ready = "ready" if w.ready else ("not ready" if w.reachable else "unreachable")
        lag = "—" if w.lag_records is None else num(w.lag_records)
        secs = "—" if w.lag_seconds is None else f"{w.lag_seconds:.1f} s"
        parts = ",".join(str(p) for p in w.partitions) or "—"
        rows.append(
            f'<tr id="worker-{w.index}"><td><a class="mono" href="{esc(w.url)}/ready" rel="noreferrer">'
            f"{esc(w.url)}</a></td>"
            f'<td><span class="badge wk-{"ok" if w.ready else "bad"}">{esc(ready)}</span>'
            f"{'' if not w.missing else ' ' + esc(', '.join(w.missing))}</td>"
            f'<td class="num">{lag}</td><td class="num">{secs}</td><td>{esc(w.trend)}</td>'
            f'<td class="mono">{esc(parts)}</td>'
            f'<td class="num">{num(w.model_calls)} / {num(w.fallbacks)}</td></tr>'
        )
    head = (
        "<tr><th>worker</th><th>readiness</th><th>lag (records)</th><th>lag (s, est.)</th>"
        "<th>lag trend</th><th>partitions</th><th>model calls / fallbacks</th></tr>"
    )
    return (
        f'<div class="card wide"><h3>Workers</h3><table class="workers">{head}{"".join(rows)}</table></div>'
    )


def _dead_list(state: ConsoleState) -> str:
    recent: list[Held] = sorted(
        (h for box in state.dead_by_device.values() for h in box), key=lambda h: h.ts, reverse=True
    )[:20]
    rows = "".join(
        f'<tr class="dlrow"><td class="mono">{esc(fmt_time(h.ts))}</td>'
        f"<td>{_filter_link('dead', str(r.get('reason_code')))}</td>"
        f'<td class="mono">{esc(shown_id(r.get("source_topic")))}'
        f"[{esc(r.get('partition'))}]@{esc(r.get('offset'))}</td>"
        f'<td class="mono">{esc(shown_id(r.get("key")) or "—")}</td></tr>'
        for h, r in ((h, h.record) for h in recent)
    )
    body = rows or '<tr><td class="muted" colspan="4">none held</td></tr>'
    return (
        '<div class="card wide"><h3>Latest dead letters</h3><table class="dead">'
        "<tr><th>received</th><th>reason</th><th>source (partition@offset)</th><th>key</th></tr>"
        f"{body}</table></div>"
    )


def overview_fragment(state: ConsoleState, workers: Sequence[WorkerView]) -> str:
    """The fleet overview: statuses of the held experiences, decisions by kind and backend, drops and
    dead letters of the last minutes, refused records, the workers and the latest dead letters."""
    statuses = state.statuses()
    bad = state.bad
    bad_card = _counts("Refused records (counted, not shown)", bad, ())
    stats = (
        f'<p class="stats">{num(len(state.lanes))} lanes held · {num(state.records_seen)} records read · '
        f"{num(state.evicted_lanes)} lanes evicted (LRU) · newest record "
        f"{esc(fmt_time(state.newest_ms) if state.newest_ms else '—')}</p>"
    )
    cards = "".join(
        (
            _counts(
                "Experiences by status", statuses, ("active", "completed", "aborted", "failed"), "status"
            ),
            _counts("Decisions by kind", state.decisions, DECISIONS, "decision"),
            _counts("Decisions by backend", state.backends, BACKENDS),
            _counts("Drops, last 5 min", state.recent(state.drops_by_minute), DROP_REASONS),
            _counts(
                "Dead letters, last 5 min", state.recent(state.dead_by_minute), DEADLETTER_REASONS, "dead"
            ),
            bad_card,
        )
    )
    return f'{stats}<div class="cards">{cards}</div>{_workers(workers)}{_dead_list(state)}'

"""One lane as HTML: its summary, chart, entry table, decisions (with divergences), dispatches (each
linked to its trigger), dead letters (never a payload), bands and closing evidence. The incident
report and the live console render a lane with this same code."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping

from report.bands import (
    band_class,
)
from report.chart import Axis, interval_text, lane_chart, shared_strip
from report.lanes import DETAIL_ROWS_MAX, Lane
from report.lanes import rec_int as _int
from report.lanes import rec_str as _str
from report.layout import (
    BACKENDS,
    DEAD_LETTER_REASONS,
    DECISIONS,
    STAGES,
    STATUSES,
    fmt_clock,
    fmt_dur,
    fmt_time,
    num,
    plural,
)
from report.packing import LaneData
from report.safe import css_known, esc, shown_id, shown_value
from report.sources import Record

# --------------------------------------------------------------------------- per-lane sections


def rendered(n: int, cap: int) -> tuple[list[int], int]:
    """Positions of the entry rows a lane's table shows, and where the "more" row goes (-1: none)."""
    if n <= cap:
        return list(range(n)), -1
    head_n = cap // 2
    tail_n = cap - head_n
    return [*range(head_n), *range(n - tail_n, n)], head_n


def lane_anchors(index: int, lane: Lane, cap: int) -> dict[str, str]:
    """event ID -> the element of this lane that shows it: a timeline row, or a network/voice band."""
    found: dict[str, str] = {}
    for k, interval in enumerate(lane.states):
        found.setdefault(interval.start_event, f"l{index}-s{k}")
        if interval.end_event:
            found.setdefault(interval.end_event, f"l{index}-s{k}")
    shown, _ = rendered(len(lane.entries), cap)
    for pos in shown:
        rec = lane.entries[pos]
        if _str(rec, "stage") in ("observe", "drop", "evidence"):
            found[_str(rec, "ref_id")] = f"l{index}-e{pos}"
    return found


def ref_link(event_id: str, anchors: Mapping[str, str]) -> str:
    target = anchors.get(event_id)
    if not event_id:
        return '<span class="muted">—</span>'
    if target is None:
        return esc(event_id)
    return f'<a class="jump" href="#{target}" data-jump="{target}">{esc(event_id)}</a>'


def entries_table(index: int, lane: Lane, cap: int) -> str:
    entries = lane.entries
    if not entries:
        return '<p class="muted">No timeline entries.</p>'
    t0 = next((t for t in (_int(r, "at_ms") for r in entries) if t is not None), None)

    def row(pos: int) -> str:
        rec = entries[pos]
        stage = _str(rec, "stage")
        at = _int(rec, "at_ms")
        rel = f"+{fmt_dur(at - t0)}" if at is not None and t0 is not None else ""
        note = _str(rec, "drop_reason") or (_str(rec, "status") if stage == "end" else "")
        return (
            f'<tr id="l{index}-e{pos}"><td class="mono num">{esc(_str(rec, "seq"))}</td>'
            f'<td class="mono" title="{esc(fmt_time(at))}">{esc(fmt_clock(at))}</td>'
            f'<td class="mono rel">{esc(rel)}</td>'
            f'<td><span class="stg k-{css_known(stage, STAGES)}">{esc(stage)}</span></td>'
            f'<td class="mono id">{esc(_str(rec, "ref_id"))}</td>'
            f"<td>{esc(_str(rec, 'summary'))}</td>"
            f'<td class="mono">{esc(note)}</td></tr>'
        )

    shown, gap = rendered(len(entries), cap)
    rows = []
    for k, pos in enumerate(shown):
        if k == gap:
            hidden = len(entries) - cap
            rows.append(
                f'<tr class="more"><td colspan="7">… {num(hidden)} more entries not shown '
                f"(first {gap} and last {cap - gap} of {num(len(entries))}) …</td></tr>"
            )
        rows.append(row(pos))
    return (
        '<div class="scroll"><table class="entries"><thead><tr><th>seq</th><th>time (UTC)</th><th>Δ</th>'
        "<th>stage</th><th>ref_id</th><th>summary</th><th>drop reason / status</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def capped_rows(rows: list[str], total: int, what: str) -> str:
    more = total - len(rows)
    if more > 0:
        rows.append(f'<tr class="more"><td colspan="9">… {num(more)} more {esc(what)} …</td></tr>')
    return "".join(rows)


def divergence_text(div: Record) -> str:
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


def decisions_html(lane: Lane, anchors: Mapping[str, str]) -> str:
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
            items = "".join(f"<li>{esc(divergence_text(d))}</li>" for d in divs)
            mark = f'<span class="badge diverged">diverged</span><ul class="divs">{items}</ul>'
        rows.append(
            f'<tr class="{"diverged" if divs else ""}" data-decision-id="{esc(_str(rec, "decision_id"))}">'
            f'<td class="mono">{esc(fmt_clock(_int(rec, "decided_at_ms")))}</td>'
            f'<td><span class="badge dc-{css_known(decision, DECISIONS)}">{esc(decision)}</span>{mark}</td>'
            f'<td class="mono">{esc(_str(rec, "reason_code"))}</td>'
            f'<td><span class="badge be-{css_known(backend, BACKENDS)}">{esc(backend)}</span></td>'
            f"<td>{esc(_str(rec, 'rationale'))}</td>"
            f'<td class="mono id">{ref_link(trigger, anchors)}</td>'
            f'<td class="mono small">{esc(budget_txt)}</td></tr>'
        )
    html = ""
    if recs:
        html = (
            f"<h4>Decisions ({num(len(recs))})</h4>"
            '<div class="scroll"><table class="detail decisions"><thead><tr><th>time</th><th>decision</th>'
            "<th>reason</th><th>backend</th><th>rationale</th><th>trigger</th><th>budget after</th></tr>"
            f"</thead><tbody>{capped_rows(rows, len(recs), 'decisions')}</tbody></table></div>"
        )
    if diverged:
        items = "".join(
            f'<li class="diverged">{ref_link(trigger, anchors)}: {esc(divergence_text(d))}</li>'
            for trigger, divs in diverged.items()
            for d in divs
        )
        html += f'<h4>Divergences without a replayed decision</h4><ul class="divs">{items}</ul>'
    return html


def dispatches_html(lane: Lane, anchors: Mapping[str, str]) -> str:
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
            " ".join(f'<span class="op">{esc(op)}</span>' for op in ops) or '<span class="muted">—</span>'
        )
        tts = _str(rec, "tts")
        origin = "local" if rec.get("decision_id") is None else _str(rec, "decision_id")
        rows.append(
            f'<tr><td class="mono">{esc(fmt_clock(_int(rec, "created_at_ms")))}</td>'
            f"<td>{ops_html}</td>"
            f"<td>{esc(tts) if tts else '<span class=muted>—</span>'}</td>"
            f'<td class="mono id trig">{ref_link(_str(rec, "trigger_event_id"), anchors)}</td>'
            f'<td class="mono small">{esc(_str(rec, "kind"))}</td>'
            f'<td class="mono id">{esc(_str(rec, "dispatch_id"))}</td>'
            f'<td class="mono id">{esc(origin)}</td></tr>'
        )
    return (
        f"<h4>Dispatches ({num(len(recs))})</h4>"
        '<div class="scroll"><table class="detail dispatches"><thead><tr><th>time</th><th>requests</th>'
        "<th>tts</th><th>trigger</th><th>kind</th><th>dispatch_id</th><th>decision</th></tr></thead>"
        f"<tbody>{capped_rows(rows, len(recs), 'dispatches')}</tbody></table></div>"
    )


def dead_letters_html(lane: Lane) -> str:
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
            f'<tr class="dlrow" data-reason="{esc(reason)}">'
            f'<td class="mono">{esc(fmt_clock(_int(rec, "received_at_ms")))}</td>'
            f'<td><span class="badge dl-{css_known(reason, DEAD_LETTER_REASONS)}">{esc(reason)}</span></td>'
            f'<td class="mono small">{esc(source)}</td>'
            f'<td class="mono id">{esc(shown_id(rec.get("event_id")) or "—")}</td>'
            f"<td>{esc(_str(rec, 'detail'))}{esc(note)}</td>"
            f'<td class="mono small">{esc(paths_txt or "—")}</td></tr>'
        )
    return (
        f"<h4>Dead letters ({num(total)})</h4>"
        '<div class="scroll"><table class="detail deadletters"><thead><tr><th>received</th><th>reason</th>'
        "<th>source (topic [partition] @offset)</th><th>event_id</th><th>detail</th>"
        "<th>offending paths</th></tr></thead>"
        f"<tbody>{capped_rows(rows, total, 'dead letters')}</tbody></table></div>"
    )


def states_html(index: int, lane: Lane) -> str:
    if not lane.states:
        return ""
    items = "".join(
        f'<li id="l{index}-s{k}" class="st-item {esc(band_class(i))}">'
        f"<b>{esc(interval_text(i))}</b> "
        f'<span class="mono id">{esc(i.start_event)}{" → " + esc(i.end_event) if i.end_event else ""}</span>'
        "</li>"
        for k, i in enumerate(lane.states)
    )
    return f'<h4>Network and voice state</h4><ul class="states">{items}</ul>'


def evidence_html(lane: Lane) -> str:
    end_at = next((i for i, r in enumerate(lane.entries) if _str(r, "stage") == "end"), None)
    upto = lane.entries if end_at is None else lane.entries[:end_at]
    evidence = [r for r in upto if _str(r, "stage") == "evidence"]
    if end_at is None:
        title = "Evidence so far (not closed)"
    else:
        end = lane.entries[end_at]
        ended = f"{_str(end, 'status') or '?'} at {fmt_clock(_int(end, 'at_ms'))}"
        title = f"Evidence that closed it (ended {ended})"
    if not evidence:
        return f'<h4>{esc(title)}</h4><p class="muted">No evidence entries.</p>'
    more = len(evidence) - DETAIL_ROWS_MAX
    items = "".join(
        f'<li><span class="mono">{esc(fmt_clock(_int(r, "at_ms")))}</span> {esc(_str(r, "summary"))} '
        f'<span class="mono id">{esc(_str(r, "ref_id"))}</span></li>'
        for r in evidence[-DETAIL_ROWS_MAX:]
    )
    note = f'<li class="muted">… {num(more)} earlier evidence entries …</li>' if more > 0 else ""
    return f'<h4>{esc(title)}</h4><ul class="evidence">{note}{items}</ul>'


def lane_html(
    index: int,
    lane: Lane,
    table_cap: int,
    svg_cap: int,
    strip_cap: int,
    open_: bool,
    axis: Axis,
    packed: LaneData | None = None,
) -> str:
    """The lane's section; with ``packed``, its body and strip go there and render on demand."""
    status = lane.status
    times = [t for t in (_int(r, "at_ms") for r in lane.entries) if t is not None]
    span = f"{fmt_time(min(times))} · {fmt_dur(max(times) - min(times))}" if times else "no timeline"
    drop_reasons = sorted({_str(r, "drop_reason") for r in lane.entries if _str(r, "stage") == "drop"})
    drops = sum(1 for r in lane.entries if _str(r, "stage") == "drop")
    dead = lane.n_dead + lane.n_foreign
    if lane.is_experience:
        name = f'<span class="mono exp">{esc(lane.experience_id)}</span>'
        badge = f'<span class="badge st-{css_known(status, STATUSES)}">{esc(status)}</span>'
    else:
        name = '<span class="noexp">no experience</span>'
        badge = '<span class="badge st-other">unscoped</span>'
    if lane.n_div:
        badge += f'<span class="badge diverged">{plural(lane.n_div, "divergence")}</span>'
    if dead:
        badge += f'<span class="badge deadcount">{plural(dead, "dead letter")}</span>'
    meta = (
        f"{num(len(lane.entries))} {'entry' if len(lane.entries) == 1 else 'entries'} · "
        f"{plural(drops, 'drop')} · {plural(len(lane.decisions), 'decision')} · "
        f"{num(len(lane.dispatches))} {'dispatch' if len(lane.dispatches) == 1 else 'dispatches'} · "
        f"{plural(dead, 'dead letter')} · {span}"
    )
    summary = (
        f'<summary>{name}<span class="dev mono">{esc(lane.device_id or "?")}</span>'
        f'{badge}<span class="meta">{esc(meta)}</span>'
    )
    strip = shared_strip(lane, axis, strip_cap)
    anchors = lane_anchors(index, lane, table_cap)
    # the device filter is a button in the body: a control inside <summary> is nested interactive
    body: list[str] = [
        '<p class="lanetools"><button type="button" class="devfilter" '
        f'data-filter-device="{esc(lane.device_id)}">'
        f"show only device {esc(lane.device_id or '?')}</button></p>"
    ]
    if lane.entries:
        chart, shown = lane_chart(lane, svg_cap)
        body.append(chart)
        charted = sum(1 for r in lane.entries if _str(r, "stage") in STAGES)
        if shown < charted:
            body.append(
                f'<p class="cap">Chart shows {num(shown)} of {num(charted)} entries: every goal, observe, '
                "decide, act, evidence and end entry is kept first; drops are sampled evenly.</p>"
            )
    facts = states_html(index, lane) + dead_letters_html(lane)
    if lane.is_experience:
        facts += decisions_html(lane, anchors) + dispatches_html(lane, anchors) + evidence_html(lane)
    if facts:
        body.append(f'<div class="facts">{facts}</div>')
    body.append(
        f'<details class="tbl"{" open" if open_ else ""}><summary>Timeline entries '
        f"({num(len(lane.entries))})</summary>{entries_table(index, lane, table_cap)}</details>"
    )

    def words(values: Iterable[str]) -> str:
        return esc(" ".join(sorted({v for v in values if v})))

    body_html = "".join(body)
    where = ""
    if packed is not None:
        chunk, slot = packed.add(strip, body_html)
        strip, body_html = "", ""
        where = f' data-chunk="{chunk}" data-slot="{slot}"'

    return (
        f'<section class="lane" id="lane-{index}" data-experience="{esc(lane.experience_id)}" '
        f'data-device="{esc(lane.device_id)}" data-status="{esc(status)}" data-order="{index}" '
        f'data-sev="{lane.severity()}" data-decisions="{words(_str(r, "decision") for r in lane.decisions)}" '
        f'data-backends="{words(_str(r, "backend") for r in lane.decisions)}" '
        f'data-drops="{words(drop_reasons)}" '
        f'data-dead="{words(lane.dead_values)}" data-diverged="{lane.n_div}"{where}>'
        f'<details class="lanebox"{" open" if open_ else ""}>{summary}{strip}</summary>'
        f'<div class="lanebody">{body_html}</div></details></section>'
    )

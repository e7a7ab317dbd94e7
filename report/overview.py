"""The report's fleet overview, filter bar, legend, shared-axis ruler and replay banner (HTML)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from report.chart import Axis, nice_step
from report.lane_view import divergence_text
from report.lanes import DETAIL_ROWS_MAX, NO_EXPERIENCE, Lane, Totals
from report.layout import (
    BACKENDS,
    DEAD_LETTER_REASONS,
    DECISIONS,
    DROP_REASONS,
    STAGES,
    STATUSES,
    W,
    fmt_clock,
    num,
    plural,
)
from report.safe import css_known, esc, shown_id

# --------------------------------------------------------------------------- overview


def count_table(title: str, counts: Counter[str], order: Sequence[str], css: str, empty: str) -> str:
    keys = [k for k in order if counts.get(k)] + sorted(k for k in counts if k not in order)
    total = sum(counts.values())
    head = f'<h3>{esc(title)} <span class="tot">{num(total)}</span></h3>'
    if not keys:
        return f'<div class="card">{head}<p class="muted">{esc(empty)}</p></div>'
    top = max(counts.values())
    rows = []
    for k in keys:
        c = counts[k]
        width = max(2.0, 100.0 * c / top)
        cls = f"{css}-{css_known(k, order)}" if css else ""
        rows.append(
            f'<tr><td class="mono">{esc(k or "—")}</td><td class="num">{num(c)}</td>'
            f'<td class="barcell"><span class="bar {cls}" style="width:{width:.1f}%"></span></td></tr>'
        )
    return f'<div class="card">{head}<table class="counts">{"".join(rows)}</table></div>'


def status_strip(counts: Counter[str]) -> str:
    total = sum(counts.values())
    if not total:
        return ""
    keys = [k for k in STATUSES if counts.get(k)] + sorted(k for k in counts if k not in STATUSES)
    segs = "".join(
        f'<span class="seg st-{css_known(k, STATUSES)}" style="width:{100.0 * counts[k] / total:.3f}%" '
        f'title="{esc(k)}: {num(counts[k])}"></span>'
        for k in keys
    )
    return f'<div class="strip">{segs}</div>'


def overview_html(lanes: Sequence[Lane], totals: Totals) -> str:
    exp_lanes = [lane for lane in lanes if lane.is_experience]
    by_status: Counter[str] = Counter(lane.status for lane in exp_lanes)
    for s in STATUSES:
        by_status.setdefault(s, 0)
    drops, dead = totals.drops, totals.dead
    by_decision, by_backend = totals.by_decision, totals.by_backend
    local = totals.local_dispatches
    devices = {lane.device_id for lane in lanes if lane.device_id}

    status_rows = "".join(
        f'<tr><td><span class="badge st-{css_known(k, STATUSES)}">{esc(k)}</span></td>'
        f'<td class="num">{num(c)}</td></tr>'
        for k, c in sorted(by_status.items(), key=lambda kc: (kc[0] not in STATUSES, status_rank(kc[0])))
    )
    stats = (
        '<div class="stats">'
        f'<div class="stat"><b>{num(len(exp_lanes))}</b><span>experiences</span></div>'
        f'<div class="stat"><b>{num(len(devices))}</b><span>devices</span></div>'
        f'<div class="stat"><b>{num(totals.timeline)}</b><span>timeline entries</span></div>'
        f'<div class="stat"><b>{num(totals.decisions)}</b><span>decisions</span></div>'
        f'<div class="stat"><b>{num(totals.dispatches)}</b><span>dispatches</span>'
        f"<small>{num(totals.dispatches - local)} from decisions · {num(local)} local</small></div>"
        f'<div class="stat"><b>{num(sum(drops.values()))}</b><span>drops</span></div>'
        f'<div class="stat"><b>{num(totals.dead_letters)}</b><span>dead letters</span></div>'
        "</div>"
    )
    status_card = (
        f'<div class="card"><h3>Experiences by final status <span class="tot">{num(len(exp_lanes))}</span>'
        f'</h3>{status_strip(by_status)}<table class="counts status-counts">{status_rows}</table></div>'
    )
    cards = (
        status_card
        + count_table("Drop reasons", drops, DROP_REASONS, "dr", "No drops.")
        + count_table("Dead letters by reason", dead, DEAD_LETTER_REASONS, "dl", "No dead letters.")
        + count_table("Decisions", by_decision, DECISIONS, "dc", "No decisions.")
        + count_table("Decision backends", by_backend, BACKENDS, "be", "No decisions.")
    )
    return f'<section id="overview"><h2>Fleet overview</h2>{stats}<div class="cards">{cards}</div></section>'


def status_rank(status: str) -> int:
    return STATUSES.index(status) if status in STATUSES else len(STATUSES)


def option_tags(values: Iterable[str], order: Sequence[str]) -> str:
    present = set(values)
    keys = [k for k in order if k in present] + sorted(k for k in present if k not in order)
    return "".join(f'<option value="{esc(k)}">{esc(k)}</option>' for k in keys if k)


def filter_bar(lanes: Sequence[Lane], ruler: str) -> str:
    """The sticky bar of filters and order, with the shared time axis' ruler (shown in that mode)."""
    devices = sorted({lane.device_id for lane in lanes if lane.device_id})
    statuses = sorted({lane.status for lane in lanes}, key=lambda s: (status_rank(s), s))
    dev_opts = "".join(f'<option value="{esc(d)}">{esc(d)}</option>' for d in devices)
    st_opts = "".join(
        f'<option value="{esc(s)}">{esc("no experience" if s == NO_EXPERIENCE else s)}</option>'
        for s in statuses
    )
    decisions = option_tags((v for lane in lanes for v in lane.decision_values), DECISIONS)
    backends = option_tags((v for lane in lanes for v in lane.backend_values), BACKENDS)
    drops = option_tags((v for lane in lanes for v in lane.drop_values), DROP_REASONS)
    dead = option_tags((v for lane in lanes for v in lane.dead_values), DEAD_LETTER_REASONS)
    return (
        '<div class="filters" id="filters" role="search">'
        '<input type="search" id="f-text" placeholder="filter by experience or device id…" '
        'aria-label="filter by experience or device id" autocomplete="off">'
        '<select id="f-device" aria-label="device">'
        f'<option value="">all devices ({num(len(devices))})</option>'
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
        f'<span class="count" id="f-count">{num(len(lanes))} lanes</span>{ruler}</div>'
    )


def legend_html(with_states: bool, with_dead: bool) -> str:
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


def axis_svg(axis: Axis) -> str:
    """The ruler of the shared time axis (clock times, UTC)."""
    step = nice_step(max(axis.t1 - axis.t0, 1))
    first = -(-axis.t0 // step) * step
    labels: list[str] = []
    t = first
    while t <= axis.t1 and len(labels) < 12:
        labels.append(f'<text x="{axis.x(t):.1f}" y="14">{esc(fmt_clock(t))}</text>')
        t += step
    return (
        f'<svg class="shared ruler" viewBox="0 0 {W:.0f} 18" role="img" aria-label="shared time axis">'
        f'<g class="ticklbl">{"".join(labels)}</g></svg>'
    )


MODE_TEXT: Final[dict[str, str]] = {
    "recorded": "decisions reused from the input's recorded decisions; every difference is a divergence",
    "rules": "decisions recomputed by the deterministic rules",
    "model": "decisions asked again of the configured model backend",
}


def replay_banner(mode: str | None, totals: Totals) -> str:
    if not mode:
        return ""
    text = MODE_TEXT.get(mode, "")
    divs = ""
    if mode == "recorded" or totals.divergences:
        divs = f" · <b>{plural(totals.divergences, 'divergence')}</b>"
    rest = ""
    if totals.unplaced:
        items = "".join(
            f'<li class="diverged"><span class="mono">{esc(shown_id(d.get("trigger_event_id")) or "—")}'
            "</span>: "
            f"{esc(divergence_text(d))}</li>"
            for d in totals.unplaced[:DETAIL_ROWS_MAX]
        )
        more = totals.n_unplaced - len(totals.unplaced)
        if more > 0:
            items += f'<li class="muted">… {num(more)} more divergences in divergences.jsonl …</li>'
        rest = f'<ul class="divs">{items}</ul>'
    return (
        f'<div class="banner mode-{css_known(mode, tuple(MODE_TEXT))}" id="replay-mode">Replay · decisions '
        f"<b>{esc(mode)}</b>: {esc(text)}{divs}{rest}</div>"
    )

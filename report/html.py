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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from report.bands import (
    BAND_BUDGET,
    BANDS_LANE_MAX,
    BANDS_LANE_MIN,
    DeviceStateChange,
    lane_bands,
)
from report.chart import Axis, strip_size
from report.lane_view import lane_html
from report.lanes import Totals, build_lanes, drawn
from report.layout import (
    OPEN_LANES_MAX,
    STRIP_MARK_BUDGET,
    STRIP_MARKS_MAX,
    STRIP_MARKS_MIN,
    SVG_MARK_BUDGET,
    SVG_MARKS_MAX,
    SVG_MARKS_MIN,
    TABLE_ROW_BUDGET,
    TABLE_ROWS_MAX,
    TABLE_ROWS_MIN,
    num,
    water_fill,
)
from report.overview import axis_svg, filter_bar, legend_html, overview_html, replay_banner
from report.packing import LANE_DATA_TYPE, LaneData, decode_lane_data, decode_lane_list
from report.safe import esc
from report.script import PAGE_JS
from report.sources import FileRecords, ListRecords, Record, Sources, loads
from report.style import PAGE_CSP, PAGE_CSS, PROBE_JS

__all__ = [
    "LANE_DATA_TYPE",
    "OPEN_LANES_MAX",
    "DeviceStateChange",
    "decode_lane_data",
    "decode_lane_list",
    "render_report",
    "render_report_from_dir",
]


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
    each lane's body and shared-axis strip are carried compressed (:class:`LaneData`): the page
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
    band_cap = water_fill([len(lane.states) for lane in lanes], BAND_BUDGET, BANDS_LANE_MIN, BANDS_LANE_MAX)
    for lane in lanes:
        window = lane.window()
        if window is not None and lane.states:
            lane.states = lane_bands(lane.states, window[0], window[1], band_cap)
    sizes = [len(lane.h_entries) for lane in lanes]
    table_cap = water_fill(sizes, TABLE_ROW_BUDGET, TABLE_ROWS_MIN, TABLE_ROWS_MAX)
    svg_cap = water_fill(sizes, SVG_MARK_BUDGET, SVG_MARKS_MIN, SVG_MARKS_MAX)
    strip_cap = water_fill(
        [strip_size(lane) for lane in lanes], STRIP_MARK_BUDGET, STRIP_MARKS_MIN, STRIP_MARKS_MAX
    )
    if on_demand is None:
        on_demand = len(lanes) > OPEN_LANES_MAX
    open_ = not on_demand and len(lanes) <= OPEN_LANES_MAX
    packed = LaneData() if on_demand else None
    capped_tables = sum(1 for s in sizes if s > table_cap)
    capped_charts = sum(1 for s in sizes if s > svg_cap)
    windows = [w for w in (lane.window() for lane in lanes) if w is not None]
    axis = Axis(min(w[0] for w in windows), max(w[1] for w in windows)) if windows else Axis(0, 0)

    notes = []
    if capped_tables or capped_charts:
        notes.append(
            f'<p class="cap">This page is bounded: entry tables show at most {num(table_cap)} rows per lane '
            f"(first and last halves; {num(capped_tables)} lanes cut) and charts at most "
            f"{num(svg_cap)} marks per lane ({num(capped_charts)} lanes sampled). "
            "The JSONL files hold every record.</p>"
        )
    if not open_:
        notes.append(
            f'<p class="muted">{num(len(lanes))} lanes: collapsed (a lane is drawn when it is opened); '
            'filter, then use "expand shown".</p>'
        )
    note = generated_note(totals) if callable(generated_note) else generated_note
    note_html = f'<div class="note">{esc(note)}</div>' if note else ""
    yield (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{PAGE_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{PAGE_CSS}</style><script>{PROBE_JS}</script></head><body>"
        f"<header><h1>{esc(title)}</h1>{note_html}{replay_banner(replay_mode, totals)}"
        "</header><main>"
        + overview_html(lanes, totals)
        + '<section id="lanes"><h2>Experiences</h2>'
        + filter_bar(lanes, axis_svg(axis))
        + legend_html(any(lane.states for lane in lanes), totals.dead_letters > 0)
        + "".join(notes)
        + ('<div id="lane-list" class="packed">' if packed is not None else '<div id="lane-list">')
    )
    for i, lane in enumerate(lanes, 1):
        with drawn(lane, sources):
            html = lane_html(i, lane, table_cap, svg_cap, strip_cap, open_, axis, packed)
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
    yield f"<script>{PAGE_JS}</script></body></html>\n"


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
            f"{source} {num(totals.timeline)} timeline entries, "
            f"{num(totals.decisions)} decisions, {num(totals.dispatches)} dispatches, "
            f"{num(totals.dead_letters)} dead letters."
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

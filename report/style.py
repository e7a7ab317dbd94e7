"""The report's inline stylesheet, its CSP-violation probe and its Content-Security-Policy."""

from __future__ import annotations

from typing import Final

PAGE_CSS: Final = """
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
.badge{display:inline-block;padding:0 7px;border-radius:9px;font-size:12px;color:#fff;background:#6b7280;
white-space:nowrap}
.st-completed{background:var(--completed);fill:var(--completed)}
.st-aborted{background:var(--aborted);fill:var(--aborted)}
.st-returned{background:var(--returned);fill:var(--returned)}
.st-superseded{background:var(--superseded);fill:var(--superseded)}
.st-failed{background:var(--failed);fill:var(--failed)}
.st-blocked{background:var(--blocked);fill:var(--blocked)}
.st-active{background:var(--active);fill:var(--active)}
.st-other{background:#6b7280;fill:var(--other)}
.dr-stale,.dr-clock_skew,.dr-out_of_order,.dr-duplicate{background:#64748b}
.dr-debounced,.dr-uncorrelated,.dr-not_subscribed{background:#2563eb}
.dr-budget_exhausted,.dr-winding_down,.dr-stale_etag{background:#b45309}
.dr-plan_rejected{background:#dc2626}
.dr-condition_not_met{background:#a16207}
.dl-privacy_violation,.dl-cross_device{background:#dc2626}.dl-fact_invalid,.dl-plan_invalid{background:#b45309}
.dc-continue{background:#64748b}.dc-ask_user{background:#0e7490}.dc-replan{background:#7c3aed}
.dc-abort{background:#c2410c}.dc-return_to_station{background:#0e7490}.dc-complete{background:#15803d}
.be-rules{background:#475569}.be-gemini{background:#2563eb}.be-fallback{background:#b45309}
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
.lane .dev{border:1px solid #cbd5e1;background:#f1f5f9;border-radius:5px;padding:0 6px;color:#334155}
.lanetools{margin:0 0 6px}.devfilter{font:inherit;font-size:12px;border:1px solid #cbd5e1;background:#f1f5f9;
border-radius:5px;padding:1px 8px;cursor:pointer;color:#334155}
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
.stg.k-goal{background:var(--goal)}.stg.k-observe{background:#0369a1}.stg.k-decide{background:#b45309}
.stg.k-act{background:var(--act)}.stg.k-evidence{background:#047857}.stg.k-end{background:var(--end)}
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
# Counts what the CSP blocked (a browser test asserts zero); registered before anything loads.
PROBE_JS: Final = (
    'document.addEventListener("securitypolicyviolation",function(){var r=document.documentElement;'
    'r.setAttribute("data-blocked",String((Number(r.getAttribute("data-blocked"))||0)+1));});'
)

# Nothing may leave the page: no fetch, no image, no font, no frame.
PAGE_CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
    "base-uri 'none'; form-action 'none'"
)

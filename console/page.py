"""The console's one page: the report's stylesheet plus the console's own, and a script that follows
the server's events (``/events``), keeps every filter in the URL, and fetches a lane's drawing
(``/lane/KEY``) when it is opened. Record text reaches the page only as escaped HTML rendered by
the server or through ``textContent``.
"""

from __future__ import annotations

import json
from typing import Final

from report.safe import esc
from report.style import PAGE_CSS, PROBE_JS
from topics.records import DEADLETTER_REASONS, DECISIONS, END_STATUSES

#: the report's policy, plus reading its own server's events and lanes (nothing else leaves the page)
CONSOLE_CSP: Final = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'"
)
#: the header adds what a <meta> policy cannot say: no page may frame the console
CONSOLE_CSP_HEADER: Final = CONSOLE_CSP + "; frame-ancestors 'none'"

_CSS: Final = """
.banner-off{background:#991b1b;color:#fff;padding:8px 28px;font-weight:600}
.paused{background:#854d0e;color:#fff;padding:6px 28px}
.bar2{display:flex;gap:10px;align-items:center;margin-top:6px;color:#4b5563}
.bar2 button{font:inherit;padding:4px 10px;border:1px solid #94a3b8;border-radius:6px;background:#fff}
.card.wide{margin-top:12px}
.workers td,.workers th,.dead td,.dead th{padding:3px 8px;text-align:left;border-bottom:1px solid var(--line)}
.wk-ok{background:#15803d}.wk-bad{background:#b91c1c}
#rows{display:flex;flex-direction:column;gap:6px}
.exprow{background:#fff;border:1px solid var(--line);border-radius:8px}
.rowhead{padding:6px 10px;display:flex;gap:8px;flex-wrap:wrap;align-items:center}
.exprow .when{color:#4b5563}
.exprow .acts a{margin-left:8px}
.badge.dlb{background:#7f1d1d}
.rowhead h3{margin:0;font-size:13.5px;text-transform:none;letter-spacing:0;color:inherit;font-weight:600}
.livebox>summary{padding:0 10px 6px;cursor:pointer;color:#1d4ed8}
.lanehost{padding:0 10px 10px}
a{color:#1d4ed8}
"""

_JS: Final = r"""
(function () {
  "use strict";
  var root = document.documentElement, cfg = JSON.parse(document.getElementById("cfg").textContent);
  var rows = new Map(), lastId = "", source = null, paused = false, hiddenPause = false, workerOf = {};
  var F = ["q", "device", "status", "decision", "dead"];
  function byId(id) { return document.getElementById(id); }
  function el(tag, cls, text) {
    var e = document.createElement(tag); if (cls) { e.className = cls; }
    if (text !== undefined) { e.textContent = text; } return e;
  }
  function filters() { var f = {}; F.forEach(function (k) { f[k] = byId("f-" + k).value; }); return f; }
  function saveUrl() {
    var p = new URLSearchParams(), f = filters();
    F.forEach(function (k) { if (f[k]) { p.set(k, f[k]); } });
    var s = p.toString(); history.replaceState(null, "", s ? "?" + s : location.pathname);
  }
  function loadUrl() {
    var p = new URLSearchParams(location.search);
    F.forEach(function (k) {
      var c = byId("f-" + k), v = p.get(k) || "";
      if (c.tagName === "SELECT" && v && !Array.prototype.some.call(c.options, function (o) {
        return o.value === v; })) {
        var o = el("option", "", v); o.value = v; c.appendChild(o);
      }
      c.value = v;
    });
  }
  function shows(s, f) {
    var q = f.q.toLowerCase();
    if (q && s.experience.toLowerCase().indexOf(q) < 0 && s.device.toLowerCase().indexOf(q) < 0) {
      return false; }
    if (f.device && s.device !== f.device) { return false; }
    if (f.status && s.status !== f.status) { return false; }
    if (f.decision && s.decisions.indexOf(f.decision) < 0) { return false; }
    if (f.dead && s.dead.indexOf(f.dead) < 0) { return false; }
    return true;
  }
  function rank(s) { return s.status === "active" ? 0 : 1; }
  function order() {
    var list = Array.from(rows.values()), host = byId("rows"), f = filters(), shown = 0;
    list.sort(function (a, b) { return rank(a.s) - rank(b.s) || b.s.last_ms - a.s.last_ms; });
    list.forEach(function (r) { r.el.hidden = !shows(r.s, f); if (!r.el.hidden) { shown++;
      } host.appendChild(r.el); });
    byId("count").textContent = shown + " of " + rows.size + " lanes shown";
  }
  function link(text, href, cls) { var a = el("a", cls || "", text); a.href = href; return a; }
  function fetchLane(r) {
    if (r.loading) { r.again = true; return; }
    r.loading = true;
    fetch("lane/" + encodeURIComponent(r.s.key), {cache: "no-store"}).then(function (res) {
      return res.ok ? res.text() : "<p class=\"muted\">This lane is no longer held.</p>";
    }).then(function (html) {
      r.host.innerHTML = html; r.loading = false; r.drawn = r.s.version;
      if (r.again) { r.again = false; fetchLane(r); }
    }).catch(function () { r.loading = false; });
  }
  function fill(r) {
    var s = r.s, sum = el("div", "rowhead");
    var st = el("span", "badge st-" + (cfg.statuses.indexOf(s.status) >= 0 ? s.status : "other"), s.status);
    sum.appendChild(st);
    sum.appendChild(el("h3", "mono exp", s.experience || "no experience"));
    var dev = el("button", "dev mono", s.device || "?"); dev.type = "button";
      dev.title = "show only this device";
    dev.addEventListener("click", function (ev) { ev.preventDefault();
      byId("f-device").value = s.device; changed(); });
    sum.appendChild(dev);
    s.decisions.forEach(function (d) {
      sum.appendChild(el("span", "badge dc-" + (cfg.decisions.indexOf(d) >= 0 ? d : "other"), d)); });
    s.dead.forEach(function (d) {
      sum.appendChild(el("span", "badge dlb", "dead letter: " + d)); });
    sum.appendChild(el("span", "when mono", new Date(s.last_ms).toISOString().slice(11, 23) + "Z"));
    var acts = el("span", "acts");
    var w = workerOf[s.partition];
    var held = w !== undefined ? " · worker " + (w + 1) : "";
    acts.appendChild(link("partition " + s.partition + held, w !== undefined ? "#worker-" + w : "#overview"));
    acts.appendChild(link("records (kcat -J)", "lane/" + encodeURIComponent(s.key) + "/records.jsonl"));
    acts.appendChild(link("offline report", "lane/" + encodeURIComponent(s.key) + "/report"));
    sum.appendChild(acts);
    r.el.replaceChild(sum, r.el.firstChild);
    r.el.dataset.status = s.status;
    if (r.box.open && r.drawn !== s.version) { fetchLane(r); }
  }
  function upsert(s) {
    var r = rows.get(s.key);
    if (!r) {
      var row = el("div", "exprow"), d = el("details", "livebox"), host = el("div", "lanehost");
      row.appendChild(el("div", "rowhead")); row.appendChild(d); row.dataset.key = s.key;
      d.appendChild(el("summary", "", "lane")); d.appendChild(host);
      r = {s: s, el: row, box: d, host: host, drawn: -1};
      d.addEventListener("toggle", function () { if (d.open && r.drawn !== r.s.version) { fetchLane(r);
        } });
      rows.set(s.key, r);
    }
    r.s = s; fill(r);
    while (rows.size > cfg.maxLanes) { var oldest = null;
      rows.forEach(function (x) { if (!oldest || x.s.last_ms < oldest.s.last_ms) { oldest = x; } });
      drop(oldest.s.key); }
  }
  function drop(key) { var r = rows.get(key); if (r) { r.el.remove(); rows.delete(key); } }
  function banner(downMs, what) {
    var b = byId("banner");
    if (downMs) { b.hidden = false;
      var at = new Date(downMs).toISOString().replace("T", " ").slice(0, 19) + "Z";
      b.textContent = "Disconnected from the " + what + " since " + at + "; reconnecting…"; }
    else { b.hidden = true; b.textContent = ""; }
  }
  var consoleDown = 0;
  function onUpdate(ev) {
    var m = JSON.parse(ev.data); lastId = ev.lastEventId || lastId; consoleDown = 0;
    if (m.reset) { rows.forEach(function (r) { r.el.remove(); }); rows.clear(); }
    workerOf = m.worker_of || {};
    byId("overview").innerHTML = m.overview;
    m.removed.forEach(drop); m.lanes.forEach(upsert);
    banner(m.down_since_ms, "broker");
    order();
  }
  function connect() {
    if (source) { return; }
    source = new EventSource("events" + (lastId ? "?last=" + encodeURIComponent(lastId) : ""));
    source.addEventListener("update", onUpdate);
    source.addEventListener("open", function () { if (consoleDown) { consoleDown = 0; banner(0); } });
    source.addEventListener("error", function () {
      if (!consoleDown) { consoleDown = Date.now(); } banner(consoleDown, "console");
    });
  }
  function disconnect() { if (source) { source.close(); source = null; } }
  function setPause() {
    var stop = paused || hiddenPause; byId("paused").hidden = !stop;
    byId("pause").textContent = paused ? "resume updates" : "pause updates";
    if (stop) { disconnect(); } else { connect(); }
  }
  function changed() { saveUrl(); order(); }
  F.forEach(function (k) { byId("f-" + k).addEventListener("input", changed);
    byId("f-" + k).addEventListener("change", changed); });
  byId("f-reset").addEventListener("click", function () { F.forEach(function (k) {
    byId("f-" + k).value = ""; }); changed(); });
  byId("pause").addEventListener("click", function () { paused = !paused; setPause(); });
  document.addEventListener("visibilitychange", function () { hiddenPause = document.hidden; setPause(); });
  byId("overview").addEventListener("click", function (ev) {
    var a = ev.target.closest("a.flt"); if (!a) { return; }
    ev.preventDefault(); var c = byId("f-" + a.dataset.filter), v = a.dataset.value;
    if (!Array.prototype.some.call(c.options, function (o) { return o.value === v; })) {
      var o = el("option", "", v); o.value = v; c.appendChild(o); }
    c.value = v; changed();
  });
  loadUrl(); hiddenPause = document.hidden; setPause();
  root.setAttribute("data-ready", "1");
}());
"""


def _options(values: tuple[str, ...], label: str) -> str:
    return f'<option value="">{esc(label)}</option>' + "".join(
        f'<option value="{esc(v)}">{esc(v)}</option>' for v in values
    )


def console_page(title: str, max_lanes: int) -> str:
    """The page (its data comes through ``/events``)."""
    statuses = ("active", *END_STATUSES, "unscoped")
    cfg = {
        "maxLanes": max_lanes,
        "statuses": list(statuses),
        "decisions": list(DECISIONS),
        "dead": list(DEADLETTER_REASONS),
    }
    cfg_json = json.dumps(cfg).replace("<", "\\u003c")
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CONSOLE_CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<meta name="referrer" content="no-referrer"><link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{PAGE_CSS}{_CSS}</style><script>{PROBE_JS}</script></head><body>"
        '<div id="banner" class="banner-off" role="alert" hidden></div>'
        '<div id="paused" class="paused" role="status" hidden>Updates paused.</div>'
        f"<header><h1>{esc(title)}</h1>"
        '<div class="bar2"><span>Live: Goal → Observe → Decide → Act → Evidence → End, per experience. '
        'Read-only.</span><button type="button" id="pause">pause updates</button></div></header><main>'
        '<section aria-labelledby="h-overview"><h2 id="h-overview">Fleet overview</h2>'
        '<div id="overview"><p class="muted">Waiting for the console…</p></div></section>'
        '<section aria-labelledby="h-exp"><h2 id="h-exp">Experiences</h2>'
        '<div class="filters" role="search">'
        '<input type="search" id="f-q" placeholder="search experience or device…" '
        'aria-label="search experience or device" autocomplete="off">'
        '<input type="text" id="f-device" placeholder="device" aria-label="device" autocomplete="off">'
        f'<select id="f-status" aria-label="status">{_options(statuses, "any status")}</select>'
        f'<select id="f-decision" aria-label="decision">{_options(DECISIONS, "any decision")}</select>'
        '<select id="f-dead" aria-label="dead-letter reason">'
        f"{_options(DEADLETTER_REASONS, 'any dead letter')}</select>"
        '<button type="button" id="f-reset">reset</button>'
        '<span class="count" id="count" role="status"></span>'
        '</div><div id="rows"></div></section></main>'
        "<footer>Times are UTC. Dead letters show reason and coordinates, never a payload. The console "
        "holds the last lanes and records only (see its settings); the JSONL export holds every record."
        "</footer>"
        f'<script type="application/json" id="cfg">{cfg_json}</script>'
        f"<script>{_JS}</script></body></html>\n"
    )

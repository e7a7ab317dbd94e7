"""The report's inline script: filters, order, shared axis, and lanes drawn on demand."""

from __future__ import annotations

from typing import Final

PAGE_JS: Final = """
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

"""The compare page's own CSS and script (the run report's CSS comes first: same cards, same
overlays). The script renders the cards from the page's JSON blob with DOM calls and
`textContent` only, as the run report's does."""

from __future__ import annotations

CSS = """
.runkey { display: flex; gap: 18px; flex-wrap: wrap; margin: 6px 0; }
.runkey .sw { display: inline-block; width: 26px; height: 0; border-top: 3px solid; vertical-align: middle; margin-right: 5px; }
.card .answers { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 8px; margin-top: 6px; }
.card .answers .who { font-weight: 600; }
.card .answers pre.answer { max-height: 160px; }
table.heat { border-collapse: collapse; margin: 4px 0 14px; font-size: 12px; }
table.heat th, table.heat td { border: 1px solid var(--line); padding: 2px 6px; text-align: center; min-width: 44px; }
table.heat th { background: var(--panel); font-weight: 600; }
table.heat td.empty { background: #eee; color: var(--muted); }
.pairing { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; white-space: pre-wrap; }
"""

JS = r"""
(function () {
  "use strict";
  var blob = document.getElementById("np-data");
  if (!blob) { return; }
  var data = JSON.parse(blob.textContent);
  var items = data.items, runs = data.runs;
  var PAGE = data.page_size || 50;
  var hay = items.map(function (it) { return (it.id + "\n" + it.p + "\n" + it.a.join("\n")).toLowerCase(); });
  var state = { outcome: "", q: "", sel: {}, page: 0 };
  var shown = [];

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function byId(id) { return document.getElementById(id); }

  var selects = byId("np-selects");
  data.filters.forEach(function (f) {
    var lab = el("label", null, f.key + " ");
    var s = el("select");
    s.setAttribute("data-filter", f.key);
    var all = el("option", null, "all");
    all.value = "";
    s.appendChild(all);
    f.values.forEach(function (v) {
      var o = el("option", null, v[0] + " (" + v[1] + ")");
      o.value = v[0];
      s.appendChild(o);
    });
    s.addEventListener("change", function () { state.sel[f.key] = s.value; state.page = 0; update(); });
    lab.appendChild(s);
    selects.appendChild(lab);
  });

  // "only:K" (run K alone right), "all" (every run right), "none" (every run wrong), "differ".
  function outcome(it, want) {
    if (!want) { return true; }
    var c = it.c;
    if (c.some(function (v) { return v === null; })) { return false; }
    var right = c.filter(function (v) { return v; }).length;
    if (want === "all") { return right === c.length; }
    if (want === "none") { return right === 0; }
    if (want === "differ") { return right > 0 && right < c.length; }
    var k = parseInt(want.slice(5), 10);
    return right === 1 && c[k] === true;
  }

  function matches(i) {
    var it = items[i];
    if (!outcome(it, state.outcome)) { return false; }
    for (var k in state.sel) {
      if (state.sel[k] && (it.k[k] === undefined || it.k[k] !== state.sel[k])) { return false; }
    }
    if (state.q && hay[i].indexOf(state.q) < 0) { return false; }
    return true;
  }

  // Every run's boxes over the image, each run in its own colour and dash; ground truth solid.
  function overlay(width, height, boxes) {
    var NS = "http://www.w3.org/2000/svg";
    var svg = document.createElementNS(NS, "svg");
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("aria-hidden", "true");
    boxes.forEach(function (b) {
      var r = document.createElementNS(NS, "rect");
      r.setAttribute("x", b[0]);
      r.setAttribute("y", b[1]);
      r.setAttribute("width", b[2] - b[0]);
      r.setAttribute("height", b[3] - b[1]);
      if (b[4] < 0) {
        r.setAttribute("stroke", data.gt_colour);
        r.setAttribute("class", "gt");
      } else {
        r.setAttribute("stroke", runs[b[4]].colour);
        r.setAttribute("stroke-dasharray", runs[b[4]].dash);
        r.setAttribute("class", "run run-" + b[4]);
      }
      svg.appendChild(r);
    });
    return svg;
  }

  function badge(run, c) {
    if (c === true) { return el("span", "badge ok", run.letter + " right"); }
    if (c === false) { return el("span", "badge bad", run.letter + " wrong"); }
    return el("span", "badge na", run.letter + " not scored");
  }

  function card(it) {
    var c = el("article", "card");
    c.setAttribute("data-id", it.id);
    if (it.im.length) {
      var imgs = el("div", "imgs");
      it.im.forEach(function (t) {
        var fig = el("figure");
        if (t[0]) {
          var frame = el("div", "frame");
          var img = el("img");
          img.loading = "lazy";
          img.decoding = "async";
          img.width = t[1];
          img.height = t[2];
          img.alt = t[3];
          img.src = t[0];
          frame.appendChild(img);
          frame.appendChild(overlay(t[1], t[2], t[4]));
          fig.appendChild(frame);
        } else {
          fig.appendChild(el("div", "note", "image unavailable"));
        }
        if (it.im.length > 1) { fig.appendChild(el("figcaption", null, t[3])); }
        imgs.appendChild(fig);
      });
      c.appendChild(imgs);
    }
    var body = el("div", "body");
    var head = el("div", "head");
    head.appendChild(el("span", "sid", "#" + it.id));
    runs.forEach(function (run, k) { head.appendChild(badge(run, it.c[k])); });
    Object.keys(it.k).forEach(function (k) { head.appendChild(el("span", "note", k + ": " + it.k[k])); });
    body.appendChild(head);
    body.appendChild(el("div", "lbl", data.prompt_label));
    body.appendChild(el("div", "prompt", it.p));
    var answers = el("div", "answers");
    runs.forEach(function (run, k) {
      var box = el("div", "ans");
      var who = el("div", "lbl");
      who.appendChild(el("span", "who", run.letter + ": " + run.name));
      box.appendChild(who);
      box.appendChild(el("pre", "answer", it.a[k]));
      if (it.f[k].length) {
        var t = el("table", "fields");
        it.f[k].forEach(function (kv) {
          var row = el("tr");
          row.appendChild(el("td", null, kv[0]));
          row.appendChild(el("td", null, kv[1]));
          t.appendChild(row);
        });
        box.appendChild(t);
      }
      answers.appendChild(box);
    });
    body.appendChild(answers);
    if (it.g.length) {
      var tg = el("table", "fields");
      it.g.forEach(function (kv) {
        var row = el("tr");
        row.appendChild(el("td", null, kv[0]));
        row.appendChild(el("td", null, kv[1]));
        tg.appendChild(row);
      });
      body.appendChild(tg);
    }
    c.appendChild(body);
    return c;
  }

  function render() {
    var box = byId("np-cards");
    while (box.firstChild) { box.removeChild(box.firstChild); }
    var pages = Math.max(1, Math.ceil(shown.length / PAGE));
    if (state.page >= pages) { state.page = pages - 1; }
    var start = state.page * PAGE;
    var frag = document.createDocumentFragment();
    shown.slice(start, start + PAGE).forEach(function (i) { frag.appendChild(card(items[i])); });
    box.appendChild(frag);
    byId("np-pageinfo").textContent = "page " + (state.page + 1) + " of " + pages;
    document.querySelectorAll("button[data-page]").forEach(function (b) {
      var d = b.getAttribute("data-page");
      b.disabled = d === "prev" ? state.page === 0 : state.page >= pages - 1;
    });
  }

  function update() {
    var list = [];
    for (var i = 0; i < items.length; i++) { if (matches(i)) { list.push(i); } }
    shown = list;
    var count = byId("np-count");
    count.textContent = shown.length + " of " + items.length + " paired samples";
    count.setAttribute("data-count", String(shown.length));
    count.setAttribute("data-total", String(items.length));
    render();
  }

  var out = byId("np-outcome");
  out.addEventListener("change", function () { state.outcome = out.value; state.page = 0; update(); });
  var timer = null;
  byId("np-search").addEventListener("input", function (e) {
    clearTimeout(timer);
    var v = e.target.value;
    timer = setTimeout(function () { state.q = v.trim().toLowerCase(); state.page = 0; update(); }, 120);
  });
  document.querySelectorAll("button[data-page]").forEach(function (b) {
    b.addEventListener("click", function () {
      var pages = Math.max(1, Math.ceil(shown.length / PAGE));
      state.page = b.getAttribute("data-page") === "prev" ? Math.max(0, state.page - 1) : Math.min(pages - 1, state.page + 1);
      render();
    });
  });
  update();
  document.body.setAttribute("data-ready", "1");
})();
"""

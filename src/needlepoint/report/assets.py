"""The CSS and JavaScript of the HTML reports, inlined into every page (the pages work offline).

The script renders sample cards from the page's JSON blob with DOM calls and `textContent` only:
no data ever passes through `innerHTML`.
"""

from __future__ import annotations

CSS = """
:root { --fg:#1f2328; --muted:#59636e; --line:#d1d9e0; --bg:#ffffff; --panel:#f6f8fa; --accent:#0969da;
  --ok:#1a7f37; --bad:#cf222e; --warn:#9a6700; --gt:#1fbf4a; --pred:#e0218a; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
  color: var(--fg); background: var(--bg); }
header.top { padding: 14px 24px; border-bottom: 1px solid var(--line); background: var(--panel); }
header.top h1 { margin: 0; font-size: 20px; }
header.top .sub { color: var(--muted); margin-top: 2px; }
nav.toc { margin-top: 6px; }
nav.toc a { margin-right: 14px; }
main { padding: 8px 24px 40px; max-width: 1500px; }
h2 { font-size: 17px; margin: 22px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 14px; margin: 14px 0 6px; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
table.metrics, table.board { border-collapse: collapse; margin: 4px 0 12px; }
table.metrics th, table.metrics td, table.board th, table.board td {
  border: 1px solid var(--line); padding: 3px 8px; }
table.metrics th, table.board th { background: var(--panel); font-weight: 600; }
table.metrics td.num, table.board td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.board tr.published td { color: var(--muted); font-style: italic; }
table.board th.sortable { cursor: pointer; }
dl.config { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 6px 18px; margin: 4px 0 8px; }
dl.config div { min-width: 0; }
dl.config dt { color: var(--muted); font-size: 11px; text-transform: uppercase; letter-spacing: .04em; }
dl.config dd { margin: 0; font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12px; word-break: break-all; }
details summary { cursor: pointer; color: var(--accent); }
pre.json { background: var(--panel); padding: 8px; overflow: auto; max-height: 360px; font-size: 12px; }
.note { color: var(--muted); }
.heatmaps { display: flex; flex-wrap: wrap; gap: 12px; }
.heatmaps figure { margin: 0; }
.heatmaps img { height: auto; }
.heatmaps figure.main img { max-width: min(100%, 1100px); }
.heatmaps figure.small { flex: 0 1 calc(50% - 6px); min-width: 420px; }
.heatmaps figure.small img { width: 100%; }
.heatmaps figcaption { color: var(--muted); font-size: 12px; }
.controls { display: flex; flex-wrap: wrap; gap: 10px 18px; align-items: center; padding: 10px 12px;
  background: var(--panel); border: 1px solid var(--line); border-radius: 6px; position: sticky; top: 0; z-index: 2; }
.controls label { white-space: nowrap; }
.controls input[type=search] { width: 260px; padding: 3px 6px; }
.controls select { padding: 2px 4px; }
.countline { margin: 10px 0 6px; display: flex; gap: 16px; align-items: center; flex-wrap: wrap; }
#np-count { font-weight: 600; }
.legend { display: flex; gap: 14px; flex-wrap: wrap; color: var(--muted); font-size: 12px; }
.legend .sw { display: inline-block; width: 22px; height: 0; border-top: 3px solid; vertical-align: middle; margin-right: 4px; }
.legend .sw.dashed { border-top-style: dashed; }
.pager { display: flex; gap: 8px; align-items: center; margin: 10px 0; }
.pager button { padding: 2px 10px; }
.cards { display: flex; flex-direction: column; gap: 10px; }
.cards.compact { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); }
.card { display: flex; gap: 14px; border: 1px solid var(--line); border-radius: 6px; padding: 10px; background: var(--bg); }
.card .imgs { display: flex; gap: 6px; flex: 0 0 auto; }
.card .imgs figure { margin: 0; }
.card .imgs .frame { position: relative; width: fit-content; background: var(--panel); border: 1px solid var(--line); }
.card .imgs img { display: block; max-width: 320px; max-height: 300px; width: auto; height: auto; image-orientation: none; }
.card .imgs svg { position: absolute; left: 0; top: 0; width: 100%; height: 100%; pointer-events: none; }
.card .imgs rect { fill: none; stroke-width: 2px; vector-effect: non-scaling-stroke; }
.card .imgs rect.pred { stroke-dasharray: 7 5; }
.card .imgs figcaption { color: var(--muted); font-size: 11px; }
.card .body { flex: 1 1 auto; min-width: 0; }
.card .head { display: flex; gap: 10px; align-items: baseline; flex-wrap: wrap; margin-bottom: 4px; }
.card .sid { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-weight: 600; }
.badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 12px; color: #fff; }
.badge.ok { background: var(--ok); } .badge.bad { background: var(--bad); } .badge.err { background: var(--warn); }
.badge.na { background: var(--muted); } .badge.fail { background: #6e40c9; }
.card .imgs.many { flex-wrap: wrap; max-width: 420px; max-height: 420px; overflow: auto; }
.card .imgs.many img { max-width: 96px; max-height: 96px; }
.card details.seen, .card details.ctx { margin-top: 6px; }
.card details.seen .msg { border-left: 3px solid var(--line); padding-left: 8px; margin: 6px 0; }
.card details.seen .role { color: var(--muted); font-size: 11px; text-transform: uppercase; letter-spacing: .04em; }
.card pre.sent { margin: 2px 0; white-space: pre-wrap; word-break: break-word; max-height: 320px; overflow: auto; font-size: 12px;
  background: var(--panel); padding: 4px 6px; border-radius: 4px; }
.card .sentimg { display: flex; gap: 8px; align-items: center; margin: 3px 0; }
.card .sentimg img { max-width: 120px; max-height: 120px; border: 1px solid var(--line); }
.card .lbl { color: var(--muted); font-size: 11px; text-transform: uppercase; letter-spacing: .04em; margin-top: 6px; }
.card .prompt { margin: 2px 0; white-space: pre-wrap; word-break: break-word; }
.card .context { max-height: 220px; overflow: auto; font-size: 12px; }
.card pre.answer { margin: 2px 0; padding: 6px 8px; background: var(--panel); border-radius: 4px; white-space: pre-wrap;
  word-break: break-word; max-height: 220px; overflow: auto; font-size: 12px; }
.card table.fields { border-collapse: collapse; margin-top: 6px; font-size: 12px; }
.card table.fields td { border: 1px solid var(--line); padding: 1px 6px; }
.card table.fields td:first-child { color: var(--muted); }
.runs { display: flex; flex-direction: column; gap: 14px; }
.run { border: 1px solid var(--line); border-radius: 6px; padding: 8px 14px; }
.run h2 { border: 0; margin: 6px 0; }
.run img.heat { max-width: min(100%, 900px); }
"""

# The sample browser. Reads the JSON blob in #np-data; builds everything with createElement and
# textContent. Counts are exposed on #np-count (data-count, data-total) for people and tests.
# The card list both sample pages share (the run report's and the compare page's): DOM helpers,
# filter selects, the boxes over an image, and the paging, counting and search of the cards. Each
# page's script is this text followed by its own, inside one function (`cards_script`).
CARDS = r"""
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) { e.className = cls; }
    if (text !== undefined && text !== null) { e.textContent = String(text); }
    return e;
  }
  function byId(id) { return document.getElementById(id); }

  // One select per filter key; a choice sets state.sel[key] and shows the first page.
  function filterSelects(filters, state, update) {
    var selects = byId("np-selects");
    filters.forEach(function (f) {
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
  }
  function selected(it, state) {
    for (var k in state.sel) {
      if (state.sel[k] && (it.k[k] === undefined || it.k[k] !== state.sel[k])) { return false; }
    }
    return true;
  }

  // The boxes over an image: an SVG in the image's own pixels, stretched over the thumbnail;
  // `paint(rect, box)` gives each rectangle its stroke.
  function overlay(width, height, boxes, paint) {
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
      paint(r, b);
      svg.appendChild(r);
    });
    return svg;
  }

  // A card's images ([src, width, height, name, boxes, undrawn]), each with its boxes over it (a size of
  // 0 x 0: an image shown from its own file without boxes, whose size the report did not read).
  function imageStrip(images, paint) {
    var imgs = el("div", images.length > 4 ? "imgs many" : "imgs");
    images.forEach(function (t) {
      var fig = el("figure");
      if (t[0]) {
        var frame = el("div", "frame");
        var img = el("img");
        img.loading = "lazy";
        img.decoding = "async";
        if (t[1] && t[2]) { img.width = t[1]; img.height = t[2]; }
        img.alt = t[3];
        img.src = t[0];
        frame.appendChild(img);
        if (t[1] && t[2]) { frame.appendChild(overlay(t[1], t[2], t[4], paint)); }
        fig.appendChild(frame);
      } else {
        fig.appendChild(el("div", "note", t[5] ? "not drawn yet (the same eval command run again draws it)" : "image unavailable"));
      }
      if (images.length > 1) { fig.appendChild(el("figcaption", null, t[3])); }
      imgs.appendChild(fig);
    });
    return imgs;
  }

  // A table of [name, value] pairs, `perRow` pairs a row.
  function fieldsTable(pairs, perRow) {
    var t = el("table", "fields");
    var row = el("tr");
    pairs.forEach(function (kv, n) {
      if (n && n % perRow === 0) { t.appendChild(row); row = el("tr"); }
      row.appendChild(el("td", null, kv[0]));
      row.appendChild(el("td", null, kv[1]));
    });
    t.appendChild(row);
    return t;
  }

  // The cards of the samples `matches(i)` keeps, in `order(list)`, `page` at a time: the count
  // line, the pagers (first, previous, next, last) and the search box. Returns `update`, which the
  // page's own controls call after changing `state`.
  function cardList(items, hay, state, page, noun, matches, order, card) {
    var shown = [];
    function pages() { return Math.max(1, Math.ceil(shown.length / page)); }
    function render() {
      var box = byId("np-cards");
      while (box.firstChild) { box.removeChild(box.firstChild); }
      if (state.page >= pages()) { state.page = pages() - 1; }
      var start = state.page * page;
      var frag = document.createDocumentFragment();
      shown.slice(start, start + page).forEach(function (i) { frag.appendChild(card(items[i])); });
      box.appendChild(frag);
      ["np-pageinfo", "np-pageinfo2"].forEach(function (id) {
        var info = byId(id);
        if (info) { info.textContent = "page " + (state.page + 1) + " of " + pages(); }
      });
      document.querySelectorAll("button[data-page]").forEach(function (b) {
        var d = b.getAttribute("data-page");
        b.disabled = (d === "prev" || d === "first") ? state.page === 0 : state.page >= pages() - 1;
      });
    }
    function update() {
      var list = [];
      for (var i = 0; i < items.length; i++) {
        if (matches(items[i]) && (!state.q || hay[i].indexOf(state.q) >= 0)) { list.push(i); }
      }
      shown = order(list);
      var count = byId("np-count");
      count.textContent = shown.length + " of " + items.length + " " + noun;
      count.setAttribute("data-count", String(shown.length));
      count.setAttribute("data-total", String(items.length));
      render();
    }
    var timer = null;
    byId("np-search").addEventListener("input", function (e) {
      clearTimeout(timer);
      var v = e.target.value;
      timer = setTimeout(function () { state.q = v.trim().toLowerCase(); state.page = 0; update(); }, 120);
    });
    document.querySelectorAll("button[data-page]").forEach(function (b) {
      b.addEventListener("click", function () {
        var d = b.getAttribute("data-page");
        state.page = d === "first" ? 0 : d === "last" ? pages() - 1 : d === "prev" ? Math.max(0, state.page - 1)
          : Math.min(pages() - 1, state.page + 1);
        render();
        if (b.getAttribute("data-scroll")) { byId("samples").scrollIntoView(); }
      });
    });
    return update;
  }
"""


def cards_script(own: str) -> str:
    """A sample page's script: the shared card list (CARDS) and the page's `own` code, which reads
    the page's JSON blob as `data`, in one strict function."""
    return (
        '\n(function () {\n  "use strict";\n  var blob = document.getElementById("np-data");\n  if (!blob) { return; }\n'
        "  var data = JSON.parse(blob.textContent);\n" + CARDS + own + '  document.body.setAttribute("data-ready", "1");\n})();\n'
    )


JS = cards_script(
    r"""
  var items = data.items;
  var hay = items.map(function (it) { return (it.id + "\n" + it.p + "\n" + it.a).toLowerCase(); });
  var state = { wrong: false, errors: false, failed: false, q: "", sort: "run", sel: {}, page: 0 };

  var sortSel = byId("np-sort");
  if (data.sort_label) {
    [["up", data.sort_label + " low to high"], ["down", data.sort_label + " high to low"]].forEach(function (o) {
      var opt = el("option", null, o[1]);
      opt.value = o[0];
      sortSel.appendChild(opt);
    });
  }

  function matches(it) {
    if (state.wrong && (it.c !== false || it.st)) { return false; }
    if (state.failed && !it.st) { return false; }
    if (state.errors && !it.e) { return false; }
    return selected(it, state);
  }

  function order(list) {
    if (state.sort === "run") { return list; }
    var sign = state.sort === "up" ? 1 : -1;
    return list.slice().sort(function (a, b) {
      var x = items[a].s, y = items[b].s;
      if (x === null && y === null) { return a - b; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      return (x - y) * sign || a - b;
    });
  }

  // Ground truth and predictions: the colour the box carries, predictions dashed.
  function paint(r, b) {
    r.setAttribute("stroke", b[4]);
    if (b[5]) { r.setAttribute("class", "pred"); }
  }

  function badge(it) {
    if (it.st) { return el("span", "badge fail", "failed request: " + it.st); }
    if (it.e) { return el("span", "badge err", "parse error: " + it.e); }
    if (it.c === true) { return el("span", "badge ok", "correct"); }
    if (it.c === false) { return el("span", "badge bad", "wrong"); }
    return el("span", "badge na", "not scored");
  }

  // What the model saw: each turn's messages as sent, folded; built when first opened.
  function seen(turns) {
    var box = el("details", "seen");
    var n = 0;
    turns.forEach(function (t) { t[1].forEach(function (m) { n += m[1].length; }); });
    box.appendChild(el("summary", null, "What the model saw (" + turns.length + " turn" + (turns.length > 1 ? "s" : "") +
      ", " + n + " part" + (n === 1 ? "" : "s") + ")"));
    box.addEventListener("toggle", function () {
      if (!box.open || box.getAttribute("data-built")) { return; }
      box.setAttribute("data-built", "1");
      turns.forEach(function (t) {
        if (turns.length > 1) { box.appendChild(el("div", "lbl", t[0])); }
        t[1].forEach(function (m) {
          var msg = el("div", "msg");
          msg.appendChild(el("span", "role", m[0]));
          m[1].forEach(function (p) {
            if (p[0] === "t") { msg.appendChild(el("pre", "sent", p[1])); return; }
            var im = el("div", "sentimg");
            if (p[6]) {
              var img = el("img");
              img.loading = "lazy";
              img.alt = p[1];
              img.src = p[6];
              im.appendChild(img);
            }
            var size = (p[2] && p[3] ? p[2] + "×" + p[3] + " px" : "size unknown") + (p[4] ? ", " + p[4] + " bytes" : "");
            im.appendChild(el("span", "note", "image " + p[1] + " (" + size + (p[5] ? ", sha256 " + p[5].slice(0, 12) : "") + ")"));
            msg.appendChild(im);
          });
          box.appendChild(msg);
        });
      });
    });
    return box;
  }

  function card(it) {
    var c = el("article", "card");
    c.setAttribute("data-id", it.id);
    if (it.im.length) { c.appendChild(imageStrip(it.im, paint)); }
    var body = el("div", "body");
    var head = el("div", "head");
    head.appendChild(el("span", "sid", "#" + it.id));
    head.appendChild(badge(it));
    if (data.sort_label && it.s !== null && !it.st) {
      head.appendChild(el("span", "note", data.sort_label + " " + (Math.round(it.s * 10000) / 10000)));
    }
    var shownFields = {};
    it.f.forEach(function (kv) { shownFields[kv[0]] = true; });
    Object.keys(it.k).forEach(function (k) {
      if (!shownFields[k]) { head.appendChild(el("span", "note", k + ": " + it.k[k])); }
    });
    body.appendChild(head);
    body.appendChild(el("div", "lbl", data.prompt_label));
    body.appendChild(el("div", "prompt", it.p));
    if (it.x) {
      var fold = el("details", "ctx");
      var chars = 0;
      it.x.forEach(function (run) { chars += run[0].length; });
      fold.appendChild(el("summary", null, it.xl + " (" + chars + " characters shown)"));
      var ctx = el("div", "prompt context");
      it.x.forEach(function (run) { ctx.appendChild(run[1] ? el("mark", null, run[0]) : document.createTextNode(run[0])); });
      fold.appendChild(ctx);
      body.appendChild(fold);
    }
    if (it.w) { body.appendChild(seen(it.w)); }
    body.appendChild(el("div", "lbl", "model answer"));
    body.appendChild(el("pre", "answer", it.a));
    if (it.r) {
      var think = el("details", "reasoning");
      think.appendChild(el("summary", null, "reasoning (" + it.r.length + " characters)"));
      think.appendChild(el("pre", "answer", it.r));
      body.appendChild(think);
    }
    if (it.f.length) { body.appendChild(fieldsTable(it.f, 4)); }
    c.appendChild(body);
    return c;
  }

  var update = cardList(items, hay, state, data.page_size || 50, "samples", matches, order, card);
  filterSelects(data.filters, state, update);
  byId("np-wrong").addEventListener("change", function (e) { state.wrong = e.target.checked; state.page = 0; update(); });
  byId("np-errors").addEventListener("change", function (e) { state.errors = e.target.checked; state.page = 0; update(); });
  byId("np-failed").addEventListener("change", function (e) { state.failed = e.target.checked; state.page = 0; update(); });
  sortSel.addEventListener("change", function () { state.sort = sortSel.value; state.page = 0; update(); });
  update();
"""
)

# Click a leaderboard column header to sort by it (numbers descending, text ascending).
BOARD_JS = r"""
(function () {
  "use strict";
  document.querySelectorAll("table.board").forEach(function (table) {
    var heads = table.querySelectorAll("thead th");
    heads.forEach(function (th, col) {
      th.classList.add("sortable");
      th.title = "sort by this column";
      th.addEventListener("click", function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var desc = th.getAttribute("data-dir") !== "desc";
        heads.forEach(function (h) { h.removeAttribute("data-dir"); });
        th.setAttribute("data-dir", desc ? "desc" : "asc");
        rows.sort(function (a, b) {
          var x = a.cells[col].textContent, y = b.cells[col].textContent;
          var nx = parseFloat(x), ny = parseFloat(y);
          if (x === "" && y !== "") { return 1; }
          if (y === "" && x !== "") { return -1; }
          if (!isNaN(nx) && !isNaN(ny)) { return desc ? ny - nx : nx - ny; }
          return desc ? y.localeCompare(x) : x.localeCompare(y);
        });
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  });
})();
"""

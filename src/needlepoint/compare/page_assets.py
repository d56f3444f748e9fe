"""The compare page's own CSS and script (the run report's CSS comes first: same cards, same
overlays). The script renders the cards from the page's JSON blob with DOM calls and
`textContent` only, as the run report's does."""

from __future__ import annotations

from needlepoint.report.assets import cards_script

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

JS = cards_script(
    r"""
  var items = data.items, runs = data.runs;
  var hay = items.map(function (it) { return (it.id + "\n" + it.p + "\n" + it.a.join("\n")).toLowerCase(); });
  var state = { outcome: "", q: "", sel: {}, page: 0 };

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

  function matches(it) { return outcome(it, state.outcome) && selected(it, state); }

  // Every run's boxes in its own colour and dash; ground truth solid.
  function paint(r, b) {
    if (b[4] < 0) {
      r.setAttribute("stroke", data.gt_colour);
      r.setAttribute("class", "gt");
    } else {
      r.setAttribute("stroke", runs[b[4]].colour);
      r.setAttribute("stroke-dasharray", runs[b[4]].dash);
      r.setAttribute("class", "run run-" + b[4]);
    }
  }

  function badge(run, c) {
    if (c === true) { return el("span", "badge ok", run.letter + " right"); }
    if (c === false) { return el("span", "badge bad", run.letter + " wrong"); }
    return el("span", "badge na", run.letter + " not scored");
  }

  function card(it) {
    var c = el("article", "card");
    c.setAttribute("data-id", it.id);
    if (it.im.length) { c.appendChild(imageStrip(it.im, paint)); }
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
      if (it.f[k].length) { box.appendChild(fieldsTable(it.f[k], 1)); }
      answers.appendChild(box);
    });
    body.appendChild(answers);
    if (it.g.length) { body.appendChild(fieldsTable(it.g, 1)); }
    c.appendChild(body);
    return c;
  }

  var update = cardList(items, hay, state, data.page_size || 50, "paired samples", matches, function (list) { return list; }, card);
  filterSelects(data.filters, state, update);
  var out = byId("np-outcome");
  out.addEventListener("change", function () { state.outcome = out.value; state.page = 0; update(); });
  update();
"""
)

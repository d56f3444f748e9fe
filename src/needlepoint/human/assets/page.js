// needlepoint human baseline page: one sample at a time, answers posted to the local server.
// Every text from the data goes in through textContent; nothing is ever set through innerHTML.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

const app = {
  state: null,      // /api/state
  idx: -1,          // position in state.order of the sample shown
  view: null,       // /api/sample of that sample
  boxes: [],        // {image, group, bbox: [x1, y1, x2, y2], score}
  selected: -1,
  picked: false,    // the selected box was clicked (its group keys change it), not just drawn
  group: 1,         // the group of the next box drawn: chosen before drawing, 1 on every new sample
  panes: [],        // {index, width, height, zoom, stage, svg, scroller}
  gt: [],           // expected boxes shown after a gold sample
  phase: "intro",   // intro | answer | gold | finished
  elapsed: 0,       // ms on this sample, counted while the tab is visible
  since: null,
  drag: null,
  busy: false,
  option: null,
};

function el(tag, attrs, text) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

function svgEl(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function colour(group) {
  const c = app.state.colours;
  return c[(Math.max(1, group) - 1) % c.length];
}

function message(text, kind) {
  const m = $("message");
  m.textContent = text || "";
  m.className = kind || "";
}

async function api(path, body) {
  const init = body === undefined ? {} : { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) };
  const response = await fetch(path, init);
  let data = null;
  try { data = await response.json(); } catch (e) { data = null; }
  if (!response.ok) throw new Error((data && data.error) || `the server answered ${response.status}`);
  return data;
}

// --- the clock ----------------------------------------------------------------------------------

function clockStart() { app.elapsed = 0; app.since = document.hidden ? null : performance.now(); }
function clockMs() { return app.elapsed + (app.since === null ? 0 : performance.now() - app.since); }
document.addEventListener("visibilitychange", () => {
  if (document.hidden) {
    if (app.since !== null) { app.elapsed += performance.now() - app.since; app.since = null; }
  } else if (app.phase === "answer" && app.since === null) {
    app.since = performance.now();
  }
});
setInterval(() => {
  if (app.phase !== "answer") return;
  const s = Math.floor(clockMs() / 1000);
  $("clock").textContent = `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}, 250);

// --- flow -----------------------------------------------------------------------------------------

async function boot() {
  app.state = await api("api/state");
  $("bench").textContent = app.state.benchmark;
  $("who").textContent = `annotator ${app.state.annotator}`;
  $("run-dir").textContent = app.state.run;
  const intro = $("intro-text");
  for (const p of app.state.instructions) intro.appendChild(el("p", {}, p));
  showIntro();
  document.body.dataset.ready = "1";
}

function doneCount() { return app.state.order.filter((o) => o.done).length; }

function progress() {
  const n = app.state.order.length;
  const k = Math.min(n, doneCount() + (app.phase === "answer" ? 1 : 0));
  const p = $("progress");
  p.textContent = `${k} of ${n}`;
  p.dataset.k = String(k);
  p.dataset.n = String(n);
}

function showIntro() {
  app.phase = "intro";
  $("intro").hidden = false;
  $("work").hidden = true;
  $("finished").hidden = true;
  $("start").textContent = doneCount() ? "Continue (Enter)" : "Start (Enter)";
  progress();
}

function next() {
  const order = app.state.order;
  let i = order.findIndex((o, j) => j > app.idx && !o.done);
  if (i < 0) i = order.findIndex((o) => !o.done);
  if (i < 0) {
    app.phase = "finished";
    $("intro").hidden = true;
    $("work").hidden = true;
    $("finished").hidden = false;
    document.body.dataset.sample = "";
    progress();
    return;
  }
  load(i);
}

async function load(i) {
  app.idx = i;
  const entry = app.state.order[i];
  try {
    app.view = await api(`api/sample?id=${encodeURIComponent(entry.id)}`);
  } catch (e) {  // back to the instructions, with the server's sentence; Enter tries again
    $("load-error").textContent = e.message;
    $("load-error").hidden = false;
    $("work").hidden = true;
    $("intro").hidden = false;
    return;
  }
  $("load-error").hidden = true;
  $("intro").hidden = true;
  $("finished").hidden = true;
  $("work").hidden = false;
  $("gold").hidden = true;
  app.boxes = [];
  app.selected = -1;
  app.picked = false;
  app.group = 1;  // groups are chosen anew on every sample: none carries over from the last one
  app.given = null;
  app.gt = [];
  app.option = null;
  if (document.activeElement && document.activeElement.blur) document.activeElement.blur();  // keys act on the new sample
  $("unsure").checked = false;
  $("note").value = "";
  message("");
  $("badge").hidden = !entry.gold;
  $("sample-id").textContent = `sample ${entry.id}`;
  render();
  app.phase = "answer";
  clockStart();
  progress();
  document.body.dataset.sample = entry.id;
  window.scrollTo(0, 0);
}

function render() {
  const v = app.view;
  const page = app.state.kind;  // the kind of page: one_box, image_pair or document
  $("prompt").textContent = page === "document" ? "" : v.text;
  $("prompt").hidden = page === "document";
  const area = $("area");
  area.replaceChildren();
  $("widget").replaceChildren();
  $("question").hidden = true;
  app.panes = [];
  if (page === "document") {
    renderDocument(area, v);
    $("box-panel").hidden = true;
  } else {
    v.images.forEach((im, index) => area.appendChild(makePane(im, index)));
    $("box-panel").hidden = false;
    renderGroups();
    requestAnimationFrame(() => app.panes.forEach(fit));
  }
  drawAll();
}

// --- the document kind (MM-NIAH): the document and the answer widget -------------------------------

function renderDocument(area, v) {
  const doc = el("div", { id: "doc" });
  for (const part of v.parts) {
    if (part.text !== undefined) doc.appendChild(el("span", {}, part.text));
    else doc.appendChild(el("img", { src: part.image, alt: "image in the document" }));
  }
  area.appendChild(doc);
  const q = $("question");
  q.textContent = v.question;
  q.hidden = false;
  const w = $("widget");
  if (v.kind === "option") {
    const box = el("div", { class: "options", role: "radiogroup" });
    for (const o of v.options) {
      const label = el("label", { "data-letter": o.letter });
      const input = el("input", { type: "radio", name: "option", value: o.letter });
      input.addEventListener("change", () => chooseOption(o.letter));
      label.appendChild(input);
      label.appendChild(el("b", {}, `${o.letter}.`));
      if (o.image) label.appendChild(el("img", { src: o.image, alt: `option ${o.letter}` }));
      else label.appendChild(el("span", {}, o.text));
      box.appendChild(label);
    }
    w.appendChild(el("div", { class: "muted" }, "Choose one option (or press its letter)."));
    w.appendChild(box);
  } else if (v.kind === "counts") {
    w.appendChild(el("label", { for: "answer-counts" }, "Counts, in order, separated by commas: "));
    const input = el("input", { type: "text", id: "answer-counts", placeholder: "e.g. 2, 0, 1", autocomplete: "off" });
    const preview = el("span", { id: "counts-preview", class: "muted" });
    input.addEventListener("input", () => {
      const got = parseCounts(input.value);
      preview.textContent = got.error ? ` ${got.error}` : ` = [${got.counts.join(", ")}]`;
    });
    w.appendChild(input);
    w.appendChild(preview);
  } else {
    w.appendChild(el("label", { for: "answer-text" }, "Answer (a single word or phrase): "));
    w.appendChild(el("input", { type: "text", id: "answer-text", autocomplete: "off", maxlength: "10000" }));
  }
}

function chooseOption(letter) {
  app.option = letter;
  for (const label of document.querySelectorAll(".options label")) {
    const on = label.dataset.letter === letter;
    label.classList.toggle("chosen", on);
    label.querySelector("input").checked = on;
  }
}

function parseCounts(text) {
  const items = text.split(/[\s,;]+/).filter((s) => s.length);
  if (!items.length) return { error: "give at least one count" };
  if (!items.every((s) => /^\d{1,7}$/.test(s))) return { error: "counts are whole numbers, e.g. 2, 0, 1" };
  return { counts: items.map((s) => parseInt(s, 10)) };
}

// --- boxes: panes, drawing, moving, resizing ------------------------------------------------------

function makePane(im, index) {
  const pane = el("div", { class: "pane", "data-image": String(index) });
  const head = el("div", { class: "pane-head" });
  head.appendChild(el("b", {}, im.label));
  const zoom = el("span", { class: "zoom" });
  const info = el("span", { class: "muted" });
  const out = el("button", { type: "button", title: "zoom out (-)" }, "−");
  const inn = el("button", { type: "button", title: "zoom in (+)" }, "+");
  const fitB = el("button", { type: "button", title: "fit (0)" }, "fit");
  const full = el("button", { type: "button", title: "full resolution (1)" }, "1:1");
  zoom.append(info, " ", out, inn, fitB, full);
  head.appendChild(zoom);
  const scroller = el("div", { class: "scroller" });
  const stage = el("div", { class: "stage" });
  const img = el("img", { src: im.url, alt: im.label, draggable: "false" });
  const svg = svgEl("svg", { viewBox: `0 0 ${im.width} ${im.height}`, preserveAspectRatio: "none", "data-image": index });
  stage.append(img, svg);
  scroller.appendChild(stage);
  pane.append(head, scroller);
  const p = { index, width: im.width, height: im.height, zoom: 1, stage, svg, scroller, info, pane };
  out.addEventListener("click", () => setZoom(p, p.zoom / 1.25));
  inn.addEventListener("click", () => setZoom(p, p.zoom * 1.25));
  fitB.addEventListener("click", () => fit(p));
  full.addEventListener("click", () => setZoom(p, 1));
  svg.addEventListener("mousedown", (e) => pointerDown(p, e));
  pane.addEventListener("mouseenter", () => { app.hover = p; });
  app.panes.push(p);
  return pane;
}

function setZoom(p, z) {
  p.zoom = Math.max(0.05, Math.min(8, z));
  p.stage.style.width = `${p.width * p.zoom}px`;
  p.stage.style.height = `${p.height * p.zoom}px`;
  p.info.textContent = `${p.width}×${p.height} at ${Math.round(p.zoom * 100)}%`;
  drawPane(p);
}

function fit(p) {
  const w = p.scroller.clientWidth || p.pane.clientWidth || p.width;
  setZoom(p, Math.min(1, (w - 2) / p.width));
}

function toImage(p, e) {
  const r = p.svg.getBoundingClientRect();
  const x = ((e.clientX - r.left) * p.width) / r.width;
  const y = ((e.clientY - r.top) * p.height) / r.height;
  return [Math.max(0, Math.min(p.width, x)), Math.max(0, Math.min(p.height, y))];
}

const EDGE_PX = 24;  // a press this close outside an image's visible edge starts a box at the edge

function visibleRect(p) {
  const r = p.svg.getBoundingClientRect();
  const s = p.scroller.getBoundingClientRect();
  const left = Math.max(r.left, s.left), top = Math.max(r.top, s.top);
  const right = Math.min(r.right, s.left + p.scroller.clientWidth), bottom = Math.min(r.bottom, s.top + p.scroller.clientHeight);
  return right > left && bottom > top ? { left, top, right, bottom } : null;
}

// A press just outside an image (its margin, the pane's border, the gap between panes) starts a box
// clamped to the image's edge, instead of drawing nothing.
document.addEventListener("mousedown", (e) => {
  if (e.button !== 0 || app.phase !== "answer" || !app.panes.length || e.defaultPrevented || app.drag) return;  // an image's own press
  const t = e.target;
  if (t.closest && (t.closest("svg") || t.closest("button, input, textarea, select, label, a"))) return;
  let best = null;
  for (const p of app.panes) {
    const v = visibleRect(p);
    if (!v) continue;
    const dx = Math.max(v.left - e.clientX, 0, e.clientX - v.right);
    const dy = Math.max(v.top - e.clientY, 0, e.clientY - v.bottom);
    const d = Math.hypot(dx, dy);
    if (d <= EDGE_PX && (!best || d < best.d)) best = { p, d, v };
  }
  if (!best) return;
  const v = best.v;
  const x = Math.max(v.left, Math.min(v.right, e.clientX)), y = Math.max(v.top, Math.min(v.bottom, e.clientY));
  pointerDown(best.p, { button: 0, clientX: x, clientY: y, target: best.p.svg, preventDefault: () => e.preventDefault() });
});

function pointerDown(p, e) {
  if (e.button !== 0 || app.phase !== "answer") return;
  e.preventDefault();
  if (document.activeElement && document.activeElement.blur) document.activeElement.blur();
  const [x, y] = toImage(p, e);
  const t = e.target;
  if (t.dataset && t.dataset.handle !== undefined) {
    app.drag = { mode: "resize", pane: p, box: Number(t.dataset.box), corner: Number(t.dataset.handle) };
    return;
  }
  if (t.dataset && t.dataset.box !== undefined) {
    const b = Number(t.dataset.box);
    select(b, true);
    app.drag = { mode: "move", pane: p, box: b, from: [x, y], orig: app.boxes[b].bbox.slice() };
    return;
  }
  if (app.state.kind === "one_box") app.boxes = [];
  app.boxes.push({ image: p.index, group: app.group, bbox: [x, y, x, y], score: 1 });
  app.selected = app.boxes.length - 1;  // selected to move, resize or delete; its group keys choose the next box's
  app.picked = false;
  app.drag = { mode: "draw", pane: p, box: app.selected, from: [x, y] };
  drawAll();
}

window.addEventListener("mousemove", (e) => {
  const d = app.drag;
  if (!d) return;
  const p = d.pane;
  const [x, y] = toImage(p, e);
  const b = app.boxes[d.box];
  if (d.mode === "draw") {
    b.bbox = [Math.min(d.from[0], x), Math.min(d.from[1], y), Math.max(d.from[0], x), Math.max(d.from[1], y)];
  } else if (d.mode === "move") {
    const w = d.orig[2] - d.orig[0];
    const h = d.orig[3] - d.orig[1];
    const nx = Math.max(0, Math.min(p.width - w, d.orig[0] + x - d.from[0]));
    const ny = Math.max(0, Math.min(p.height - h, d.orig[1] + y - d.from[1]));
    b.bbox = [nx, ny, nx + w, ny + h];
  } else if (d.mode === "resize") {
    const [x1, y1, x2, y2] = b.bbox;
    const fx = d.corner === 0 || d.corner === 3 ? x2 : x1;  // the corner that stays
    const fy = d.corner === 0 || d.corner === 1 ? y2 : y1;
    b.bbox = [Math.min(fx, x), Math.min(fy, y), Math.max(fx, x), Math.max(fy, y)];
    d.corner = (x < fx ? (y < fy ? 0 : 3) : (y < fy ? 1 : 2));
  }
  drawPane(p);
});

window.addEventListener("mouseup", () => {
  const d = app.drag;
  if (!d) return;
  app.drag = null;
  const b = app.boxes[d.box];
  if (b && (b.bbox[2] - b.bbox[0] < 2 || b.bbox[3] - b.bbox[1] < 2)) {
    if (d.mode === "draw") { app.boxes.splice(d.box, 1); app.selected = -1; app.picked = false; }
  }
  drawAll();
});

function select(i, picked) {
  app.selected = i;
  app.picked = !!picked && i >= 0;
  drawAll();
}

function drawAll() {
  app.panes.forEach(drawPane);
  renderList();
  renderGroups();
}

function drawPane(p) {
  const svg = p.svg;
  svg.replaceChildren();
  const hs = 7 / (p.zoom || 1);
  for (const g of app.gt) {  // the expected boxes after a gold sample: dashed, in their group's colour
    if (g.image !== p.index) continue;
    const [x1, y1, x2, y2] = g.bbox;
    const c = app.state.kind === "image_pair" ? colour(g.group) : null;
    const rect = svgEl("rect", { class: "gt", x: x1, y: y1, width: x2 - x1, height: y2 - y1, "data-group": g.group });
    const right = x1 > p.width / 2;  // the label under the box (over it near the bottom), kept inside the image
    const below = y2 + 16 / p.zoom <= p.height;
    const label = svgEl("text", {
      class: "gt-label", x: right ? x2 : x1, y: below ? y2 + 13 / p.zoom : y1 - 4 / p.zoom,
      "text-anchor": right ? "end" : "start", "font-size": 13 / p.zoom,
    });
    if (c) { rect.style.stroke = c; label.style.fill = c; }
    svg.appendChild(rect);
    label.textContent = app.state.kind === "image_pair" ? `expected ${g.group}` : "expected";
    svg.appendChild(label);
  }
  app.boxes.forEach((b, i) => {
    if (b.image !== p.index) return;
    const [x1, y1, x2, y2] = b.bbox;
    const c = colour(b.group);
    const r = svgEl("rect", { class: "box" + (i === app.selected ? " selected" : ""), x: x1, y: y1, width: x2 - x1, height: y2 - y1, stroke: c, "data-box": i });
    svg.appendChild(r);
    if (app.state.kind === "image_pair") {
      const label = svgEl("text", { x: x1 + 3 / p.zoom, y: y1 + 15 / p.zoom, fill: c, "font-size": 14 / p.zoom });
      label.textContent = app.state.confidence ? `${b.group} · ${b.score.toFixed(2)}` : String(b.group);
      svg.appendChild(label);
    }
    if (i === app.selected) {
      [[x1, y1], [x2, y1], [x2, y2], [x1, y2]].forEach(([hx, hy], k) => {
        svg.appendChild(svgEl("rect", { x: hx - hs / 2, y: hy - hs / 2, width: hs, height: hs, "data-box": i, "data-handle": k, class: `handle ${k % 2 ? "nesw" : "nwse"}` }));
      });
    }
  });
}

function renderGroups() {
  const g = $("groups");
  if (!app.state || app.state.kind !== "image_pair") { g.replaceChildren(); $("confidence-row").hidden = true; return; }
  const box = app.picked && app.boxes[app.selected] ? app.boxes[app.selected] : null;
  const shown = box ? box.group : app.group;
  g.dataset.mode = box ? "selected" : "next";
  g.dataset.next = String(app.group);
  g.classList.toggle("editing", !!box);
  g.replaceChildren(el("span", { class: "muted", id: "groups-label" },
    box ? `group of the selected box ${app.selected + 1} (keys 1-9):` : "group of the next box you draw (keys 1-9):"));
  for (let k = 1; k <= 9; k++) {
    const b = el("button", { type: "button", "data-group": String(k), class: k === shown ? "current" : "" }, k);
    b.style.borderColor = colour(k);
    if (k === shown) b.style.background = colour(k);
    b.addEventListener("click", () => setGroup(k));
    g.appendChild(b);
  }
  g.appendChild(el("span", { class: "muted" }, box
    ? `next box: group ${app.group} · Esc ends the change`
    : "click a box to change its group"));
  const row = $("confidence-row");
  row.hidden = !app.state.confidence || app.selected < 0;
  if (!row.hidden) {
    $("confidence").value = String(app.boxes[app.selected].score);
    $("confidence-value").textContent = app.boxes[app.selected].score.toFixed(2);
  }
}

function renderList() {
  const list = $("box-list");
  list.replaceChildren();
  const labels = app.view && app.view.images ? app.view.images.map((im) => im.label) : [];
  app.boxes.forEach((b, i) => {
    const li = el("li", { class: i === app.selected ? "selected" : "", "data-box": String(i) });
    const sw = el("span", { class: "swatch" });
    sw.style.background = colour(b.group);
    li.appendChild(sw);
    const size = `${Math.round(b.bbox[2] - b.bbox[0])}×${Math.round(b.bbox[3] - b.bbox[1])}`;
    let text = `${labels[b.image] || "image"}: `;
    if (app.state.kind === "image_pair") text += `group ${b.group}, `;
    text += `${size} px at (${Math.round(b.bbox[0])}, ${Math.round(b.bbox[1])})`;
    if (app.state.confidence) text += `, confidence ${b.score.toFixed(2)}`;
    li.appendChild(document.createTextNode(text));
    li.addEventListener("click", () => select(i, true));
    list.appendChild(li);
  });
  if (!app.boxes.length && app.state && app.state.kind !== "document") {
    list.appendChild(el("li", { class: "muted" }, app.state.kind === "image_pair" ? "no boxes: no target in either image" : "no box yet"));
  }
}

// A group key chooses the group of the boxes drawn next; only a box the person clicked (selected
// on purpose, shown in the group bar) changes group, and the page says so.
function setGroup(k) {
  const box = app.picked && app.boxes[app.selected] ? app.boxes[app.selected] : null;
  if (box) {
    const was = box.group;
    box.group = k;
    message(was === k ? `box ${app.selected + 1} stays in group ${k}` : `box ${app.selected + 1} moved from group ${was} to group ${k}`, "ok");
  } else {
    app.group = k;
    message(`the next box you draw goes to group ${k}`, "ok");
  }
  drawAll();
}

function setScore(s) {
  if (app.selected < 0 || !app.boxes[app.selected]) return;
  app.boxes[app.selected].score = Math.round(Math.max(0, Math.min(1, s)) * 100) / 100;
  drawAll();
}

$("confidence").addEventListener("input", (e) => setScore(parseFloat(e.target.value)));

function removeSelected() {
  if (app.selected < 0) return;
  app.boxes.splice(app.selected, 1);
  app.selected = -1;
  app.picked = false;
  drawAll();
}

function nudge(dx, dy) {
  const b = app.boxes[app.selected];
  if (!b) return;
  const p = app.panes[b.image];
  const w = b.bbox[2] - b.bbox[0];
  const h = b.bbox[3] - b.bbox[1];
  const x = Math.max(0, Math.min(p.width - w, b.bbox[0] + dx));
  const y = Math.max(0, Math.min(p.height - h, b.bbox[1] + dy));
  b.bbox = [x, y, x + w, y + h];
  drawAll();
}

// --- answers ---------------------------------------------------------------------------------------

const round2 = (v) => Math.round(v * 100) / 100;

function answer() {
  const page = app.state.kind;  // the kind of page: one_box, image_pair or document
  if (page === "image_pair") {
    return app.boxes.map((b) => {
      const out = { image: b.image, group: b.group, bbox: b.bbox.map(round2) };
      if (app.state.confidence) out.score = b.score;
      return out;
    });
  }
  if (page === "one_box") {
    if (!app.boxes.length) throw new Error("draw a box around the object first (or skip with Shift+S)");
    return app.boxes[0].bbox.map(round2);
  }
  const kind = app.view.kind;
  if (kind === "option") {
    if (!app.option) throw new Error("choose one of the options first (or skip with Shift+S)");
    return app.option;
  }
  if (kind === "counts") {
    const got = parseCounts($("answer-counts").value);
    if (got.error) throw new Error(got.error);
    return got.counts;
  }
  const text = $("answer-text").value.trim();
  if (!text) throw new Error("write an answer first (or skip with Shift+S)");
  return text;
}

async function submit(skipped) {
  if (app.phase !== "answer" || app.busy) return;
  let given = null;
  if (!skipped) {
    try { given = answer(); } catch (e) { message(e.message, "error"); return; }
  }
  const entry = app.state.order[app.idx];
  const body = { id: entry.id, answer: given, seconds: round2(clockMs() / 1000), unsure: $("unsure").checked, note: $("note").value, skipped: !!skipped };
  app.busy = true;
  let reply;
  try {
    reply = await api("api/answer", body);
  } catch (e) {
    message(e.message, "error");
    return;
  } finally {
    app.busy = false;
  }
  entry.done = true;
  app.given = skipped ? null : given;
  message(skipped ? "skipped" : "saved", "ok");
  if (reply.gold) return showGold(reply.gold);
  next();
}

function iou(a, b) {
  const w = Math.max(0, Math.min(a[2], b[2]) - Math.max(a[0], b[0]));
  const h = Math.max(0, Math.min(a[3], b[3]) - Math.max(a[1], b[1]));
  const inter = w * h;
  const union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter;
  return union > 0 ? inter / union : 0;
}

// What was wrong with the answer given, against the expected boxes: a box counts where it overlaps an
// expected box of its image at IoU 0.5 or more (each expected box matched once, best overlaps first),
// and, on an image pair (MC-Bench), with the expected group number (the official AP50 matches within a group).
function verdict(gold) {
  const page = app.state.kind;  // the kind of page: one_box, image_pair or document
  const labels = app.view && app.view.images ? app.view.images.map((im) => im.label) : [];
  const name = (i) => labels[i] || "the image";
  if (app.given === null) return { ok: false, lines: ["You skipped this sample."] };
  if (page === "document") return { ok: null, lines: [`You answered: ${Array.isArray(app.given) ? app.given.join(", ") : app.given}`] };
  const gt = gold.boxes || [];
  const mine = app.boxes;
  if (page === "one_box") {
    const v = mine.length && gt.length ? iou(mine[0].bbox, gt[0].bbox) : 0;
    return v >= 0.5
      ? { ok: true, lines: [`Right: your box overlaps the expected one at IoU ${v.toFixed(2)} (0.5 or more counts).`] }
      : { ok: false, lines: [`Wrong: your box overlaps the expected one at IoU ${v.toFixed(2)}; 0.5 or more counts.`] };
  }
  const pairs = [];
  mine.forEach((b, i) => gt.forEach((g, j) => {
    if (b.image === g.image) { const v = iou(b.bbox, g.bbox); if (v >= 0.5) pairs.push([v, i, j]); }
  }));
  pairs.sort((a, b) => b[0] - a[0]);
  const usedMine = new Set(), usedGt = new Set(), lines = [];
  let right = 0;
  for (const [, i, j] of pairs) {
    if (usedMine.has(i) || usedGt.has(j)) continue;
    usedMine.add(i); usedGt.add(j);
    if (mine[i].group === gt[j].group) right += 1;
    else lines.push(`Wrong group: your box ${i + 1} in ${name(mine[i].image)} is group ${mine[i].group}; the expected group is ${gt[j].group}.`);
  }
  gt.forEach((g, j) => { if (!usedGt.has(j)) lines.push(`Missed: a group ${g.group} target in ${name(g.image)} has no box of yours (IoU 0.5 or more).`); });
  mine.forEach((b, i) => { if (!usedMine.has(i)) lines.push(`Extra: your box ${i + 1} (group ${b.group}) in ${name(b.image)} matches no expected box.`); });
  if (!lines.length) return { ok: true, lines: [gt.length ? `Right: all ${gt.length} box(es), each in its group.` : "Right: no target in either image, and you drew no box."] };
  lines.unshift(`${right} of ${gt.length} expected box(es) right.`);
  return { ok: false, lines };
}

function showGold(gold) {
  app.phase = "gold";
  app.gt = gold.boxes || [];
  app.selected = -1;
  app.picked = false;
  drawAll();
  $("gold-text").textContent = gold.text;
  const v = verdict(gold);
  const list = $("gold-verdict");
  list.replaceChildren(...v.lines.map((t) => el("li", {}, t)));
  list.className = v.ok === true ? "right" : v.ok === false ? "wrong" : "";
  $("gold").hidden = false;
  progress();
  $("continue").focus();
}

// --- keys --------------------------------------------------------------------------------------------

function typing(e) {
  const t = e.target;
  return t && (t.tagName === "TEXTAREA" || (t.tagName === "INPUT" && t.type === "text"));
}

function help() {
  if (app.phase === "intro") return;
  $("intro").hidden = !$("intro").hidden;
  if (!$("intro").hidden) window.scrollTo(0, 0);
}

document.addEventListener("keydown", (e) => {
  if (!app.state) return;
  if (e.key === "Enter" && (e.ctrlKey || e.metaKey || !(e.target && e.target.tagName === "TEXTAREA"))) {
    const own = ["start", "continue", "submit", "skip"];
    if (e.target && e.target.tagName === "BUTTON" && own.includes(e.target.id) && !e.ctrlKey) return;  // its own click
    e.preventDefault();
    if (app.phase === "intro") { $("intro").hidden = true; next(); }
    else if (app.phase === "gold") next();
    else if (app.phase === "answer") submit(false);
    return;
  }
  if (typing(e)) { if (e.key === "Escape") e.target.blur(); return; }
  if (app.phase !== "answer") { if (e.key === "?") help(); return; }
  const k = e.key;
  if (e.shiftKey && (k === "S" || k === "s")) { e.preventDefault(); submit(true); }
  else if (e.shiftKey && (k === "U" || k === "u")) { e.preventDefault(); $("unsure").checked = !$("unsure").checked; }
  else if (e.shiftKey && (k === "N" || k === "n")) { e.preventDefault(); $("note").focus(); }
  else if (k === "?") help();
  else if (app.state.kind === "document") {
    if (app.view.kind === "option" && /^[a-z]$/.test(k)) {
      const letter = k.toUpperCase();
      if (app.view.options.some((o) => o.letter === letter)) chooseOption(letter);
    }
  } else if (/^[1-9]$/.test(k) && app.state.kind === "image_pair") setGroup(Number(k));
  else if (k === "Delete" || k === "Backspace") { e.preventDefault(); removeSelected(); }
  else if (k === "Escape") select(-1);
  else if (k === "+" || k === "=") (app.hover ? [app.hover] : app.panes).forEach((p) => setZoom(p, p.zoom * 1.25));
  else if (k === "-") (app.hover ? [app.hover] : app.panes).forEach((p) => setZoom(p, p.zoom / 1.25));
  else if (k === "0") (app.hover ? [app.hover] : app.panes).forEach(fit);
  else if (k === "[" && app.state.confidence) setScore(app.boxes[app.selected] ? app.boxes[app.selected].score - 0.1 : 0);
  else if (k === "]" && app.state.confidence) setScore(app.boxes[app.selected] ? app.boxes[app.selected].score + 0.1 : 0);
  else if (k.startsWith("Arrow") && app.selected >= 0) {
    e.preventDefault();
    const step = e.shiftKey ? 10 : 1;
    nudge(k === "ArrowLeft" ? -step : k === "ArrowRight" ? step : 0, k === "ArrowUp" ? -step : k === "ArrowDown" ? step : 0);
  }
});

$("start").addEventListener("click", () => { $("intro").hidden = true; next(); });
$("continue").addEventListener("click", () => next());
$("submit").addEventListener("click", () => submit(false));
$("skip").addEventListener("click", () => submit(true));
$("help-button").addEventListener("click", help);
window.addEventListener("resize", () => app.panes.forEach(fit));

boot().catch((e) => message(e.message, "error"));

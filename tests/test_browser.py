"""The run reports in a real browser: Debian's Chromium driven by Playwright, offline.

Makes the demo's runs (`needlepoint demo`), opens their reports, and checks that the page has no
console errors, that "wrong only", "parse errors only", a filter select and the search show the
counts that records.jsonl and the page's data give, that thumbnails load, and that hostile answers
render as text without running. Saves screenshots to artifacts/ (git-ignored).

Chromium is required: CI installs it (`apt-get install chromium`); without it this test fails
and says so, rather than skipping.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import records, report_blob
from helpers.browser import ARTIFACTS, Page, chromium

from needlepoint.cli import main as cli_main
from needlepoint.contract.registry import make
from needlepoint.report.html import write_run_report

HOSTILE = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "\"quotes\" 'and' </script> &amp;"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    assert cli_main(["demo", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def browser(demo: Path) -> Iterator[Any]:
    """Chromium, started after the demo ran (Playwright's sync API keeps an event loop running,
    and the demo's runner needs its own)."""
    with chromium() as b:
        yield b


def search_count(data: dict[str, Any], term: str) -> int:
    term = term.lower()
    return sum(term in f"{it['id']}\n{it['p']}\n{it['a']}".lower() for it in data["items"])


def test_ref_adv_report_filters(browser: Any, demo: Path) -> None:
    run = demo / "runs" / "ref_adv_s"
    path = run / "report" / "index.html"
    recs = records(run)
    data = report_blob(path)
    p = Page(browser, path)
    try:
        assert p.count() == p.total() == len(recs)
        cards = p.page.locator("#np-cards .card")
        assert cards.count() == min(len(recs), 50)
        # Thumbnails of the first cards load from report/thumbs/.
        p.page.locator("#np-cards img").first.scroll_into_view_if_needed()
        p.page.wait_for_function("document.querySelector('#np-cards img').complete")
        assert p.page.evaluate("document.querySelector('#np-cards img').naturalWidth") > 0
        # The boxes lie over the image where the data puts them, in the image's own pixels.
        src, width, height, _, boxes = data["items"][0]["im"][0]
        assert boxes and any(b[5] for b in boxes) and not all(b[5] for b in boxes)  # a prediction and a ground truth
        shown = p.page.evaluate("""() => {
            const frame = document.querySelector('#np-cards .card .frame');
            const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.top, r.width, r.height]; };
            return { img: box(frame.querySelector('img')), svg: box(frame.querySelector('svg')),
                     rects: Array.from(frame.querySelectorAll('rect')).map(r => [...box(r), r.getAttribute('stroke'),
                       getComputedStyle(r).strokeDasharray]) };
        }""")
        assert shown["svg"] == pytest.approx(shown["img"], abs=0.5)
        left, top, w, h = shown["img"]
        assert len(shown["rects"]) == len(boxes)
        for (x, y, rw, rh, stroke, dashes), b in zip(shown["rects"], boxes):
            sx, sy = w / width, h / height  # the image is shown scaled; the geometry (without its outline) follows
            assert [x, y, rw, rh] == pytest.approx(
                [left + b[0] * sx, top + b[1] * sy, (b[2] - b[0]) * sx, (b[3] - b[1]) * sy], abs=0.5
            )
            assert stroke == b[4] and (dashes != "none") == bool(b[5])

        wrong = sum(not r["scores"].get("hit") for r in recs)
        assert 0 < wrong < len(recs)
        p.page.check("#np-wrong")
        assert p.count() == wrong == cards.count()
        assert all(b == "wrong" or b.startswith("parse error") for b in p.page.locator("#np-cards .badge").all_text_contents())
        ARTIFACTS.mkdir(exist_ok=True)
        p.page.screenshot(path=str(ARTIFACTS / "report_ref_adv_wrong_only.png"), full_page=False)
        p.page.uncheck("#np-wrong")

        parse_errors = sum(bool(r.get("parse_error")) for r in recs)
        p.page.check("#np-errors")
        assert p.count() == parse_errors
        p.page.uncheck("#np-errors")

        term = "leftmost"
        want = search_count(data, term)
        assert 0 < want < len(recs)
        p.page.fill("#np-search", term)
        assert p.count() == want
        p.page.check("#np-wrong")
        assert p.count() == sum(it["c"] is False and term in f"{it['id']}\n{it['p']}\n{it['a']}".lower() for it in data["items"])
        p.page.uncheck("#np-wrong")
        p.page.fill("#np-search", "")
        assert p.count() == len(recs)

        bins = next(f for f in data["filters"] if f["key"] == "bin")
        value, n = bins["values"][0]
        p.page.select_option("select[data-filter='bin']", value)
        assert p.count() == n == sum(it["k"]["bin"] == value for it in data["items"])
        p.page.select_option("select[data-filter='bin']", "")

        # Sorting by IoU, low to high: the first card has the smallest IoU.
        p.page.select_option("#np-sort", "up")
        first_id = p.page.locator("#np-cards .card").first.get_attribute("data-id")
        assert min(r["scores"]["iou"] for r in recs) == next(r["scores"]["iou"] for r in recs if r["id"] == first_id)
        p.page.screenshot(path=str(ARTIFACTS / "report_ref_adv.png"), full_page=False)
        assert p.errors == []
    finally:
        p.close()


def test_mm_niah_and_mc_bench_reports(browser: Any, demo: Path) -> None:
    run = demo / "runs" / "mm_niah"
    recs = records(run)
    p = Page(browser, run / "report" / "index.html")
    try:
        assert p.count() == len(recs)
        p.page.check("#np-wrong")
        assert p.count() == sum(r["scores"].get("score") is not None and r["scores"]["score"] < 1.0 for r in recs)
        heat = p.page.locator("#heatmaps ~ .heatmaps img").first
        heat.scroll_into_view_if_needed()
        p.page.wait_for_function("Array.from(document.querySelectorAll('.heatmaps img')).every(i => i.complete)")
        assert heat.evaluate("i => i.naturalWidth") > 0
        # every heatmap states its size, so its place is kept before it loads (no controls moving under a click)
        for img in p.page.locator(".heatmaps img").all():
            natural = img.evaluate("i => [i.naturalWidth, i.naturalHeight]")
            assert [int(img.get_attribute("width") or 0), int(img.get_attribute("height") or 0)] == natural
        # Pages of 50: the next page shows the next cards.
        p.page.uncheck("#np-wrong")
        first = p.page.locator("#np-cards .card").first.get_attribute("data-id")
        p.page.locator("button[data-page='next']").first.click()
        assert p.page.locator("#np-cards .card").first.get_attribute("data-id") != first
        assert p.errors == []
    finally:
        p.close()

    p = Page(browser, demo / "runs" / "mc_bench" / "report" / "index.html")
    try:
        assert p.count() == len(records(demo / "runs" / "mc_bench"))
        assert p.page.locator("#np-cards .card").first.locator("img").count() == 2
        p.page.locator("#samples").scroll_into_view_if_needed()
        p.page.wait_for_timeout(300)
        ARTIFACTS.mkdir(exist_ok=True)
        p.page.screenshot(path=str(ARTIFACTS / "report_mc_bench.png"), full_page=False)
        assert p.errors == []
    finally:
        p.close()

    p = Page(browser, demo / "runs" / "mc_bench_agentic" / "report" / "index.html")  # the agentic solver's run
    try:
        assert p.count() == len(records(demo / "runs" / "mc_bench_agentic"))
        assert "[localizer: needlepoint-simulated-localizer | target 1" in p.page.content()
        assert p.errors == []
    finally:
        p.close()

    p = Page(browser, demo / "report" / "index.html", samples=False)
    try:
        hrefs = p.page.eval_on_selector_all("a[href$='report/index.html']", "links => links.map(a => a.getAttribute('href'))")
        # four benchmarks, MC-Bench's agentic run and MM-NIAH's RAG run: each in the boards and the runs list
        assert len(set(hrefs)) == 6 and len(hrefs) == 12
        assert p.errors == []
    finally:
        p.close()


def test_hostile_answers_render_as_text(browser: Any, demo: Path, tmp_path: Path) -> None:
    src = demo / "runs" / "ref_adv_s"
    run = tmp_path / "run"
    shutil.copytree(src, run)
    header = json.loads((run / "run.json").read_text(encoding="utf-8"))
    bench = make("ref_adv_s", **header["config"]["options"])
    samples = bench.load(Path(header["config"]["data"]))
    recs = {r["id"]: r for r in records(run)}
    ordered = [recs[s.id] for s in samples if s.id in recs]
    for rec, text in zip(ordered, HOSTILE):
        rec["turns"] = [{"reply": text}]
    header["config"]["model"] = "<img src=y onerror=alert(2)>"
    path = write_run_report(run, bench, samples, ordered, bench.score(samples, ordered), header)
    p = Page(browser, path)
    try:
        p.page.wait_for_timeout(300)
        answers = p.page.locator("#np-cards pre.answer").all_text_contents()
        assert answers[: len(HOSTILE)] == HOSTILE
        assert p.page.locator("#np-cards img[src='x'], img[src='y']").count() == 0
        assert "<img src=y onerror=alert(2)>" in p.page.locator("h1").text_content()
        p.page.fill("#np-search", "onerror")
        assert p.count() == 1
        assert p.dialogs == [] and p.errors == []
    finally:
        p.close()


def test_reasoning_is_shown_folded(browser: Any, demo: Path, tmp_path: Path) -> None:
    src = demo / "runs" / "ref_adv_s"
    run = tmp_path / "run"
    shutil.copytree(src, run)
    header = json.loads((run / "run.json").read_text(encoding="utf-8"))
    bench = make("ref_adv_s", **header["config"]["options"])
    samples = bench.load(Path(header["config"]["data"]))
    recs = {r["id"]: r for r in records(run)}
    ordered = [recs[s.id] for s in samples if s.id in recs]
    thought = "<img src=z onerror=alert(3)> Let me look at the shapes first."
    ordered[0]["turns"] = [{"reply": "", "reasoning": thought, "finish_reason": "length"}]
    ordered[0]["parse_error"] = "no_content"
    path = write_run_report(run, bench, samples, ordered, bench.score(samples, ordered), header)
    p = Page(browser, path)
    try:
        p.page.fill("#np-search", ordered[0]["id"])
        p.count()
        folded = p.page.locator(f"#np-cards article[data-id='{ordered[0]['id']}'] details.reasoning")
        assert folded.count() == 1
        assert folded.get_attribute("open") is None  # folded until clicked
        assert folded.locator("summary").text_content() == f"reasoning ({len(thought)} characters)"
        assert not folded.locator("pre").is_visible()
        folded.locator("summary").click()
        assert folded.locator("pre").is_visible() and folded.locator("pre").text_content() == thought
        assert p.page.locator("details.reasoning").count() == 1  # only the sample that has reasoning
        assert p.page.locator("img[src='z']").count() == 0
        assert p.dialogs == [] and p.errors == []
    finally:
        p.close()


def test_rag_report_highlights_the_needle_and_filters_by_it(browser: Any, demo: Path) -> None:
    """The demo's MM-NIAH run with --solver rag: the "needle" filter (kept / dropped / not located)
    and the kept context under each card with the needle pieces in <mark>."""
    run = demo / "runs" / "mm_niah_rag"
    recs = records(run)
    dropped = sum(r["solver"]["rag"]["needles_kept"] is False for r in recs)
    kept = sum(r["solver"]["rag"]["needles_kept"] is True for r in recs)
    assert 0 < dropped and 0 < kept
    p = Page(browser, run / "report" / "index.html")
    try:
        assert p.count() == len(recs)
        p.page.select_option("select[data-filter='needle']", "dropped")
        assert p.count() == dropped
        p.page.select_option("select[data-filter='needle']", "kept")
        assert p.count() == kept
        card = p.page.locator("#np-cards .card").first
        rec = next(r for r in recs if r["id"] == card.get_attribute("data-id"))
        from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
        from needlepoint.benchmarks.mm_niah.rag import document

        sample = next(s for s in MmNiah(split="val").load(demo / "data" / "mm_niah") if s.id == rec["id"])
        pieces = document(sample).pieces
        marked = sorted({i for n in rec["solver"]["rag"]["needles"] if n["kept"] for i in n["pieces"]})
        assert marked and "".join(card.locator(".context mark").all_text_contents()) == "".join(pieces[i] for i in marked)
        assert "context kept by retrieval (needle highlighted)" in card.inner_text().lower()
        ARTIFACTS.mkdir(exist_ok=True)
        card.screenshot(path=str(ARTIFACTS / "report_mm_niah_rag.png"))
        assert p.errors == []
    finally:
        p.close()

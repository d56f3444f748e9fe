"""The compare page in a real browser (Debian's Chromium under Playwright, offline): no console
errors, the outcome filters ("only A right", "only B right", "both wrong") show the counts the
records give, the filter selects (bin, style, task) narrow the cards, and each card draws the
ground truth and both runs' boxes in their own styles. Screenshots go to artifacts/compare-*.png
(git-ignored; docs/images has copies, which the docs show)."""

from __future__ import annotations

import contextlib
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import records, report_blob
from helpers.browser import ARTIFACTS, Page, chromium
from helpers.compare import has_resampler, make_runs

from needlepoint.cli import main


def write_compare(a: Path, b: Path, out: Path) -> dict[str, Any]:
    with contextlib.redirect_stdout(io.StringIO()) as printed, contextlib.redirect_stderr(io.StringIO()):
        assert main(["compare", str(a), str(b), "--json", "--out", str(out), "--resamples", "200"]) == 0
    result: dict[str, Any] = json.loads(printed.getvalue())
    return result


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path, Path, dict[str, Any]]]:
    """Per benchmark (of those with a resampler): run A, run B, the compare page, and the comparison's JSON."""
    out = {}
    for name in ("ref_adv_s", "mc_bench", "mm_niah"):
        if not has_resampler(name):
            continue
        folder = tmp_path_factory.mktemp(name)
        _, a, b = make_runs(name, folder)
        result = write_compare(a, b, folder / "compare")
        out[name] = (a, b, folder / "compare" / "index.html", result)
    return out


@pytest.fixture(scope="module")
def browser(pages: dict[str, Any]) -> Iterator[Any]:
    """Chromium, started after the runs were made (Playwright's sync API keeps its own event loop)."""
    with chromium() as b:
        yield b


def outcome(p: Page, value: str) -> int:
    p.page.select_option("#np-outcome", value)
    return p.count()


def test_ref_adv_page_filters_and_both_runs_boxes(browser: Any, pages: dict[str, Any]) -> None:
    a, b, path, result = pages["ref_adv_s"]
    p = Page(browser, path)
    assert p.total() == 30 and p.count() == 30
    hit_a = {r["id"]: r["scores"]["hit"] for r in records(a)}
    hit_b = {r["id"]: r["scores"]["hit"] for r in records(b)}
    only_a = sum(hit_a[i] and not hit_b[i] for i in hit_a)
    assert only_a > 0
    assert outcome(p, "only:0") == only_a
    mc = next(m for m in result["contrasts"][0]["metrics"] if m["metric"] == "acc@0.5")["mcnemar"]
    assert only_a == mc["only_a"]  # the page's verdicts are the metric's
    card = p.page.locator("#np-cards article.card").first
    assert card.locator("rect.gt").count() == 1
    assert card.locator("rect.run-0").count() >= 1 and card.locator("rect.run-1").count() >= 1
    assert card.locator("rect.run-0").first.get_attribute("stroke-dasharray") != card.locator("rect.run-1").first.get_attribute(
        "stroke-dasharray"
    )
    assert card.locator(".badge.ok").count() == 1 and card.locator(".badge.bad").count() == 1
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    p.page.screenshot(path=str(ARTIFACTS / "compare-ref-adv.png"))
    assert outcome(p, "only:1") == mc["only_b"]
    assert outcome(p, "none") == sum(not hit_a[i] and not hit_b[i] for i in hit_a)
    assert outcome(p, "all") == sum(hit_a[i] and hit_b[i] for i in hit_a)
    outcome(p, "")
    blob = report_blob(path)
    bins = [it["k"]["bin"] for it in blob["items"]]
    p.page.select_option("select[data-filter='bin']", "2-3")
    assert p.count() == bins.count("2-3")
    p.page.fill("#np-search", "case 1)")
    assert p.count() <= bins.count("2-3")
    assert p.errors == [] and p.dialogs == []
    p.close()


@pytest.mark.skipif(not has_resampler("mc_bench"), reason="MC-Bench offers no resampler yet (stats, issue 23 item 1)")
def test_mc_bench_page_draws_both_runs_on_both_images(browser: Any, pages: dict[str, Any]) -> None:
    _a, _b, path, _result = pages["mc_bench"]
    p = Page(browser, path)
    assert p.total() == 24
    blob = report_blob(path)
    styles = [it["k"]["style"] for it in blob["items"]]
    p.page.select_option("select[data-filter='style']", "Comparison")
    assert p.count() == styles.count("Comparison")
    p.page.select_option("select[data-filter='style']", "")
    differ = sum(1 for it in blob["items"] if it["c"][0] != it["c"][1])
    assert outcome(p, "differ") == differ > 0
    card = p.page.locator("#np-cards article.card").first
    assert card.locator("figure").count() == 2  # the pair's two images
    assert (
        card.locator("rect.gt").count() >= 1
        and card.locator("rect.run-0").count() >= 1
        and card.locator("rect.run-1").count() >= 1
    )
    p.page.evaluate("document.getElementById('samples').scrollIntoView()")
    p.page.screenshot(path=str(ARTIFACTS / "compare-mc-bench.png"))
    assert p.errors == []
    p.close()


@pytest.mark.skipif(not has_resampler("mm_niah"), reason="MM-NIAH offers no resampler yet (stats, issue 23 item 1)")
def test_mm_niah_page_heatmap_and_task_filter(browser: Any, pages: dict[str, Any]) -> None:
    _a, _b, path, _result = pages["mm_niah"]
    p = Page(browser, path)
    blob = report_blob(path)
    tasks = [it["k"]["task"] for it in blob["items"]]
    p.page.select_option("select[data-filter='task']", "counting-text")
    assert p.count() == tasks.count("counting-text") > 0
    p.page.select_option("select[data-filter='task']", "")
    assert outcome(p, "none") == sum(1 for it in blob["items"] if it["c"] == [False, False])
    assert p.page.locator("table.heat").count() >= 2
    assert p.page.locator("table.heat td[data-diff]").count() > 0
    p.page.evaluate("document.getElementById('heatmaps').scrollIntoView()")
    p.page.screenshot(path=str(ARTIFACTS / "compare-mm-niah.png"))
    assert p.errors == []
    p.close()


def test_metrics_table_marks_the_primary_row_and_shows_holm(browser: Any, pages: dict[str, Any]) -> None:
    """Issue 41 item 2 on the page: the primary row first, "primary" in its Holm cells, every other
    row's Holm-adjusted p beside the raw one, and the line under the table saying what it is."""
    _a, _b, path, result = pages["ref_adv_s"]
    p = Page(browser, path)
    table = p.page.locator("table").first
    heads = [t.strip() for t in table.locator("thead th").all_inner_texts()]
    assert heads.index("Holm") == heads.index("p") + 1 and "McNemar Holm" in heads
    first = [t.strip() for t in table.locator("tbody tr").first.locator("td, th").all_inner_texts()]
    assert first[0] == result["primary"] == "acc@0.5" and first[heads.index("Holm")] == "primary"
    second = [t.strip() for t in table.locator("tbody tr").nth(1).locator("td, th").all_inner_texts()]
    assert second[heads.index("Holm")] not in ("primary", "–")
    note = p.page.locator("p.tablenote").first.inner_text()
    assert "Primary comparison: acc@0.5" in note and "Holm" in note
    p.page.evaluate("document.getElementById('metrics').scrollIntoView()")
    p.page.screenshot(path=str(ARTIFACTS / "compare-ref-adv-metrics.png"))
    assert p.errors == []
    p.close()

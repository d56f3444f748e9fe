"""The run page in Chromium: failed requests show under their own badge and filter (never as
"wrong"), and "What the model saw" unfolds each turn's messages, texts as text and images by
path, size and thumbnail. Screenshots go to artifacts/ (git-ignored)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers.browser import ARTIFACTS, Page, chromium
from helpers.display import HOSTILE, failed_run, run_block

from needlepoint.report import html as report_html


@pytest.fixture(scope="module")
def browser() -> Any:
    with chromium() as b:
        yield b


def test_failed_requests_and_what_the_model_saw_in_a_browser(browser: Any, tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = failed_run(tmp_path, answered=2)
    metrics = {**bench.score(samples, recs), "run": run_block(recs)}
    page = report_html.write_run_report(run_dir, bench, samples, recs, metrics, header)
    p = Page(browser, page)
    try:
        assert p.count() == p.total() == 5
        badges = p.page.locator("#np-cards .badge").all_text_contents()
        assert badges.count("failed request: backend_error") == 3 and badges.count("wrong") == 2
        p.page.check("#np-failed")
        assert p.count() == 3
        assert set(p.page.locator("#np-cards .badge").all_text_contents()) == {"failed request: backend_error"}
        p.page.uncheck("#np-failed")
        p.page.check("#np-wrong")  # wrong answers only: a failed request is not a wrong answer
        assert p.count() == 2
        p.page.uncheck("#np-wrong")

        seen = p.page.locator("#np-cards .card details.seen").first
        assert seen.locator("summary").text_content() == "What the model saw (1 turn, 3 parts)"
        seen.locator("summary").click()
        seen.locator("pre.sent").first.wait_for()  # built by the "toggle" event, which comes after the click returns
        texts = seen.locator("pre.sent").all_text_contents()
        assert texts == ["You locate objects.", f"Find the object 0. {HOSTILE}"]  # as text: nothing ran
        assert seen.locator(".role").all_text_contents() == ["system", "user"]
        img = seen.locator(".sentimg img")
        img.scroll_into_view_if_needed()
        p.page.wait_for_function("document.querySelector('.sentimg img').complete")
        assert img.evaluate("i => i.naturalWidth") > 0
        assert "640×480 px, 12345 bytes, sha256 abababababab" in seen.locator(".sentimg .note").text_content()
        assert p.page.locator("#np-cards .card").nth(2).locator("details.seen").count() == 0  # nothing was sent
        assert p.dialogs == [] and p.errors == []
        ARTIFACTS.mkdir(exist_ok=True)
        p.page.locator("#np-cards .card").first.screenshot(path=str(ARTIFACTS / "display_what_the_model_saw.png"))
        p.page.screenshot(path=str(ARTIFACTS / "display_failed_badges.png"), full_page=True)
    finally:
        p.close()

"""Chromium driven by Playwright, offline, for the browser tests: the browser, and a report page
that collects its console errors."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from helpers.paths import REPO

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ARTIFACTS = REPO / "artifacts"  # screenshots (git-ignored)


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium under Playwright; a test fails (never skips) when either is missing."""
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: install Debian's Chromium (`apt-get install chromium`, as .ci/run does) to run the browser test"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("the playwright Python package is missing: pip install -e '.[test]'")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


class Page:
    """A report opened in a fresh page, collecting console errors, page errors and dialogs."""

    def __init__(self, browser: Any, path: Path, samples: bool = True) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfailed", lambda r: self.errors.append(f"request failed: {r.url}"))

        def dialog(d: Any) -> None:
            self.dialogs.append(d.message)
            d.dismiss()

        self.page.on("dialog", dialog)
        self.page.goto(path.resolve().as_uri())
        if samples:  # the sample browser marks the body once it has rendered
            self.page.wait_for_selector("body[data-ready='1']", state="attached", timeout=10_000)
        else:
            self.page.wait_for_load_state("load")

    def count(self) -> int:
        self.page.wait_for_timeout(200)  # the search box waits 120 ms before filtering
        return int(self.page.locator("#np-count").get_attribute("data-count"))

    def total(self) -> int:
        return int(self.page.locator("#np-count").get_attribute("data-total"))

    def close(self) -> None:
        self.page.close()

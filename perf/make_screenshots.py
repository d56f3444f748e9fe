"""Make the README's images from the project's own commands.

    python perf/make_screenshots.py [--out docs/images] [--work DIR]

Runs `needlepoint demo` (offline, simulated model) into a fresh folder, then writes
`report.png` (the MC-Bench run report, opened in headless Chromium through Playwright, scrolled to
the metrics and first samples) and `heatmap.png` (the demo's MM-NIAH overall heatmap, copied).
Needs Debian's `chromium` at /usr/bin/chromium and the `playwright` Python package.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

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
REPO = Path(__file__).resolve().parents[1]


def screenshot(page_path: Path, dest: Path, anchor: str = "metrics", size: tuple[int, int] = (1280, 900)) -> Path:
    """A viewport screenshot of a report page, scrolled to the element with id `anchor`."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": size[0], "height": size[1]}, device_scale_factor=1)
            page.goto(page_path.resolve().as_uri())
            page.wait_for_selector("body[data-ready='1']")
            page.evaluate("id => document.getElementById(id).scrollIntoView()", anchor)
            page.wait_for_function(
                "Array.from(document.images).filter(i => i.getBoundingClientRect().top < innerHeight).every(i => i.complete)"
            )
            dest.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(dest))
        finally:
            browser.close()
    return dest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "images", help="where report.png and heatmap.png go")
    parser.add_argument("--work", type=Path, help="demo folder (default: a temporary folder, removed afterwards)")
    ns = parser.parse_args(argv)
    if not CHROMIUM.exists():
        print(f"{CHROMIUM} is missing; install it with `apt-get install chromium`", file=sys.stderr)
        return 2

    from needlepoint.cli import main as cli_main

    with tempfile.TemporaryDirectory(prefix="needlepoint-screens-") as tmp:
        work = ns.work or Path(tmp) / "demo"
        code = cli_main(["demo", "--out", str(work)])
        if code:
            return code
        report = screenshot(work / "runs" / "mc_bench" / "report" / "index.html", ns.out / "report.png")
        heatmap = ns.out / "heatmap.png"
        shutil.copyfile(work / "runs" / "mm_niah" / "heatmaps" / "overall.png", heatmap)
    print(f"wrote {report} and {heatmap}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

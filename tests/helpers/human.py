"""The human baseline's page under test: demo releases of the three benchmarks, a page server
over a run, and a person's gestures (drag a box, answer, submit) through Playwright."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from needlepoint.human.plan import Plan, make_plan
from needlepoint.human.runs import HumanRun
from needlepoint.human.server import HumanServer


def releases(root: Path) -> dict[str, Path]:
    """Small demo releases of MC-Bench, Ref-Adv-s (8 rows) and MM-NIAH (2 rows per task)."""
    from needlepoint.benchmarks.mc_bench import demo as mc_demo
    from needlepoint.benchmarks.mm_niah import demo as niah_demo
    from needlepoint.benchmarks.ref_adv import demo as ref_demo

    mc, _ = mc_demo.write_release(root / "mc")
    ref = ref_demo.write_release(root / "ref", ref_demo.make_rows(8))
    niah_demo.write_release(root / "niah", per_task=2)
    return {"mc_bench": mc, "ref_adv_s": ref, "mm_niah": root / "niah"}


@contextmanager
def serving(
    bench: str,
    data: Path,
    out: Path,
    annotator: str = "ann1",
    plan: Plan | None = None,
    confidence: bool = False,
    **plan_args: Any,
) -> Iterator[HumanServer]:
    """A page server over a fresh or resumed run (stopped and closed afterwards)."""
    plan = plan or make_plan(bench, data, plan_args.get("size"), plan_args.get("seed", 0), plan_args.get("gold", 0))
    run = HumanRun.open(bench, data, annotator, plan, out, confidence)
    server = HumanServer(run).start()
    try:
        yield server
    finally:
        server.stop()
        run.close()


def request(url: str, body: Any = None, raw: bytes | None = None) -> tuple[int, Any]:
    """GET (or POST JSON) `url`: the status and the decoded JSON (or text) answer."""
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data is not None else {})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            code, text = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        code, text = exc.code, exc.read()
    try:
        return code, json.loads(text)
    except ValueError:
        return code, text.decode("utf-8", "replace")


class Person:
    """A page in Chromium, driven as a person would: mouse drags, keys, clicks."""

    def __init__(self, browser: Any, url: str) -> None:
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.errors: list[str] = []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.url = url
        self.open()

    def open(self) -> None:
        self.page.goto(self.url)
        self.page.wait_for_selector("body[data-ready='1']", state="attached", timeout=10_000)

    def start(self) -> None:
        """Past the instructions to the next sample."""
        self.page.keyboard.press("Enter")
        self.page.wait_for_selector("#work:not([hidden])", timeout=10_000)

    def sample_id(self) -> str:
        return str(self.page.locator("body").get_attribute("data-sample"))

    def progress(self) -> tuple[int, int]:
        p = self.page.locator("#progress")
        return int(p.get_attribute("data-k") or 0), int(p.get_attribute("data-n") or 0)

    def drag_box(self, image: int, frac: tuple[float, float, float, float]) -> list[float]:
        """Drag from one corner to the other on image `image` (fractions of its shown size);
        returns the box in image pixels the drag means."""
        svg = self.page.locator(f".pane[data-image='{image}'] svg")
        svg.scroll_into_view_if_needed()
        box = svg.bounding_box()
        assert box is not None
        view = svg.get_attribute("viewBox")
        assert view is not None
        w, h = (float(v) for v in view.split()[2:])
        x1, y1, x2, y2 = frac
        self.page.mouse.move(box["x"] + x1 * box["width"], box["y"] + y1 * box["height"])
        self.page.mouse.down()
        self.page.mouse.move(box["x"] + (x1 + x2) / 2 * box["width"], box["y"] + (y1 + y2) / 2 * box["height"], steps=3)
        self.page.mouse.move(box["x"] + x2 * box["width"], box["y"] + y2 * box["height"], steps=3)
        self.page.mouse.up()
        return [x1 * w, y1 * h, x2 * w, y2 * h]

    def submit_and_wait(self) -> None:
        """Enter, then wait until the page moved on (another sample, the gold answer or the end)."""
        before = self.sample_id()
        self.page.keyboard.press("Enter")
        try:
            self.page.wait_for_function(
                "([id]) => document.body.dataset.sample !== id || !document.querySelector('#gold').hidden",
                arg=[before],
                timeout=10_000,
            )
        except Exception as exc:
            raise AssertionError(f"the page did not move on from {before}: {self.page.locator('#message').inner_text()}") from exc

    def close(self) -> None:
        self.page.close()

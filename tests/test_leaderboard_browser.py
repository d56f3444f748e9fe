"""The leaderboard page in Chromium (issue 41 item 6, issue 42 items 5, 7, 8): intervals as
`value [lo, hi]` with the level under the board, a "mean ± sd over K seeds" row, the refused
"humans (mean of k)" row and an undefined kappa, all as text. Screenshot: artifacts/leaderboard.png."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import REF_ADV_PREDICTIONS
from helpers.browser import ARTIFACTS, Page, chromium

from needlepoint.cli import main
from needlepoint.run.predictions_run import write_predictions_run


def human(folder: Path, name: str, records: list[dict[str, Any]], confidence: bool) -> None:
    folder.mkdir(parents=True)
    header = {
        "model_label": f"human:{name}",
        "config": {"benchmark": "mc_bench", "model": f"human:{name}", "solver_options": {"confidence": confidence}},
        "identity": {"solver.confidence": confidence},
    }
    block = {"acc": 0.9, "ap50": 0.4, "by_style": {}}
    n = len(records)
    metrics = {"official": block, "corrected": block, "run": {"samples": n, "answered": n, "failed": 0}}
    (folder / "run.json").write_text(json.dumps(header))
    (folder / "metrics.json").write_text(json.dumps(metrics))
    (folder / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("runs")
    base = root / "published"
    write_predictions_run("ref_adv_s", REF_ADV_PREDICTIONS, None, base)
    series = root / "repeats-x3-seed40"
    for r, acc in enumerate((0.50, 0.55, 0.60)):
        run = series / f"repeat-{r}"
        shutil.copytree(base, run)
        header = json.loads((run / "run.json").read_text())
        header["identity"]["generation"] = {"seed": 40 + r}
        header.update(hash=f"h{r}", model_label="org/m")
        header.pop("source")
        (run / "run.json").write_text(json.dumps(header))
        metrics = json.loads((run / "metrics.json").read_text())
        metrics["acc@0.5"] = acc
        (run / "metrics.json").write_text(json.dumps({k: v for k, v in metrics.items() if k != "intervals"}))
    (series / "repeats.json").write_text(json.dumps({"repeats": 3, "seeds": [40, 41, 42]}))
    box = [{"image": 0, "group": 1, "bbox": [0, 0, 10, 10]}, {"image": 1, "group": 1, "bbox": [5, 5, 20, 20]}]
    rec = [{"id": "s1", "answer": box, "solver": {"seconds": 4.0}}, {"id": "s2", "answer": box, "solver": {"seconds": 6.0}}]
    human(root / "humans" / "ann", "ann", rec, confidence=False)
    human(root / "humans" / "bob", "bob", rec[:1], confidence=True)
    return root


def test_leaderboard_page_shows_intervals_means_and_human_rows(runs: Path, tmp_path: Path) -> None:
    out = tmp_path / "board"
    assert main(["report", str(runs), "--out", str(out)]) == 0
    with chromium() as browser:
        page = Page(browser, out / "leaderboard.html", samples=False)
        text = page.page.locator("main").inner_text()
        cells = page.page.locator("td.num").all_inner_texts()
        assert any(c.startswith("54.0 [") and c.endswith("]") for c in cells), cells  # the rescored file's interval
        assert "55.0 ± 5.0" in cells  # the mean over the three seeds
        assert "org/m (mean ± sd over 3 seeds)" in text
        assert "the run's 95% interval over samples" in text and "±" not in "".join(c for c in cells if "[" in c)
        assert "humans (no mean of 2: different sample counts (2, 1); box confidences for some, not all)" in text
        assert "undefined" in cells  # both boxed every image: kappa has nothing to measure
        assert not page.errors and not page.dialogs
        ARTIFACTS.mkdir(exist_ok=True)
        page.page.screenshot(path=str(ARTIFACTS / "leaderboard.png"), full_page=True)
        page.close()

"""Issue 23 item 4: `needlepoint runs [DIR]` lists every run below a folder (benchmark, model,
solver, configuration, status, answered/failed, when, headline number; --json), and the HTML index
lists and filters the same runs (Chromium). Real run folders: a model run against the simulated
server, and the authors' released predictions written as a run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import REF_ADV_PREDICTIONS, ref_eval_args, scripted_ref_release
from helpers.browser import ARTIFACTS, Page, chromium

from needlepoint.cli import main
from needlepoint.report.index import write_index
from needlepoint.run.predictions_run import write_predictions_run


@pytest.fixture
def runs(serve: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """runs/ with a complete model run, a run with failed samples, and a published run."""
    data, _, keys, script = scripted_ref_release(tmp_path, n=4)
    root = tmp_path / "runs"
    good = serve(script=script, default=None)
    assert main(ref_eval_args(data, good.url, root / "ref_adv_s" / "org-m" / "a")) == 0
    failing = serve(script=script, default=None, faults={keys[0]: ["500"]})
    assert main(ref_eval_args(data, failing.url, root / "ref_adv_s" / "org-b" / "b", model="org/sim-model")) == 3
    write_predictions_run("ref_adv_s", REF_ADV_PREDICTIONS, None, root / "published" / "qwen72b")
    capsys.readouterr()
    return root


def test_runs_lists_every_run(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", str(runs), "--json"]) == 0
    listed = {r["path"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(listed) == {"ref_adv_s/org-m/a", "ref_adv_s/org-b/b", "published/qwen72b"}
    good, failed, published = listed["ref_adv_s/org-m/a"], listed["ref_adv_s/org-b/b"], listed["published/qwen72b"]
    assert (good["benchmark"], good["model"], good["solver"], good["status"]) == ("ref_adv_s", "org/m", "default", "complete")
    assert (good["answered"], good["failed"], good["samples"]) == (4, 0, 4)
    assert (failed["status"], failed["answered"], failed["failed"]) == ("incomplete", 3, 1)
    assert good["headline_metric"] == "Acc@0.5" and good["headline"] is not None
    assert published["model"] == "published:Qwen/Qwen2.5-VL-72B-Instruct"
    assert round(published["headline"], 1) == 54.0 and published["solver"] == "published"
    assert published["configuration"].endswith("(box_format=abs_xyxy, prompt_mode=direct)")

    assert main(["runs", str(runs)]) == 0
    table = capsys.readouterr().out
    assert "Acc@0.5 54.0" in table and "org/sim-model" in table and "3/4, 1 failed" in table


def test_runs_of_a_missing_folder_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("needlepoint: error:") and "\n" not in err


def test_index_lists_and_filters_runs(runs: Path) -> None:
    dirs = sorted(p.parent for p in runs.rglob("run.json"))
    index = write_index(runs, dirs)
    with chromium() as browser:
        page = Page(browser, index, samples=False)
        rows = page.page.locator("#runs-table tbody tr")
        assert rows.count() == 3

        def visible() -> int:
            return sum(rows.nth(i).is_visible() for i in range(rows.count()))

        page.page.fill("#runs-filter", "qwen")
        assert visible() == 1 and page.page.locator("#runs-count").inner_text() == "1 run(s)"
        page.page.fill("#runs-filter", "")
        page.page.select_option("#runs-status", "incomplete")
        assert visible() == 1 and "org/sim-model" in page.page.locator("#runs-table tbody tr:visible").inner_text()
        page.page.select_option("#runs-status", "")
        page.page.select_option("#runs-benchmark", "ref_adv_s")
        assert visible() == 3
        assert page.errors == []
        ARTIFACTS.mkdir(exist_ok=True)  # git-ignored; docs/images/runs-index.png is a copy of it
        page.page.locator(".runs-list").screenshot(path=str(ARTIFACTS / "runs-index.png"))
        page.close()


def test_runs_html_writes_an_index_linking_every_run_page(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 42 item 8: `needlepoint runs FOLDER --html` writes FOLDER/index.html outside the demo,
    a link to every run's own page (a run that never finished listed too), opened in Chromium."""
    unfinished = runs / "ref_adv_s" / "org-m" / "a"
    copy = runs / "ref_adv_s" / "org-m" / "stopped"
    copy.mkdir()
    (copy / "run.json").write_text((unfinished / "run.json").read_text())  # a run killed before its metrics
    assert main(["runs", str(runs), "--html"]) == 0
    captured = capsys.readouterr()
    index = runs / "index.html"
    assert f"index of 4 run(s): {index}" in captured.err and "Acc@0.5" in captured.out
    with chromium() as browser:
        page = Page(browser, index, samples=False)
        assert page.page.locator("#runs-table tbody tr").count() == 4
        assert page.page.locator("h1").inner_text() == f"runs below {runs}" and page.page.title() == f"runs below {runs}"
        links = page.page.locator("#runs-table tbody a")
        hrefs = sorted(str(links.nth(i).get_attribute("href")) for i in range(links.count()))
        assert hrefs == [f"{p}/report/index.html" for p in ("ref_adv_s/org-b/b", "ref_adv_s/org-m/a")]  # every run page there is
        for href in hrefs:  # each opens the run's own page
            page.page.goto((runs / href).resolve().as_uri(), wait_until="networkidle")
            assert page.page.title()
        page.page.goto(index.resolve().as_uri(), wait_until="networkidle")
        page.page.locator("#runs-table tbody a").first.click()
        page.page.wait_for_load_state("networkidle")
        assert page.page.url.endswith("/report/index.html")
        assert page.errors == []
        page.page.goto(index.resolve().as_uri())
        ARTIFACTS.mkdir(exist_ok=True)
        page.page.screenshot(path=str(ARTIFACTS / "runs-html.png"), full_page=False)
        page.close()
    assert not (runs / "report").exists()  # nothing else written into the folder

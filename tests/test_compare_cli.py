"""`needlepoint compare` through the command line, on two runs of each benchmark made against two
simulated models on 127.0.0.1 (tests/helpers/compare.py): the values are the runs' own metrics,
the McNemar counts are those of the records, the refusals are one sentence with exit code 2,
and a run that answered fewer samples is paired on what both answered."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from helpers import one_sentence, records, run_quiet
from helpers.compare import has_resampler, make_runs

from needlepoint.cli import main
from needlepoint.compare.mcnemar import exact_p


def compare_json(*args: str) -> dict[str, Any]:
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        assert main(["compare", *args, "--json", "--resamples", "300"]) == 0
    result: dict[str, Any] = json.loads(out.getvalue())
    return result


def by_metric(result: dict[str, Any], contrast: int = 0) -> dict[str, dict[str, Any]]:
    """The rows of a contrast by metric, a row left out as a repeat of another under its own name too."""
    rows = _rows(result, contrast)
    for name, twin in result.get("left_out_as_repeats", {}).items():
        rows[name] = rows[twin]
    return rows


def _rows(result: dict[str, Any], contrast: int = 0) -> dict[str, dict[str, Any]]:
    return {m["metric"]: m for m in result["contrasts"][contrast]["metrics"]}


def metric_at(metrics: dict[str, Any], name: str) -> Any:
    """A "/"-joined metric name's value in metrics.json (its path)."""
    value: Any = metrics
    for part in name.split("/"):
        value = value[part]
    return value


def metrics_json(run: Path) -> dict[str, Any]:
    metrics: dict[str, Any] = json.loads((run / "metrics.json").read_text())
    return metrics


@pytest.fixture(scope="module")
def ref_runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_runs("ref_adv_s", tmp_path_factory.mktemp("ref"))


def test_ref_adv_compare_values_differences_and_mcnemar(ref_runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, a, b = ref_runs
    result = compare_json(str(a), str(b), "--out", str(tmp_path / "page"))
    assert result["benchmark"] == "ref_adv_s" and result["paired"] == 30
    assert [r["name"] for r in result["runs"]] == ["sim-a", "sim-b"]
    rows = by_metric(result)
    for name in ("acc@0.5", "acc@0.75", "acc@0.9", "bins/2-3/acc@0.5"):
        row = rows[name]
        assert row["first"] == pytest.approx(metric_at(metrics_json(a), name))  # every sample paired: the runs' own values
        assert row["other"] == pytest.approx(metric_at(metrics_json(b), name))
        assert row["difference"] == pytest.approx(row["other"] - row["first"])
        lo, hi = row["interval"]
        assert lo <= row["difference"] <= hi and 0.0 <= row["p"] <= 1.0
    hit_a = {r["id"]: r["scores"]["hit"] for r in records(a)}
    hit_b = {r["id"]: r["scores"]["hit"] for r in records(b)}
    only_a = sum(hit_a[i] and not hit_b[i] for i in hit_a)
    only_b = sum(hit_b[i] and not hit_a[i] for i in hit_a)
    assert only_a > 0  # model B answers every third case with the next case's box
    mc = rows["acc@0.5"]["mcnemar"]
    assert (mc["only_a"], mc["only_b"]) == (only_a, only_b)
    assert mc["p"] == pytest.approx(exact_p(only_a, only_b))
    for row in rows.values():  # paired draws: where B never beats A on a sample, no resample has B ahead
        if row.get("mcnemar", {}).get("only_b") == 0:
            assert row["interval"][1] <= 0.0
    assert (tmp_path / "page" / "index.html").is_file()


def test_the_terminal_table_names_the_runs_and_the_pairing(ref_runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, a, b = ref_runs
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()) as err:
        assert main(["compare", str(a), str(b), "--out", str(tmp_path / "p"), "--resamples", "200"]) == 0
    text = out.getvalue()
    assert "A: sim-a" in text and "B: sim-b" in text
    assert "paired on 30 samples" in text and "A 0, B 0" in text
    assert "McNemar p" in text and "acc@0.5" in text and "95% interval" in text
    assert "compare page:" in err.getvalue()


def test_runs_of_different_sizes_are_paired_on_what_both_answered(tmp_path: Path) -> None:
    _, a, b = make_runs("ref_adv_s", tmp_path, limits=(None, 20))
    result = compare_json(str(a), str(b), "--no-page")
    assert result["paired"] == 20
    assert [r["left_out"] for r in result["runs"]] == [10, 0]
    assert by_metric(result)["acc@0.5"]["mcnemar"]["only_a"] + by_metric(result)["acc@0.5"]["mcnemar"]["both"] <= 20
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(io.StringIO()):
        assert main(["compare", str(a), str(b), "--no-page", "--resamples", "100"]) == 0
    assert "A 10, B 0" in out.getvalue()


def test_three_runs_are_each_compared_with_the_first(ref_runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, a, b = ref_runs
    c = tmp_path / "copy-of-a"
    shutil.copytree(a, c)
    result = compare_json(str(a), str(b), str(c), "--no-page")
    assert [x["other"] for x in result["contrasts"]] == [r["name"] for r in result["runs"][1:]]
    same = by_metric(result, 1)["acc@0.5"]
    assert same["difference"] == 0.0 and same["p"] == 1.0 and same["mcnemar"]["p"] == 1.0


def test_runs_of_different_benchmarks_are_refused(ref_runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, a, _ = ref_runs
    _, mc, _ = make_runs("mc_bench", tmp_path, limits=(4, 1))
    rc, err = run_quiet(["compare", str(a), str(mc), "--no-page"])
    line = one_sentence(err)
    assert rc == 2 and "mc_bench" in line and "ref_adv_s" in line and "one benchmark" in line


def test_runs_of_different_data_are_refused(ref_runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release

    data, a, b = ref_runs
    # B's header says it answered other data (another release's fingerprint)
    other = tmp_path / "b"
    shutil.copytree(b, other)
    header = json.loads((other / "run.json").read_text())
    header["identity"]["dataset"] = "0123456789abcdef/30"
    (other / "run.json").write_text(json.dumps(header))
    rc, err = run_quiet(["compare", str(a), str(other), "--no-page"])
    line = one_sentence(err)
    assert rc == 2 and "other data" in line and "same dataset" in line
    # the data both runs name has changed since they answered
    changed = tmp_path / "changed"
    write_release(changed, make_rows(30, seed=11))
    rc, err = run_quiet(["compare", str(a), str(b), "--data", str(changed), "--no-page"])
    line = one_sentence(err)
    assert rc == 2 and str(changed) in line and "--data" in line
    assert data.is_dir()


def test_bad_run_folders_are_refused_in_one_sentence(ref_runs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, a, _ = ref_runs
    rc, err = run_quiet(["compare", str(a), "--no-page"])
    assert rc == 2 and "two or more run folders" in one_sentence(err)
    rc, err = run_quiet(["compare", str(a), str(tmp_path), "--no-page"])
    assert rc == 2 and "no run" in one_sentence(err)
    rc, err = run_quiet(["compare", str(a), str(tmp_path / "missing"), "--no-page"])
    assert rc == 2 and "not a run folder" in one_sentence(err)
    rc, err = run_quiet(["compare", str(a), str(a), "--ci-level", "95", "--no-page"])
    assert rc == 2 and "--ci-level" in one_sentence(err)


@pytest.mark.skipif(not has_resampler("mc_bench"), reason="MC-Bench offers no resampler yet (stats, issue 23 item 1)")
def test_mc_bench_compare(tmp_path: Path) -> None:
    _, a, b = make_runs("mc_bench", tmp_path)
    result = compare_json(str(a), str(b), "--out", str(tmp_path / "page"))
    assert result["benchmark"] == "mc_bench" and result["paired"] == 24
    rows = by_metric(result)
    for name in ("official/ap50", "official/acc", "corrected/ap50", "corrected/acc"):
        assert rows[name]["first"] == pytest.approx(metric_at(metrics_json(a), name))
        assert rows[name]["other"] == pytest.approx(metric_at(metrics_json(b), name))
    assert "mcnemar" not in rows["official/ap50"]  # AP50 is no share of samples right
    mc = rows["corrected/acc"]["mcnemar"]
    assert mc["only_a"] + mc["only_b"] + mc["both"] + mc["neither"] == 24
    assert mc["p"] == pytest.approx(exact_p(mc["only_a"], mc["only_b"]))


@pytest.mark.skipif(not has_resampler("mm_niah"), reason="MM-NIAH offers no resampler yet (stats, issue 23 item 1)")
def test_mm_niah_compare_and_its_difference_heatmap(tmp_path: Path) -> None:
    _, a, b = make_runs("mm_niah", tmp_path)
    result = compare_json(str(a), str(b), "--out", str(tmp_path / "page"))
    assert result["benchmark"] == "mm_niah" and result["paired"] == len(records(a))
    rows = by_metric(result)
    assert rows  # every headline metric of MM-NIAH's resampler
    score_a = {r["id"]: r["scores"]["score"] for r in records(a)}
    score_b = {r["id"]: r["scores"]["score"] for r in records(b)}
    right = rows["samples right"]  # the run report's verdict: full credit
    only_a = sum(score_a[i] >= 1 and score_b[i] < 1 for i in score_a)
    only_b = sum(score_b[i] >= 1 and score_a[i] < 1 for i in score_a)
    assert (right["mcnemar"]["only_a"], right["mcnemar"]["only_b"]) == (only_a, only_b) and only_a > 0
    assert right["first"] == pytest.approx(sum(v >= 1 for v in score_a.values()) / len(score_a))
    assert rows["samples right, task counting-text"]["mcnemar"]["p"] <= 1.0
    assert "mcnemar" not in rows["overall/overall"]  # the authors' mean of range means: no share of samples
    assert rows["overall/overall"]["first"] == pytest.approx(metrics_json(a)["overall"]["overall"])
    page = (tmp_path / "page" / "index.html").read_text()
    assert page.count('<table class="heat">') >= 2 and "data-diff" in page
    assert any(score_a[i] != score_b[i] for i in score_a)


def test_an_out_folder_that_holds_other_files_is_refused_and_left_as_it_was(
    ref_runs: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The page replaces index.html and removes the thumbnails it does not show: a folder of
    someone's own files (pictures in a thumbs/ folder) is refused in one sentence, untouched; an
    earlier compare page is written again."""
    _, a, b = ref_runs
    mine = tmp_path / "pictures"
    (mine / "thumbs").mkdir(parents=True)
    (mine / "thumbs" / "holiday.jpg").write_bytes(b"\xff\xd8 mine")
    (mine / "index.html").write_text("<title>my album</title>")
    rc, err = run_quiet(["compare", str(a), str(b), "--out", str(mine)])
    assert rc == 2 and "no compare page" in one_sentence(err) and "index.html" in err
    assert (mine / "thumbs" / "holiday.jpg").read_bytes() == b"\xff\xd8 mine"
    assert (mine / "index.html").read_text() == "<title>my album</title>"
    page = tmp_path / "page"
    for _ in range(2):  # new, then an earlier compare page: written both times
        rc, err = run_quiet(["compare", str(a), str(b), "--out", str(page)])
        assert rc == 0, err
    (page / "notes.txt").write_text("mine")
    rc, err = run_quiet(["compare", str(a), str(b), "--out", str(page)])
    assert rc == 2 and "notes.txt" in one_sentence(err)

"""What the run page shows: failed requests as their own badge and filter, what the model saw, the
solver's label, answered / requested, a run with nothing answered, and a finished run rerun that
rewrites neither its heatmaps nor its report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from helpers import report_blob, small_niah
from helpers.display import HOSTILE, failed_run, run_block

from needlepoint.report import html as report_html
from needlepoint.report import rows as report_rows
from needlepoint.report.assets import JS


def test_failed_requests_get_their_own_badge_and_filter(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = failed_run(tmp_path)
    metrics = {**bench.score(samples, recs), "run": run_block(recs)}
    page = report_html.write_run_report(run_dir, bench, samples, recs, metrics, header)
    data = report_blob(page)
    by_id = {it["id"]: it for it in data["items"]}
    assert data["failed"] == 3
    assert [by_id[r["id"]].get("st") for r in recs] == [None, None, "backend_error", "backend_error", "backend_error"]
    text = page.read_text(encoding="utf-8")
    assert 'id="np-failed"' in text and "failed requests only (3)" in text
    assert "failed request: " in JS and "it.st" in JS  # the page's script
    # The configuration and the headline say how much of the run the numbers cover.
    assert "2 answered / 5 requested (3 failed)" in text
    assert "answered 2 of 5 requested (3 failed)" in text
    # The run page names the model as the leaderboard does (the solver's label).
    assert "m + grounding-dino (agentic)" in text.split("</h1>")[0]


def test_what_the_model_saw_travels_with_each_sample(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = failed_run(tmp_path)
    recs.append({**recs[0], "id": "old"})  # a record of an older run: no `sent`
    page = report_html.write_run_report(run_dir, bench, samples, recs[:-1], {"run": run_block(recs[:-1])}, header)
    data = report_blob(page)
    first = data["items"][0]
    ((label, messages),) = first["w"]
    assert label == "turn 1"
    assert [m[0] for m in messages] == ["system", "user"]
    image, text = messages[1][1]
    assert text == ["t", f"Find the object 0. {HOSTILE}"]  # verbatim; the page writes it with textContent
    assert image[:6] == ["i", str(samples[0].image.path or samples[0].image.key), 640, 480, 12345, "ab" * 32]
    assert image[6] == first["im"][0][0] and image[6].startswith("thumbs/")  # the card's own thumbnail
    assert "w" not in data["items"][2]  # a failed request recorded nothing sent
    assert report_rows.sent_view({"turns": [{"reply": "x"}]}, {}) == []  # older records: nothing to show
    raw = page.read_text(encoding="utf-8")
    assert "<script>alert(1)" not in raw and "\\u003cscript\\u003ealert(1)" in raw


def test_a_run_with_nothing_answered_has_a_page_with_a_sentence(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = failed_run(tmp_path, answered=0)
    page = report_html.write_run_report(run_dir, bench, samples, recs, {"run": run_block(recs)}, header)
    text = page.read_text(encoding="utf-8")
    assert "No sample was answered (5 of 5 requested failed)" in text
    assert report_blob(page)["failed"] == 5


def stamps(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_ino, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_finished_run_rerun_redraws_neither_heatmaps_nor_report(tmp_path: Path, capfd: Any) -> None:
    from needlepoint.core.config import RunConfig
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
    from needlepoint.run.evaluate import evaluate

    data, options, script = small_niah(tmp_path / "data")
    out = tmp_path / "run"
    with SimulatedServer(script=script, default=None) as server:

        def run() -> Any:
            config = RunConfig(
                benchmark="mm_niah",
                data=data,
                model=SIMULATED_MODEL_NAME,
                api_urls=[server.url],
                options=options,
                out=out,
                concurrency=4,
                show_progress=False,
            )
            return evaluate(config)

        run()
        assert "drawing 7 MM-NIAH heatmaps" in capfd.readouterr().err
        heatmaps, report = stamps(out / "heatmaps"), stamps(out / "report")
        assert any(name.endswith(".png") for name in heatmaps) and "index.html" in report
        run()  # nothing to request: the heatmaps and the page are current
        assert "drawing" not in capfd.readouterr().err
        assert stamps(out / "heatmaps") == heatmaps and stamps(out / "report") == report
        # A changed answer makes the page (not the heatmaps of the same numbers) current again.
        lines = (out / "records.jsonl").read_text(encoding="utf-8").splitlines()
        first = json.loads(lines[0])
        first["turns"][0]["reasoning"] = "thought it over"
        (out / "records.jsonl").write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n", encoding="utf-8")
        run()
        assert stamps(out / "heatmaps") == heatmaps
        assert stamps(out / "report")["index.html"] != report["index.html"]
        assert "thought it over" in (out / "report" / "index.html").read_text(encoding="utf-8")


def test_the_demo_captions_the_agentic_run_above_its_own_table(tmp_path: Path, capsys: Any) -> None:
    from needlepoint.demo import run_demo

    run_demo(tmp_path / "demo", ["mc_bench"])  # its exit code is not what this test is about
    lines = capsys.readouterr().out.splitlines()
    caption = next(i for i, line in enumerate(lines) if "--solver agentic" in line)
    headlines = [i for i, line in enumerate(lines) if line.startswith("MC-Bench (%")]
    assert len(headlines) == 2 and headlines[0] < caption < headlines[1]  # the default solver's table, then the caption

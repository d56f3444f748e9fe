"""The human baseline's page in Chromium, driven as a person would, for all three benchmarks:
boxes dragged on both images of an MC-Bench pair with groups, a Ref-Adv-s box, MM-NIAH answers of
each type; a reload mid-plan continues; two annotators on one plan; what is stored scores as the
same answers given as a prediction file. Screenshots go to artifacts/human-*.png (docs/images has copies)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import ARTIFACTS, chromium
from helpers.human import Person, releases, serving

from needlepoint.core.store import read_records
from needlepoint.human.plan import make_plan
from needlepoint.run.evaluate import score

SHOTS = ARTIFACTS  # screenshots (git-ignored); docs/images/human-*.png are copies of them


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    SHOTS.mkdir(parents=True, exist_ok=True)
    return releases(tmp_path_factory.mktemp("human_page"))


@pytest.fixture(scope="module")
def browser() -> Any:
    with chromium() as b:
        yield b


def close_to(got: list[float], want: list[float], tol: float = 2.0) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(got, want, strict=True))


def test_mc_bench_boxes_on_both_images_with_groups_and_a_reload(data: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with serving("mc_bench", data["mc_bench"], out, size=3, seed=1, gold=1) as server:
        person = Person(browser, server.url)
        assert person.page.locator("#intro-text p").count() >= 3  # the instructions come first
        SHOTS.mkdir(parents=True, exist_ok=True)
        person.page.screenshot(path=str(SHOTS / "human-instructions.png"))
        person.start()
        drawn: dict[str, list[tuple[int, int, list[float]]]] = {}
        gold_seen = False
        for step in range(4):
            sid = person.sample_id()
            assert person.progress() == (step + 1, 4)
            first = person.drag_box(0, (0.1, 0.15, 0.45, 0.6))  # every sample starts at group 1
            person.page.keyboard.press("2")  # the group of the next box: the one just drawn stays in group 1
            second = person.drag_box(1, (0.5, 0.2, 0.9, 0.7))
            assert person.page.locator("#box-list li").count() == 2
            drawn[sid] = [(0, 1, first), (1, 2, second)]
            if step == 0:
                SHOTS.mkdir(parents=True, exist_ok=True)
                person.page.screenshot(path=str(SHOTS / "human-mc_bench.png"))
            person.submit_and_wait()
            if not person.page.locator("#gold").is_hidden():  # a training sample: its answer shown
                gold_seen = True
                assert person.page.locator("#gold-text").inner_text()
                assert person.page.locator("rect.gt").count() >= 0
                person.page.keyboard.press("Enter")
                person.page.wait_for_function("([id]) => document.body.dataset.sample !== id", arg=[sid])
            if step == 1:  # reload mid-plan: the page resumes at the next unanswered sample
                person.open()
                person.start()
                assert person.progress() == (3, 4)
        assert gold_seen
        person.page.wait_for_selector("#finished:not([hidden])")
        assert person.errors == [], sorted(set(person.errors))
        person.close()
    records = read_records(out / "records.jsonl")
    gold = read_records(out / "gold.jsonl")
    assert len(records) == 3 and len(gold) == 1
    for sid, rec in {**records, **gold}.items():
        got = sorted((b["image"], b["group"], b["bbox"]) for b in rec["answer"])
        for (image, group, want), (gi, gg, gb) in zip(drawn[sid], got, strict=True):
            assert (gi, gg) == (image, group) and close_to(gb, want), (gb, want)
        assert all(b["score"] == 1.0 for b in rec["answer"])  # without --confidence every box is 1.0
        assert rec["solver"]["seconds"] >= 0 and rec["solver"]["source"] == "page"
    # the run folder scores exactly as the same boxes in the authors' results format
    metrics = json.loads((out / "metrics.json").read_text())
    from needlepoint.benchmarks.mc_bench.benchmark import McBench
    from needlepoint.benchmarks.mc_bench.scoring import score_results

    ds = McBench(box_format="abs_xyxy").load(data["mc_bench"])
    by_id = {s.id: s for s in ds}
    results = [
        {
            "image_id": by_id[sid].image_ids[b["image"]],
            "category_id": b["group"],
            "score": 1.0,
            "bbox": [b["bbox"][0], b["bbox"][1], b["bbox"][2] - b["bbox"][0], b["bbox"][3] - b["bbox"][1]],
        }
        for sid, rec in records.items()
        for b in rec["answer"]
    ]
    expected = score_results(ds.truth, results, [s.id for s in ds if s.id in records])
    assert metrics["official"] == expected["official"] and metrics["corrected"] == expected["corrected"]
    assert score("mc_bench", out, data["mc_bench"])[1]["official"] == expected["official"]


def test_ref_adv_one_box_two_annotators_and_the_prediction_file(data: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    plan = make_plan("ref_adv_s", data["ref_adv_s"], 3, seed=7)
    boxes: dict[str, dict[str, list[float]]] = {}
    for n, name in enumerate(("ann1", "ann2")):
        with serving("ref_adv_s", data["ref_adv_s"], tmp_path / name, annotator=name, plan=plan) as server:
            person = Person(browser, server.url)
            person.start()
            boxes[name] = {}
            while person.page.locator("#finished").is_hidden():
                sid = person.sample_id()
                person.drag_box(0, (0.3, 0.3, 0.5, 0.5))  # drawn again: the first box is replaced
                boxes[name][sid] = person.drag_box(0, (0.1 + 0.1 * n, 0.2, 0.6, 0.7))
                assert person.page.locator("rect.box").count() == 1
                if n == 0 and len(boxes[name]) == 1:
                    person.page.screenshot(path=str(SHOTS / "human-ref_adv_s.png"))
                person.submit_and_wait()
            assert person.errors == []
            person.close()
    one, two = (read_records(tmp_path / name / "records.jsonl") for name in ("ann1", "ann2"))
    assert set(one) == set(two) == set(plan.ids)  # the same plan for both annotators
    for name, recs in (("ann1", one), ("ann2", two)):
        for sid, rec in recs.items():
            assert len(rec["answer"]) == 1 and close_to(rec["answer"][0], boxes[name][sid])
    # the same boxes as a prediction file in the authors' schema score the same
    from needlepoint.benchmarks.ref_adv.benchmark import RefAdv

    samples = {s.id: s for s in RefAdv(box_format="abs_xyxy").load(data["ref_adv_s"])}
    lines = [
        {
            "row_idx": samples[sid].row_idx,
            "distractor_count": samples[sid].distractors,
            "gt_bbox_xyxy": list(samples[sid].gt),
            "pred_box_xyxy_first": rec["answer"][0],
            "parse_error": "",
            "model_full_name": "human:ann1",
            "prompt_id": "direct",
            "use_negation": samples[sid].use_negation,
            "human_authored": samples[sid].human_authored,
            "image_source": samples[sid].image_source,
        }
        for sid, rec in one.items()
    ]
    file = tmp_path / "predictions.jsonl"
    file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    from_file = score("ref_adv_s", file)[1]
    from_run = score("ref_adv_s", tmp_path / "ann1")[1]
    for key in ("n", "acc@0.5", "acc@0.75", "acc@0.9", "bins"):
        assert from_run[key] == from_file[key], key


def test_mm_niah_answers_of_each_type(data: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah

    truth = {s.id: s for s in MmNiah().load(data["mm_niah"])}
    out = tmp_path / "run"
    shot: set[str] = set()
    with serving("mm_niah", data["mm_niah"], out) as server:
        person = Person(browser, server.url)
        person.start()
        while person.page.locator("#finished").is_hidden():
            sid = person.sample_id()
            s = truth[sid]
            if s.task.startswith("counting"):
                person.page.locator("#answer-counts").fill(", ".join(str(c) for c in s.answer))
                kind = "counts"
            elif person.page.locator(".options").count():
                person.page.locator("#question").click()  # focus off any field: letters choose options
                person.page.keyboard.press(chr(ord("a") + s.answer))
                assert person.page.locator(".options label.chosen").get_attribute("data-letter") == chr(ord("A") + s.answer)
                kind = "option-image" if person.page.locator(".options img").count() else "option"
            else:
                person.page.locator("#answer-text").fill(str(s.answer))
                kind = "text"
            if kind not in shot and kind in ("counts", "option-image", "text"):
                shot.add(kind)
                person.page.locator("#submit").scroll_into_view_if_needed()
                person.page.screenshot(path=str(SHOTS / f"human-mm_niah-{kind}.png"), full_page=False)
            person.submit_and_wait()
        assert person.errors == []
        person.close()
    records = read_records(out / "records.jsonl")
    assert set(records) == set(truth)
    assert {truth[i].task for i in records} == {
        "retrieval-text",
        "retrieval-image",
        "counting-text",
        "counting-image",
        "reasoning-text",
        "reasoning-image",
    }
    assert all(r["scores"]["score"] == 1.0 for r in records.values()), [r["answer"] for r in records.values()]
    assert json.loads((out / "metrics.json").read_text())["run"]["answered"] == len(truth)
    metrics = json.loads((out / "metrics.json").read_text())
    from_files = score("mm_niah", out)[1]  # the leaderboard files the run wrote, in the authors' format
    assert from_files["overall"] == metrics["overall"] and from_files["tasks"] == metrics["tasks"]


def test_unsure_note_skip_and_confidence_by_keys(data: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with serving("mc_bench", data["mc_bench"], out, size=2, seed=9, confidence=True) as server:
        person = Person(browser, server.url)
        person.start()
        first = person.sample_id()
        person.drag_box(1, (0.2, 0.2, 0.6, 0.6))
        assert person.page.locator("#confidence-row").is_visible()
        person.page.keyboard.press("[")
        person.page.keyboard.press("[")  # 1.0 -> 0.8
        person.page.keyboard.press("Shift+U")
        person.page.keyboard.press("Shift+N")
        person.page.keyboard.type("the <b>left</b> one?")
        person.page.keyboard.press("Control+Enter")
        person.page.wait_for_function("([id]) => document.body.dataset.sample !== id", arg=[first])
        second = person.sample_id()
        person.page.keyboard.press("Shift+S")
        person.page.wait_for_selector("#finished:not([hidden])")
        assert person.errors == [], person.errors
        person.close()
    records = read_records(out / "records.jsonl")
    assert records[first]["answer"][0]["score"] == 0.8 and records[first]["answer"][0]["image"] == 1
    assert records[first]["solver"]["unsure"] is True and records[first]["solver"]["note"] == "the <b>left</b> one?"
    assert records[second]["solver"]["skipped"] is True and records[second]["parse_error"] == "skipped"
    assert records[second]["answer"] is None


def test_the_clock_counts_only_while_the_tab_is_visible(data: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with serving("ref_adv_s", data["ref_adv_s"], out, size=1, seed=1) as server:
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        page.clock.install()
        person = Person.__new__(Person)
        person.page, person.errors, person.url = page, [], server.url
        person.open()
        page.clock.pause_at(page.evaluate("Date.now()") + 1_000)  # from here on the page's time moves only as the test says
        person.start()
        sid = person.sample_id()
        person.drag_box(0, (0.2, 0.2, 0.5, 0.5))
        page.clock.run_for(5_000)
        hide = "(h) => { Object.defineProperty(document, 'hidden', {value: h, configurable: true}); document.dispatchEvent(new Event('visibilitychange')); }"
        page.evaluate(hide, True)
        page.clock.run_for(600_000)  # ten minutes in another tab
        page.evaluate(hide, False)
        page.clock.run_for(2_000)
        person.submit_and_wait()
        page.close()
    seconds = read_records(out / "records.jsonl")[sid]["solver"]["seconds"]
    assert 7.0 <= seconds < 8.0, seconds  # 5 s + 2 s visible; the ten hidden minutes not counted


def test_boxes_move_resize_and_delete_with_the_mouse_and_keys(data: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with serving("mc_bench", data["mc_bench"], out, size=1, seed=4) as server:
        person = Person(browser, server.url)
        person.start()
        sid = person.sample_id()
        page = person.page
        person.drag_box(0, (0.1, 0.1, 0.3, 0.3))
        person.drag_box(0, (0.5, 0.5, 0.7, 0.7))
        page.keyboard.press("Delete")  # the selected (second) box goes
        assert page.locator("rect.box").count() == 1
        svg = page.locator(".pane[data-image='0'] svg").bounding_box()
        assert svg is not None
        x, y, w, h = svg["x"], svg["y"], svg["width"], svg["height"]

        def drag(fx: float, fy: float, tx: float, ty: float) -> None:
            page.mouse.move(x + fx * w, y + fy * h)
            page.mouse.down()
            page.mouse.move(x + tx * w, y + ty * h, steps=4)
            page.mouse.up()

        drag(0.2, 0.2, 0.4, 0.5)  # move: the box's middle by (+0.2, +0.3) of the image
        drag(0.5, 0.6, 0.6, 0.8)  # resize: its bottom-right corner handle further out
        size = [float(v) for v in (page.locator(".pane[data-image='0'] svg").get_attribute("viewBox") or "").split()[2:]]
        person.submit_and_wait()
        page.wait_for_selector("#finished:not([hidden])")
        assert person.errors == []
        person.close()
    (box,) = read_records(out / "records.jsonl")[sid]["answer"]
    want = [0.3 * size[0], 0.4 * size[1], 0.6 * size[0], 0.8 * size[1]]
    assert close_to(box["bbox"], want, 3.0), (box["bbox"], want)

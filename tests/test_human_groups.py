"""Issue 42 item 5, the page: the human page cannot mis-group silently. In Chromium, as a person
would: a group key chooses the group of the next box (the box just drawn keeps its group), a
clicked box changes group visibly, every sample starts at group 1; a drag that starts just outside
an image draws a box clamped to its edge; a gold sample draws the expected boxes in their groups'
colours and says what was wrong; the terminal says when the plan is done."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import ARTIFACTS, chromium
from helpers.cli import start_cli
from helpers.human import Person, releases, request, serving

from needlepoint.core.store import read_records
from needlepoint.human.plan import load_plan_data, make_plan
from needlepoint.human.views import gold_answer


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return releases(tmp_path_factory.mktemp("human_groups"))


@pytest.fixture(scope="module")
def browser() -> Any:
    with chromium() as b:
        yield b


def close_to(got: list[float], want: list[float], tol: float = 2.0) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(got, want, strict=True))


def groups_bar(person: Person) -> tuple[str, str, str]:
    """(mode, the next box's group, the highlighted group) of the group bar."""
    bar = person.page.locator("#groups")
    current = person.page.locator("#groups button.current").inner_text()
    return str(bar.get_attribute("data-mode")), str(bar.get_attribute("data-next")), current


def click_middle(person: Person, image: int, frac: tuple[float, float, float, float]) -> None:
    box = person.page.locator(f".pane[data-image='{image}'] svg").bounding_box()
    assert box is not None
    x1, y1, x2, y2 = frac
    person.page.mouse.click(box["x"] + (x1 + x2) / 2 * box["width"], box["y"] + (y1 + y2) / 2 * box["height"])


def test_a_group_key_chooses_the_next_box_and_never_recolours_the_one_just_drawn(
    data: dict[str, Path], browser: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    with serving("mc_bench", data["mc_bench"], out, size=2, seed=1) as server:
        person = Person(browser, server.url)
        person.start()
        first = person.sample_id()
        assert groups_bar(person) == ("next", "1", "1")
        person.page.keyboard.press("2")  # chosen before drawing
        a = person.drag_box(0, (0.1, 0.15, 0.45, 0.6))
        person.page.keyboard.press("3")  # the next box's group: box 1 stays in group 2
        assert groups_bar(person) == ("next", "3", "3")
        assert "group 2" in person.page.locator("#box-list li").nth(0).inner_text()
        b = person.drag_box(1, (0.5, 0.2, 0.9, 0.7))
        assert "group 3" in person.page.locator("#box-list li").nth(1).inner_text()
        click_middle(person, 0, (0.1, 0.15, 0.45, 0.6))  # a box changes group only when clicked, and visibly
        assert groups_bar(person) == ("selected", "3", "2")
        assert "selected box 1" in person.page.locator("#groups-label").inner_text()
        person.page.keyboard.press("1")
        assert groups_bar(person) == ("selected", "3", "1")
        assert "box 1 moved from group 2 to group 1" in person.page.locator("#message").inner_text()
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        person.page.screenshot(path=str(ARTIFACTS / "human-groups-selected.png"))
        person.page.keyboard.press("Escape")
        assert groups_bar(person) == ("next", "3", "3")
        person.submit_and_wait()
        second = person.sample_id()
        assert second != first
        assert groups_bar(person) == ("next", "1", "1")  # no group carries over to the next sample
        c = person.drag_box(0, (0.2, 0.2, 0.5, 0.5))
        person.submit_and_wait()
        person.page.wait_for_selector("#finished:not([hidden])")
        assert person.errors == [], person.errors
        person.close()
    records = read_records(out / "records.jsonl")
    got = sorted((x["image"], x["group"], x["bbox"]) for x in records[first]["answer"])
    assert [(i, g) for i, g, _ in got] == [(0, 1), (1, 3)]
    assert close_to(got[0][2], a) and close_to(got[1][2], b)
    ((image, group, bbox),) = [(x["image"], x["group"], x["bbox"]) for x in records[second]["answer"]]
    assert (image, group) == (0, 1) and close_to(bbox, c)


def test_a_drag_that_starts_just_outside_the_image_is_clamped_to_its_edge(
    data: dict[str, Path], browser: Any, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    with serving("mc_bench", data["mc_bench"], out, size=1, seed=2) as server:
        person = Person(browser, server.url)
        person.start()
        sid = person.sample_id()
        svg = person.page.locator(".pane[data-image='1'] svg")
        box = svg.bounding_box()
        assert box is not None
        w, h = (float(v) for v in (svg.get_attribute("viewBox") or "").split()[2:])
        page = person.page
        page.mouse.move(box["x"] - 6, box["y"] - 5)  # just above and left of Image 2's corner
        page.mouse.down()
        page.mouse.move(box["x"] + 0.2 * box["width"], box["y"] + 0.2 * box["height"], steps=3)
        page.mouse.move(box["x"] + 0.4 * box["width"], box["y"] + 0.5 * box["height"], steps=3)
        page.mouse.up()
        assert page.locator("rect.box").count() == 1
        page.mouse.move(box["x"] + box["width"] + 4, box["y"] + box["height"] * 0.9)  # just right of the bottom edge
        page.mouse.down()
        page.mouse.move(box["x"] + 0.7 * box["width"], box["y"] + box["height"] + 30, steps=4)
        page.mouse.up()
        assert page.locator("rect.box").count() == 2
        person.submit_and_wait()
        page.wait_for_selector("#finished:not([hidden])")
        assert person.errors == [], person.errors
        person.close()
    boxes = sorted(x["bbox"] for x in read_records(out / "records.jsonl")[sid]["answer"])
    assert close_to(boxes[0], [0.0, 0.0, 0.4 * w, 0.5 * h], 3.0), boxes
    assert close_to(boxes[1], [0.7 * w, 0.9 * h, w, h], 3.0), boxes


def test_gold_feedback_draws_the_expected_groups_and_says_what_was_wrong(
    data: dict[str, Path], browser: Any, tmp_path: Path
) -> None:
    plan = make_plan("mc_bench", data["mc_bench"], 1, seed=1, gold=1)
    _, dataset = load_plan_data("mc_bench", data["mc_bench"])
    sample = {s.id: s for s in dataset}[plan.gold_ids[0]]
    expected = gold_answer("mc_bench", dataset, sample)["boxes"]
    on_first = [b for b in expected if b["image"] == 0]
    assert {b["group"] for b in on_first} == {1, 2} and any(b["image"] == 1 for b in expected)
    sizes = sample.geometry.sizes
    with serving("mc_bench", data["mc_bench"], tmp_path / "run", plan=plan) as server:
        person = Person(browser, server.url)
        person.start()
        assert person.sample_id() == plan.gold_ids[0]  # the first gold sample comes first
        for b in on_first:  # every target of Image 1 boxed, all in group 1: the group-2 one wrongly
            w, h = sizes[0]
            x1, y1, x2, y2 = b["bbox"]
            person.drag_box(0, (x1 / w, y1 / h, x2 / w, y2 / h))
        person.submit_and_wait()  # nothing on Image 2: its targets are missed
        person.page.wait_for_selector("#gold:not([hidden])")
        gt = person.page.locator("rect.gt")
        assert gt.count() == len(expected)
        colours = person.page.evaluate(
            "() => [...document.querySelectorAll('rect.gt')].map((r) => [r.dataset.group, r.style.stroke])"
        )
        by_group: dict[str, set[str]] = {}
        for group, stroke in colours:
            by_group.setdefault(group, set()).add(stroke)
        assert set(by_group) == {"1", "2"} and all(len(v) == 1 for v in by_group.values())
        assert by_group["1"] != by_group["2"]  # each group in its own colour
        labels = person.page.locator("text.gt-label").all_text_contents()
        assert sorted(labels) == sorted(f"expected {b['group']}" for b in expected)
        verdict = person.page.locator("#gold-verdict li").all_inner_texts()
        right = len(on_first) - 1
        assert verdict[0] == f"{right} of {len(expected)} expected box(es) right."
        assert sum(v.startswith("Wrong group:") and "is group 1; the expected group is 2" in v for v in verdict) == 1
        missed = [v for v in verdict if v.startswith("Missed:")]
        assert len(missed) == len(expected) - len(on_first) and all("Image 2" in v for v in missed)
        assert person.page.locator("#gold-verdict").get_attribute("class") == "wrong"
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        person.page.screenshot(path=str(ARTIFACTS / "human-gold-feedback.png"), full_page=True)
        person.page.keyboard.press("Enter")
        person.page.wait_for_function("([id]) => document.body.dataset.sample !== id", arg=[plan.gold_ids[0]])
        assert person.page.locator("rect.gt").count() == 0
        assert person.errors == [], person.errors
        person.close()


def test_the_terminal_says_when_the_plan_is_done(data: dict[str, Path], tmp_path: Path) -> None:
    args = ["human", "ref_adv_s", "--data", str(data["ref_adv_s"]), "--annotator", "kim", "--plan", "2", "--seed", "3"]
    proc = start_cli(args, tmp_path)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("open "), line
        url = line.split()[1]
        _, state = request(url + "api/state")
        for entry in state["order"]:
            code, reply = request(url + "api/answer", {"id": entry["id"], "answer": [10, 20, 110, 120], "seconds": 2})
            assert code == 200, reply
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            _, err = proc.communicate(timeout=60)
        finally:
            proc.kill()
    assert proc.returncode == 0, err
    assert err.count("the plan is done: all 2 samples answered") == 1, err
    done = err.index("the plan is done")
    assert done < err.index("stopped; rerun")  # said when the last answer came, before Ctrl-C
    (folder,) = [p.parent for p in (tmp_path / "runs" / "ref_adv_s").glob("human-kim/*/run.json")]
    assert str((folder / "metrics.json").relative_to(tmp_path)) in err[done:].splitlines()[0]


def test_gold_feedback_on_ref_adv_and_mm_niah(data: dict[str, Path], browser: Any, tmp_path: Path) -> None:
    for bench in ("ref_adv_s", "mm_niah"):
        plan = make_plan(bench, data[bench], 1, seed=0, gold=1)
        with serving(bench, data[bench], tmp_path / bench, plan=plan) as server:
            person = Person(browser, server.url)
            person.start()
            if bench == "ref_adv_s":
                person.drag_box(0, (0.0, 0.0, 0.05, 0.05))  # far from any expected box
            else:
                person.page.locator("#skip").click()
            if bench == "ref_adv_s":
                person.submit_and_wait()
            person.page.wait_for_selector("#gold:not([hidden])")
            verdict = person.page.locator("#gold-verdict li").all_inner_texts()
            if bench == "ref_adv_s":
                assert len(verdict) == 1 and verdict[0].startswith("Wrong: your box overlaps the expected one at IoU 0.")
                assert person.page.locator("rect.gt").count() == 1
                assert person.page.locator("text.gt-label").all_text_contents() == ["expected"]
            else:
                assert verdict == ["You skipped this sample."]
            assert person.errors == [], person.errors
            person.close()

"""RefCOCO on the human page by its declaration alone (issue 44: `human="one_box"` in its
`Declaration`, no edit outside its package): `needlepoint human refcoco --plan 8 --gold 1` on the
demo set, the page driven in Chromium (a box drawn, replaced, submitted; the training sample's
answer shown), the run scored by RefCOCO's own scorer under both readings and shown as a human row
on the report's board; the Label Studio round trip; and a benchmark registered at run time gets
(or lacks) the page by its declaration. Screenshots: artifacts/human-refcoco*.png."""

from __future__ import annotations

import csv
import json
import signal
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from helpers.browser import ARTIFACTS, chromium
from helpers.cli import one_sentence, run_quiet, start_cli
from helpers.human import Person, request
from helpers.labelstudio import ls_rectangle

from needlepoint.benchmarks.refcoco.benchmark import RefCoco
from needlepoint.benchmarks.refcoco.demo import make_rows, write_release
from needlepoint.contract.declaration import Declaration
from needlepoint.contract.registry import register, unregister
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import iou
from needlepoint.core.store import read_records
from needlepoint.human.answers import check_answer
from needlepoint.human.cli import page_commands
from needlepoint.human.labelstudio import CONFIG_FILE, TASKS_FILE
from needlepoint.human.plan import load_plan_data, make_plan
from needlepoint.human.runs import HumanRun
from needlepoint.human.views import instructions

TITLE = "RefCOCO / RefCOCO+ / RefCOCOg"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, list[dict[str, Any]]]]:
    """The RefCOCO demo set (three expressions in each of the eight splits, 320 x 240 JPEGs) and
    its rows, whose `_other` is a look-alike shape of the same image (a person's likely mistake)."""
    rows = make_rows()
    return write_release(tmp_path_factory.mktemp("refcoco") / "data", rows), rows


def close_to(got: list[float], want: list[float], tol: float = 2.0) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(got, want, strict=True))


def split_mean(hits: dict[str, bool], split_of: dict[str, str]) -> float:
    """Acc@0.5 as RefCOCO reports it: each split's share of hits, averaged over the splits answered."""
    by_split: dict[str, list[bool]] = {}
    for sid, hit in hits.items():
        by_split.setdefault(split_of[sid], []).append(hit)
    return sum(sum(v) / len(v) for v in by_split.values()) / len(by_split)


def test_the_command_serves_refcoco_and_its_answers_score_as_a_human_row(
    demo: tuple[Path, dict[str, list[dict[str, Any]]]], tmp_path: Path
) -> None:
    data, rows = demo
    truth = {s.id: s for s in RefCoco(box_format="abs_xyxy").load(data)}
    run = tmp_path / "runs" / "human-ann1"
    args = ["human", "refcoco", "--data", str(data), "--annotator", "ann1", "--plan", "8", "--seed", "3", "--gold", "1"]
    proc = start_cli([*args, "--out", str(run)], tmp_path)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # "open http://127.0.0.1:PORT/TOKEN/"
    drawn: dict[str, list[float]] = {}
    aimed: dict[str, bool] = {}  # sample id -> the box was drawn on the target (else on a look-alike)
    try:
        assert line.startswith("open "), (line, proc.stderr.read() if proc.stderr else "")
        url = line.split()[1]
        code, state = request(url + "api/state")
        assert code == 200 and (state["benchmark"], state["kind"], state["title"]) == ("refcoco", "one_box", TITLE)
        assert state["instructions"] == instructions("ref_adv_s")  # the one-box page, word for word
        assert len(state["order"]) == 9 and sum(o["gold"] for o in state["order"]) == 1
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        with chromium() as browser:
            person = Person(browser, url)
            person.start()
            gold_seen = False
            while person.page.locator("#finished").is_hidden():
                sid = person.sample_id()
                s = truth[sid]
                assert person.page.locator("#prompt").inner_text() == s.caption
                person.drag_box(0, (0.02, 0.02, 0.12, 0.12))  # drawn again below: this box is replaced
                aimed[sid] = len(drawn) % 3 != 1  # every third answer picks the look-alike
                x1, y1, x2, y2 = s.gt if aimed[sid] else rows[s.split][s.index]["_other"]
                drawn[sid] = person.drag_box(0, (x1 / s.width, y1 / s.height, x2 / s.width, y2 / s.height))
                assert person.page.locator("rect.box").count() == 1
                if len(drawn) == 1:
                    person.page.screenshot(path=str(ARTIFACTS / "human-refcoco.png"))
                person.submit_and_wait()
                if not person.page.locator("#gold").is_hidden():  # the training sample: its answer shown
                    gold_seen = True
                    assert person.page.locator("#gold-text").inner_text() == "the expected box"
                    verdict = person.page.locator("#gold-verdict").inner_text()
                    assert verdict.startswith("Right:" if aimed[sid] else "Wrong:"), verdict
                    assert person.page.locator("rect.gt").count() == 1
                    person.page.screenshot(path=str(ARTIFACTS / "human-refcoco-gold.png"))
                    person.page.keyboard.press("Enter")
                    person.page.wait_for_function("([id]) => document.body.dataset.sample !== id", arg=[sid])
            assert gold_seen and person.errors == [], person.errors
            person.page.screenshot(path=str(ARTIFACTS / "human-refcoco-done.png"))
            person.close()
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C: scoring under way finishes first
        try:
            _, err = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, err
    assert "the plan is done: all 9 samples answered" in err

    records, gold = read_records(run / "records.jsonl"), read_records(run / "gold.jsonl")
    plan = make_plan("refcoco", data, 8, 3, 1)
    assert set(records) == set(plan.ids) and set(gold) == set(plan.gold_ids)
    assert len({truth[i].split for i in records}) == 8  # the plan draws every split's share
    for sid, rec in {**records, **gold}.items():
        (box,) = rec["answer"]
        assert close_to(box, drawn[sid]), (box, drawn[sid])
        hit = iou(box, truth[sid].gt) >= 0.5
        assert hit is aimed[sid], (sid, box, truth[sid].gt)  # the drawn target hits, the look-alike misses
        assert rec["scores"]["hit"] is hit and rec["scores"]["official_hit"] is hit  # a person's box: both readings
        assert rec["solver"]["source"] == "page" and rec["solver"]["annotator"] == "ann1"
    assert {aimed[i] for i in records} == {True, False}
    metrics = json.loads((run / "metrics.json").read_text())
    expected = split_mean({sid: aimed[sid] for sid in records}, {sid: truth[sid].split for sid in records})
    assert metrics["n"] == 8 and metrics["parse_fail"] == 0
    assert metrics["corrected"]["acc@0.5"] == pytest.approx(expected) == metrics["official"]["acc@0.5"]
    header = json.loads((run / "run.json").read_text())
    assert header["status"] == "complete" and header["model_label"] == "human:ann1"
    assert header["config"]["options"] == {"box_format": "abs_xyxy"}  # its declaration's human_options

    # the report's RefCOCO board: the person's run as a row of its own, both readings
    board = tmp_path / "board"
    rc, err = run_quiet(["report", str(tmp_path / "runs"), "--out", str(board)])
    assert rc == 0, err
    with (board / "leaderboard_refcoco.csv").open(encoding="utf-8", newline="") as fh:
        mine = {r["reading"]: r for r in csv.DictReader(fh) if r["model"] == "human:ann1"}
    assert set(mine) == {"official", "corrected"}
    for reading in ("official", "corrected"):
        assert float(mine[reading]["avg"]) == pytest.approx(100 * expected, abs=0.05)
        assert mine[reading]["n"] == "8"


def test_label_studio_round_trip(demo: tuple[Path, dict[str, list[dict[str, Any]]]], tmp_path: Path) -> None:
    data, _ = demo
    out = tmp_path / "ls"
    rc, err = run_quiet(
        ["human", "export", "refcoco", "--data", str(data), "--plan", "8", "--seed", "0", "--to", "labelstudio", str(out)]
    )
    assert rc == 0, err
    root = ET.fromstring((out / CONFIG_FILE).read_text())
    assert [e.get("name") for e in root.iter("Image")] == ["image"]
    assert [e.get("value") for e in root.iter("Label")] == ["target"]
    tasks = json.loads((out / TASKS_FILE).read_text())
    plan = make_plan("refcoco", data, 8, 0)
    assert [t["data"]["sample_id"] for t in tasks] == plan.ids
    _, dataset = load_plan_data("refcoco", data)
    by_id = {s.id: s for s in dataset}
    answers: dict[str, list[list[float]]] = {}
    export = []
    for t, task in enumerate(tasks, 1):
        s = by_id[task["data"]["sample_id"]]
        assert task["data"]["expression"] == s.caption and task["data"]["benchmark"] == "refcoco"
        assert (out / task["data"]["image"].removeprefix("/data/local-files/?d=")).read_bytes()[:2] == b"\xff\xd8"
        x1, y1, x2, y2 = s.gt
        box = [x1, y1, x2, y2] if t % 2 else [x1, y1, (x1 + x2) / 2, (y1 + y2) / 2]  # a quarter of the box: a miss
        answers[s.id] = [box]
        result = [ls_rectangle(box, (s.width, s.height), "image", "target", "box")]
        export.append({"id": t, "data": task["data"], "annotations": [{"completed_by": 7, "lead_time": 2, "result": result}]})
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    runs = tmp_path / "runs"
    rc, err = run_quiet(
        ["human", "import", "refcoco", "--data", str(data), "--from", "labelstudio", str(path), "--out", str(runs)]
    )
    assert rc == 0, err
    imported = json.loads((runs / "human-user7" / "metrics.json").read_text())
    direct = HumanRun.open("refcoco", data, "user7", plan, out=tmp_path / "direct")
    try:
        for sid in plan.ids:
            direct.add(sid, answers[sid], seconds=2.0)
        metrics = direct.finish()
    finally:
        direct.close()
    for reading in ("official", "corrected"):
        assert imported[reading] == metrics[reading]
    assert imported["splits"] == metrics["splits"]
    hits = {sid: iou(answers[sid][0], by_id[sid].gt) >= 0.5 for sid in plan.ids}
    assert imported["corrected"]["acc@0.5"] == pytest.approx(split_mean(hits, {sid: by_id[sid].split for sid in plan.ids}))
    assert 0 < imported["corrected"]["acc@0.5"] < 1
    first = json.loads((runs / "human-user7" / "records.jsonl").read_text().splitlines()[0])
    assert first["solver"]["source"] == "labelstudio"
    export[0]["annotations"][0]["result"] *= 2
    path.write_text(json.dumps(export))
    rc, err = run_quiet(
        ["human", "import", "refcoco", "--data", str(data), "--from", "labelstudio", str(path), "--out", str(tmp_path / "r2")]
    )
    assert rc == 2 and f"holds 2 boxes; {TITLE} takes one" in one_sentence(err)


def test_the_page_follows_the_declaration_not_the_name(demo: tuple[Path, dict[str, list[dict[str, Any]]]]) -> None:
    """A benchmark registered at run time gets `needlepoint human NAME` from its `human` kind; one
    without a kind has no page; an unknown kind is refused in one sentence."""
    data, _ = demo
    cls = "needlepoint.benchmarks.refcoco.benchmark:RefCoco"
    people = Declaration("people_test", "Referring people", cls, human="one_box", human_options={"box_format": "abs_xyxy"})
    register("people_test", people)
    register("nopage_test", Declaration("nopage_test", "No page", cls))
    register("oddpage_test", Declaration("oddpage_test", "Odd page", cls, human="polygon"))
    try:
        pages = page_commands()
        assert pages["people_test"] == "Referring people: one box for a referring expression"
        assert "nopage_test" not in pages and pages["refcoco"] == f"{TITLE}: one box for a referring expression"
        from needlepoint.cli import build_parser

        ns = build_parser().parse_args(["human", "people_test", "--data", str(data), "--annotator", "a"])
        assert ns.human_command == "people_test"
        sample = load_plan_data("people_test", data)[1][0]
        assert check_answer("people_test", sample, [1, 2, 30, 40]) == [[1.0, 2.0, 30.0, 40.0]]
        assert instructions("people_test") == instructions("refcoco")
        with pytest.raises(DataError, match="needlepoint human does not know nopage_test; use .*refcoco"):
            check_answer("nopage_test", sample, [1, 2, 30, 40])
        with pytest.raises(DataError, match="declares the human page 'polygon', which is none of one_box, image_pair, document"):
            make_plan("oddpage_test", data, 2, 0)
    finally:
        for name in ("people_test", "nopage_test", "oddpage_test"):
            unregister(name)
    assert "people_test" not in page_commands()

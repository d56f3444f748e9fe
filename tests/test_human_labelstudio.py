"""`needlepoint human export/import --to/--from labelstudio` without a Label Studio: the config and
tasks written, and an export in Label Studio's JSON layout (as tests/test_human_labelstudio_server.py
gets from a real one) read into human runs that score exactly as the same boxes given through
HumanRun, the web page's path. Every malformed export is refused in one sentence."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import one_sentence, run_quiet
from helpers.labelstudio import ls_rectangle, mc_results, person_answers

from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.core.errors import DataError
from needlepoint.human.labelstudio import CONFIG_FILE, TASKS_FILE, export_project, import_export, read_export
from needlepoint.human.plan import load_plan_data, make_plan
from needlepoint.human.runs import HumanRun


@pytest.fixture(scope="module")
def mc_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_release(tmp_path_factory.mktemp("mc") / "data", pairs=12)[0]


def direct_run(bench: str, data: Path, name: str, plan: Any, answers: dict[str, Any], out: Path) -> dict[str, Any]:
    """The answers given through HumanRun as the page gives them; the run's metrics."""
    run = HumanRun.open(bench, data, name, plan, out=out)
    try:
        for sid in plan.ids:
            run.add(sid, answers[sid], seconds=5.0)
        return run.finish()
    finally:
        run.close()


def mc_export(tasks: list[dict[str, Any]], people: dict[int, dict[str, Any]], sizes: dict[str, Any]) -> list[dict[str, Any]]:
    """Label Studio's JSON export of these tasks, each annotated by every person (user id -> answers)."""
    out = []
    for t, task in enumerate(tasks, 1):
        sid = task["data"]["sample_id"]
        annotations = [
            {"id": 10 * t + uid, "completed_by": uid, "lead_time": 4.5 + uid, "was_cancelled": False,
             "result": mc_results(answers[sid], sizes[sid])}
            for uid, answers in people.items()
        ]  # fmt: skip
        out.append({"id": t, "data": task["data"], "annotations": annotations})
    return out


def test_export_writes_config_tasks_and_images(mc_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "ls"
    export_project("mc_bench", mc_data, 6, 1, out, url_prefix="http://files.example/mc/")
    root = ET.fromstring((out / CONFIG_FILE).read_text())
    assert [e.get("name") for e in root.iter("Image")] == ["image_1", "image_2"]
    assert [(e.get("name"), e.get("toName")) for e in root.iter("RectangleLabels")] == [
        ("boxes_1", "image_1"),
        ("boxes_2", "image_2"),
    ]
    assert [e.get("value") for e in root.iter("RectangleLabels")][0] is None
    text = root.find(".//Text")
    assert len(list(root.iter("Label"))) == 18 and text is not None and text.get("value") == "$prompt"
    tasks = json.loads((out / TASKS_FILE).read_text())
    plan = make_plan("mc_bench", mc_data, 6, 1)
    assert [t["data"]["sample_id"] for t in tasks] == plan.ids
    first = tasks[0]["data"]
    assert (first["plan_size"], first["plan_seed"], first["benchmark"]) == (6, 1, "mc_bench")
    assert first["image_1"].startswith("http://files.example/mc/images/")
    for key in ("image_1", "image_2"):
        relative = first[key].removeprefix("http://files.example/mc/")
        assert (out / relative).read_bytes()[:2] == b"\xff\xd8"  # the release's JPEG, as stored


def test_import_scores_as_the_page(mc_data: Path, tmp_path: Path) -> None:
    export_project("mc_bench", mc_data, 10, 2, tmp_path / "ls")
    tasks = json.loads((tmp_path / "ls" / TASKS_FILE).read_text())
    _, dataset = load_plan_data("mc_bench", mc_data)
    plan = make_plan("mc_bench", mc_data, 10, 2)
    samples = [s for s in dataset if s.id in set(plan.ids)]
    people = {uid: person_answers(samples, dataset.truth, uid) for uid in (1, 2)}
    sizes = {s.id: s.geometry.sizes for s in samples}
    export = tmp_path / "export.json"
    export.write_text(json.dumps(mc_export(tasks, people, sizes)))
    folders = import_export("mc_bench", mc_data, export, tmp_path / "runs", {"2": "bob"})
    assert sorted(folders) == ["bob", "user1"]
    for uid, name in ((1, "user1"), (2, "bob")):
        imported = json.loads((folders[name] / "metrics.json").read_text())
        direct = direct_run("mc_bench", mc_data, name, plan, people[uid], tmp_path / f"direct-{name}")
        for protocol in ("official", "corrected"):
            for metric in ("acc", "ap50"):
                assert imported[protocol][metric] == pytest.approx(direct[protocol][metric], abs=1e-12)
        header = json.loads((folders[name] / "run.json").read_text())
        assert header["model_label"] == f"human:{name}"
        first = json.loads((folders[name] / "records.jsonl").read_text().splitlines()[0])
        assert first["solver"]["source"] == "labelstudio" and first["solver"]["seconds"] == 4.5 + uid
    # a second import of the same export adds nothing and changes nothing
    before = (folders["bob"] / "records.jsonl").read_bytes()
    import_export("mc_bench", mc_data, export, tmp_path / "runs", {"2": "bob"})
    assert (folders["bob"] / "records.jsonl").read_bytes() == before


def one_task(mc_data: Path, tmp_path: Path, result: list[dict[str, Any]], **annotation: Any) -> Path:
    export_project("mc_bench", mc_data, 2, 0, tmp_path / "ls")
    task = json.loads((tmp_path / "ls" / TASKS_FILE).read_text())[0]
    ann = {"id": 1, "completed_by": 1, "lead_time": 3.0, "result": result, **annotation}
    path = tmp_path / "export.json"
    path.write_text(json.dumps([{"id": 1, "data": task["data"], "annotations": [ann]}]))
    return path


def size_of(mc_data: Path, tmp_path: Path) -> tuple[float, float]:
    export_project("mc_bench", mc_data, 2, 0, tmp_path / "ls")
    sid = json.loads((tmp_path / "ls" / TASKS_FILE).read_text())[0]["data"]["sample_id"]
    _, dataset = load_plan_data("mc_bench", mc_data)
    size: tuple[float, float] = next(s for s in dataset if s.id == sid).geometry.sizes[0]
    return size


BAD: dict[str, tuple[Callable[[dict[str, Any]], None], str]] = {  # a change to a result, the refusal's words
    "rotated": (lambda r: r["value"].update(rotation=30), "rotated by 30 degrees"),
    "two labels": (lambda r: r["value"].update(rectanglelabels=["group 1", "group 2"]), "not exactly one label"),
    "no group": (lambda r: r["value"].update(rectanglelabels=["cat"]), "not 'group N'"),
    "group 12": (lambda r: r["value"].update(rectanglelabels=["group 12"]), "groups are whole numbers 1 to 9"),
    "outside": (lambda r: r["value"].update(x=90, width=30), "is not inside"),
    "NaN": (lambda r: r["value"].update(x=float("nan")), "not a finite number"),
    "other image": (lambda r: r.update(to_name="image_3"), "not image_1 or image_2"),
    "resized": (lambda r: r.update(original_width=r["original_width"] / 2), "differs from the image's"),
    "polygon": (lambda r: r.update(type="polygonlabels"), "not a rectangle"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_malformed_annotations_are_refused(case: str, mc_data: Path, tmp_path: Path) -> None:
    change, words = BAD[case]
    result = ls_rectangle([2, 2, 20, 20], size_of(mc_data, tmp_path), "image_1", "group 1", "boxes_1")
    change(result)
    export = one_task(mc_data, tmp_path, [result])
    with pytest.raises(DataError, match="task 1 .*annotation 1") as info:
        import_export("mc_bench", mc_data, export, tmp_path / "runs")
    assert words in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "runs").exists()  # checked before anything is written


def test_export_level_refusals(mc_data: Path, tmp_path: Path) -> None:
    result = [ls_rectangle([2, 2, 20, 20], size_of(mc_data, tmp_path), "image_1", "group 1", "boxes_1")]
    path = one_task(mc_data, tmp_path, result, completed_by="someone")
    with pytest.raises(DataError, match="names no Label Studio user"):
        import_export("mc_bench", mc_data, path, tmp_path / "runs")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(DataError, match="is not JSON"):
        import_export("mc_bench", mc_data, bad, tmp_path / "runs")
    tasks = json.loads(one_task(mc_data, tmp_path, result).read_text())
    tasks[0]["data"]["sample_id"] = "no-such-sample"
    bad.write_text(json.dumps(tasks))
    with pytest.raises(DataError, match="names a sample --data does not hold"):
        import_export("mc_bench", mc_data, bad, tmp_path / "runs")
    tasks = json.loads(one_task(mc_data, tmp_path, result).read_text())
    tasks[0]["annotations"].append({**tasks[0]["annotations"][0], "id": 2})
    bad.write_text(json.dumps(tasks))
    with pytest.raises(DataError, match="second annotation of this sample by user1"):
        import_export("mc_bench", mc_data, bad, tmp_path / "runs")
    with pytest.raises(DataError, match="MM-NIAH"):
        export_project("mm_niah", mc_data, 2, 0, tmp_path / "niah")


def test_cancelled_annotation_is_a_skip(mc_data: Path, tmp_path: Path) -> None:
    path = one_task(mc_data, tmp_path, [], was_cancelled=True)
    _, dataset = load_plan_data("mc_bench", mc_data)
    (size, seed), annotations = read_export("mc_bench", path, dataset)
    assert (size, seed) == (2, 0) and annotations[0].skipped and annotations[0].answer is None


def test_ref_adv_round_trip(tmp_path: Path) -> None:
    from needlepoint.benchmarks.ref_adv.demo import make_rows
    from needlepoint.benchmarks.ref_adv.demo import write_release as write_ref

    data = write_ref(tmp_path / "ref", make_rows(8, seed=3))
    export_project("ref_adv_s", data, 4, 0, tmp_path / "ls")
    root = ET.fromstring((tmp_path / "ls" / CONFIG_FILE).read_text())
    assert [e.get("value") for e in root.iter("Label")] == ["target"]
    tasks = json.loads((tmp_path / "ls" / TASKS_FILE).read_text())
    _, dataset = load_plan_data("ref_adv_s", data)
    by_id = {s.id: s for s in dataset}
    plan = make_plan("ref_adv_s", data, 4, 0)
    answers = {}
    export = []
    for t, task in enumerate(tasks, 1):
        s = by_id[task["data"]["sample_id"]]
        assert task["data"]["expression"] == s.caption
        x1, y1, x2, y2 = s.gt
        box = [x1, y1, x2, y2] if t % 2 else [x1, y1, (x1 + x2) / 2, y2]  # half the box: IoU 0.5 exactly
        answers[s.id] = [box]
        result = [ls_rectangle(box, (s.width, s.height), "image", "target", "box")]
        export.append({"id": t, "data": task["data"], "annotations": [{"completed_by": 7, "lead_time": 2, "result": result}]})
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    folders = import_export("ref_adv_s", data, path, tmp_path / "runs")
    imported = json.loads((folders["user7"] / "metrics.json").read_text())
    direct = direct_run("ref_adv_s", data, "user7", plan, answers, tmp_path / "direct")
    assert imported["acc@0.5"] == direct["acc@0.5"]
    export[0]["annotations"][0]["result"] *= 2
    path.write_text(json.dumps(export))
    with pytest.raises(DataError, match="holds 2 boxes; Ref-Adv-s takes one"):
        import_export("ref_adv_s", data, path, tmp_path / "runs2")


def test_command_line(mc_data: Path, tmp_path: Path) -> None:
    out = tmp_path / "ls"
    rc, err = run_quiet(
        ["human", "export", "mc_bench", "--data", str(mc_data), "--plan", "3", "--seed", "5", "--to", "labelstudio", str(out)]
    )
    assert rc == 0, err
    tasks = json.loads((out / TASKS_FILE).read_text())
    assert tasks[0]["data"]["image_1"].startswith("/data/local-files/?d=images/")
    _, dataset = load_plan_data("mc_bench", mc_data)
    by_id = {s.id: s for s in dataset}
    export = [
        {"id": t, "data": task["data"], "annotations": [{"completed_by": {"id": 3, "email": "ann@example.com"}, "lead_time": 1.5,
         "result": mc_results([{"image": 0, "group": 1, "bbox": [1, 1, 9, 9]}], by_id[task["data"]["sample_id"]].geometry.sizes)}]}
        for t, task in enumerate(tasks, 1)
    ]  # fmt: skip
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export))
    rc, err = run_quiet(
        [
            "human",
            "import",
            "mc_bench",
            "--data",
            str(mc_data),
            "--from",
            "labelstudio",
            str(path),
            "--out",
            str(tmp_path / "runs"),
        ]
    )
    assert rc == 0, err
    assert (tmp_path / "runs" / "human-ann" / "metrics.json").exists()  # named from the user's email
    for argv, words in [
        (["human", "export", "mm_niah", "--data", str(mc_data), "--to", "labelstudio", str(tmp_path / "x")], "MM-NIAH"),
        (["human", "export", "mc_bench", "--data", str(mc_data), "--to", "cvat", str(tmp_path / "x")], "the one tool is labelstudio"),
        (["human", "import", "mc_bench", "--data", str(mc_data), "--from", "labelstudio", str(tmp_path / "none.json"), "--out", str(tmp_path / "r")], "is not a file"),
        (["human", "import", "mc_bench", "--data", str(mc_data), "--from", "labelstudio", str(path), "--out", str(tmp_path / "r"), "--annotator-name", "3"], "is not ID=NAME"),
        (["human", "import", "mc_bench", "--data", str(mc_data), "--from", "labelstudio", str(path), "--out", str(tmp_path / "r"), "--annotator-name", "3=a b"], "--annotator-name 3=NAME"),
    ]:  # fmt: skip
        rc, err = run_quiet(argv)
        assert rc == 2 and words in one_sentence(err), err


# --- issue 42.4: the whole export is checked first; a failure names file, task and annotation ----------

STRICT: dict[str, tuple[dict[str, Any], str]] = {  # an annotation's fields, the refusal's words
    "lead_time of 1e7": ({"lead_time": 1e7}, "lead_time 10000000.0 is not a number of seconds from 0 to a week"),
    "negative lead_time": ({"lead_time": -5}, "lead_time -5 is not a number of seconds from 0 to a week"),
    "lead_time as text": ({"lead_time": "5"}, "lead_time '5' is not a finite number"),
    "was_cancelled as text": ({"was_cancelled": "false"}, "was_cancelled is 'false', not true or false"),
    "was_cancelled as 1": ({"was_cancelled": 1}, "was_cancelled is 1, not true or false"),
    "group ²": ({"label": "group ²"}, "has label 'group ²', not 'group N'"),
    "group ٣ (Arabic-Indic)": ({"label": "group ٣"}, "not 'group N'"),
}


def _two_annotators(mc_data: Path, tmp_path: Path, bad: dict[str, Any]) -> Path:
    """An export of 3 tasks by users 1 and 2, user 2's last annotation changed by `bad`."""
    export_project("mc_bench", mc_data, 3, 0, tmp_path / "ls")
    tasks = json.loads((tmp_path / "ls" / TASKS_FILE).read_text())
    _, dataset = load_plan_data("mc_bench", mc_data)
    by_id = {s.id: s for s in dataset}
    export = []
    for t, task in enumerate(tasks, 1):
        sizes = by_id[task["data"]["sample_id"]].geometry.sizes
        annotations = []
        for uid in (1, 2):
            ann: dict[str, Any] = {"id": 10 * t + uid, "completed_by": uid, "lead_time": 3.0, "was_cancelled": False}
            fields = bad if (uid, t) == (2, len(tasks)) else {}
            label = fields.get("label", "group 1")
            ann["result"] = [ls_rectangle([2, 2, 20, 20], sizes[0], "image_1", label, "boxes_1")]
            ann.update({k: v for k, v in fields.items() if k != "label"})
            annotations.append(ann)
        export.append({"id": t, "data": task["data"], "annotations": annotations})
    path = tmp_path / "export.json"
    path.write_text(json.dumps(export, ensure_ascii=False), encoding="utf-8")
    return path


@pytest.mark.parametrize("case", list(STRICT))
def test_a_bad_annotation_anywhere_writes_nothing_and_names_it(case: str, mc_data: Path, tmp_path: Path) -> None:
    fields, words = STRICT[case]
    path = _two_annotators(mc_data, tmp_path, fields)
    out = tmp_path / "runs"
    argv = ["human", "import", "mc_bench", "--data", str(mc_data), "--from", "labelstudio", str(path), "--out", str(out)]
    rc, err = run_quiet(argv)
    line = one_sentence(err)
    assert rc == 2 and words in line, line
    assert f"{path} task 3 " in line and "annotation 2" in line and "reload the page" not in line
    assert not out.exists()  # nothing written, not even user1's run


def test_was_cancelled_is_read_strictly(mc_data: Path, tmp_path: Path) -> None:
    _, dataset = load_plan_data("mc_bench", mc_data)
    result = [ls_rectangle([2, 2, 20, 20], size_of(mc_data, tmp_path), "image_1", "group 1", "boxes_1")]
    for value, skipped in ((False, False), (None, False), (True, True)):
        path = one_task(mc_data, tmp_path, result, was_cancelled=value)
        assert read_export("mc_bench", path, dataset)[1][0].skipped is skipped


def test_a_run_folder_that_refuses_leaves_no_other_folder(mc_data: Path, tmp_path: Path) -> None:
    path = _two_annotators(mc_data, tmp_path, {})
    out = tmp_path / "runs"
    other = make_plan("mc_bench", mc_data, 2, 9)  # user2's folder holds a run of another plan
    direct_run("mc_bench", mc_data, "user2", other, {sid: [] for sid in other.ids}, out / "human-user2")
    before = sorted(p.name for p in out.iterdir())
    with pytest.raises(DataError):
        import_export("mc_bench", mc_data, path, out)
    assert sorted(p.name for p in out.iterdir()) == before == ["human-user2"]

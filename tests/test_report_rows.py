"""The page's rows made while a run answers (`report.rows`, `report.drafts`): the drafting processes
make the row of each sample answered, and the run's end fills them, making only the rows no draft
made; the page is the one the end would have made itself. Real runs over HTTP against the
simulated server, an MM-NIAH release of documents with image files of their own (shown from those
files) and a Ref-Adv-s parquet release (drawn as thumbnails, with boxes)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any, cast

import pytest
from helpers import report_blob
from helpers.kills import reaped
from PIL import Image

from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release
from needlepoint.cli import main
from needlepoint.contract.base import ReportBox, ReportImage, ReportItem
from needlepoint.core.conversation import ImageRef
from needlepoint.core.files import json_line
from needlepoint.core.records import Record
from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
from needlepoint.report import drafts, html, rows, thumbs

SAMPLES = drafts.MIN_SAMPLES + 6
IMAGES = 3  # a document's own image files


def niah_release(root: Path) -> Path:
    """SAMPLES documents of a few sentences and IMAGES image files each, the needle in the middle."""
    folder = root / "mm_niah_val"
    (folder / "annotations").mkdir(parents=True)
    (folder / "images").mkdir()
    lines = []
    for n in range(SAMPLES):
        names = [f"d{n}-{k}.jpg" for k in range(IMAGES)]
        for k, name in enumerate(names):
            Image.new("RGB", (40 + k, 30), (3 * n % 255, 60 * k, 120)).save(folder / "images" / name, format="JPEG")
        text = " ".join(f"Sentence {n}.{k} about the river. <image>" for k in range(IMAGES))
        row = {
            "id": n,
            "images_list": names,
            "context": f"{text} The secret word is violet{n}. The end.",
            "question": f"What is the secret word of document {n}?",
            "answer": f"violet{n}",
            "meta": {"placed_depth": 0.5, "context_length": 1000 + n, "num_images": IMAGES, "needles": [f"violet{n}"]},
        }
        lines.append(json.dumps(row) + "\n")
    (folder / "annotations" / "retrieval-text.jsonl").write_text("".join(lines), encoding="utf-8")
    return root


def _drafted(report: Path) -> int:
    """The whole rows the drafting processes have written so far."""
    folder = report / rows.ROWS_DIR
    return sum(p.read_bytes().count(b"\n") for p in folder.iterdir()) if folder.is_dir() else 0


def _hold_last(report: Path, last: str, seen: list[int], thumbnails: int = 0) -> Any:
    """A server hook that holds the request of the sample named `last` until the drafts have
    written the rows of every other sample (they cannot come from the run: it has not ended),
    and `thumbnails` thumbnails."""

    async def hold(key: str) -> None:
        if last in key:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (
                _drafted(report) < SAMPLES - 1 or len(thumbs.existing(report / "thumbs")) < thumbnails
            ):
                await asyncio.sleep(0.02)
            seen.append(_drafted(report))

    return hold


@pytest.fixture
def made_here(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many records each call of a benchmark's `report_items` in this process was given
    (a drafting process, forked, counts in its own copy)."""
    calls: list[int] = []
    me = os.getpid()
    for cls in (MmNiah, RefAdv):
        real = cls.report_items

        def counted(self: Any, dataset: Any, records: Any, real: Any = real) -> Any:
            if os.getpid() == me:
                calls.append(len(records))
            return real(self, dataset, records)

        monkeypatch.setattr(cls, "report_items", counted)
    return calls


def _eval(argv: list[str]) -> None:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        assert main([*argv, "--no-progress"]) == 0


def _made_again(argv: list[str], page: Path) -> dict[str, Any]:
    """The page the same command writes when it has nothing to ask and no draft made a row."""
    page.unlink()
    _eval(argv)
    return report_blob(page)


def test_a_runs_end_fills_the_rows_its_drafts_made(tmp_path: Path, made_here: list[int]) -> None:
    data = niah_release(tmp_path / "data")
    out = tmp_path / "run"
    seen: list[int] = []
    hold = _hold_last(out / "report", f"document {SAMPLES - 1}?", seen)
    with SimulatedServer(default="violet", before_answer=hold) as srv:
        argv = ["eval", "mm_niah", "--data", str(data), "--split", "val", "--model", SIMULATED_MODEL_NAME]
        argv += ["--api-url", srv.url, "--out", str(out), "--concurrency", "4"]
        _eval(argv)
        assert seen == [SAMPLES - 1]  # every other sample's row drafted before the last answer
        assert sum(made_here) <= 1  # the end made the last sample's row at most (the drafts' wind-down makes it)
        assert not (out / "report" / rows.ROWS_DIR).exists()  # read once, then removed
        page = out / "report" / "index.html"
        filled = report_blob(page)
        made_here.clear()
        assert filled == _made_again(argv, page)  # the page the end would have made itself
        assert made_here == [SAMPLES]
        # A row made from another record than the one the run holds (an earlier answer) is not shown.
        record = json.loads((out / "records.jsonl").read_bytes().splitlines()[0])
        earlier = cast(Record, {**record, "turns": [{**record["turns"][0], "reply": "an earlier answer"}]})
        bench = MmNiah(split="val")
        (item,) = bench.report_items(bench.load(data), [earlier])
        (out / "report" / rows.ROWS_DIR).mkdir()
        (out / "report" / rows.ROWS_DIR / "0.jsonl").write_bytes(
            rows.row_line(rows.make_row(item, earlier), rows.record_mark(json_line(earlier)))
        )
        assert filled == _made_again(argv, page) and "an earlier answer" not in page.read_text()
    # Each image a thumbnail a draft drew, or else its own file in the data folder (never drawn at the end).
    images = (data / "mm_niah_val" / "images").resolve()
    assert len(filled["items"]) == SAMPLES
    for item in filled["items"]:
        n = item["id"].split("/")[-1]
        for k, (src, *_) in enumerate(item["im"]):
            shown = (out / "report" / src).resolve()
            assert shown == images / f"d{n}-{k}.jpg" or (shown.parent.name == "thumbs" and shown.is_file())
        sent = [p for _, messages in item["w"] for _, parts in messages for p in parts if p[0] == "i"]
        assert [p[-1] for p in sent] == [im[0] for im in item["im"]]  # what the model saw shows the same
    assert any(im[0].endswith(".jpg") and not im[0].startswith("thumbs/") for it in filled["items"] for im in it["im"])


def test_a_parquet_runs_drafted_rows_show_the_drafted_thumbnails(tmp_path: Path, made_here: list[int]) -> None:
    data = write_release(tmp_path / "data", make_rows(SAMPLES))
    out = tmp_path / "run"
    seen: list[int] = []
    hold = _hold_last(out / "report", f"(case {SAMPLES - 1})", seen, thumbnails=SAMPLES - 1)
    with SimulatedServer(before_answer=hold) as srv:
        argv = ["eval", "ref_adv_s", "--data", str(data), "--model", SIMULATED_MODEL_NAME, "--box-format", "abs_xyxy"]
        argv += ["--api-url", srv.url, "--out", str(out), "--concurrency", "4"]
        _eval(argv)
        assert seen == [SAMPLES - 1] and sum(made_here) <= 1
        page = out / "report" / "index.html"
        filled = report_blob(page)
        assert filled == _made_again(argv, page)
    # Each image a thumbnail with its boxes (drawn by a draft, or by the end for a row it made).
    for item in filled["items"]:
        ((src, width, height, _, boxes),) = item["im"]
        assert src.startswith("thumbs/") and (out / "report" / src).is_file() and (width, height) > (0, 0) and boxes


def test_a_row_read_back_must_be_the_one_a_draft_wrote(tmp_path: Path) -> None:
    """A row from a rows file is used only as `row_line` wrote it, for the record the run ended
    with: a half-written line, text that could end the page's script, or a row of another
    record are left out (the page makes those rows itself)."""
    image = ReportImage(ImageRef("a", loader=lambda: b""), [ReportBox([1, 2, 3, 4], "gt")])
    record: Record = {"id": "1", "status": "done", "turns": [{"reply": "x"}]}
    row = rows.make_row(ReportItem("1", "prompt", "answer", [image]), record)
    good = rows.row_line(row, rows.record_mark(json_line(record)))
    folder = tmp_path / "rows"
    folder.mkdir()
    (folder / "0.jsonl").write_bytes(good + good[:-9])  # a draft stopped while writing its second line
    (read,) = rows.read_rows(folder).values()
    assert read == rows.Row(**{**row.__dict__, "record": rows.record_mark(json_line(record))})

    def changed(at: int, value: Any) -> bytes:
        fields = json.loads(good)
        fields[at] = value
        return json_line(fields) + b"\n"

    for bad in (
        good.replace(b"prompt", b"</script>"),  # a script's end: never in JSON the page's own code wrote
        changed(2, ["only part"]),  # parts that do not fit the slots
        changed(3, [None]),  # a slot that is no image's
        changed(3, [1]),
        changed(4, [[7], ["x"], [], ['"a.jpg"'], [10, 10]]),  # a key that is no text
        changed(5, {"task": 3}),
        changed(5, ["task"]),
    ):
        (folder / "0.jsonl").write_bytes(bad)
        assert rows.read_rows(folder) == {}
    # Where an image is shown from: a thumbnail when there is one, else a drafted row's link to its
    # own file (the page then says it links files: a report written otherwise redraws it), else none.
    places = html.Places({"drawn": (10, 10)}, undrawn={"late"})
    assert places("drawn", '"../a.jpg"', (0, 0)) == ('"thumbs/drawn-10x10.jpg"', (10, 10), False) and not places.linked
    assert places("late", "", (0, 0)) == ('""', (0, 0), True) and not places.linked
    assert places("own", '"../a.jpg"', (0, 0)) == ('"../a.jpg"', (0, 0), False) and places.linked
    # A row whose boxes the page colours by group (another sample's boxes are in groups).
    places = html.Places({row.keys[0]: (10, 10)})
    by_group = json.loads(rows.fill(row, places, True)[0])["im"][0][4]
    assert by_group == rows.overlay_boxes(image, True) != rows.overlay_boxes(image, False)
    assert thumbs.GROUP_COLOURS[0] in by_group[0]


def test_a_wind_down_makes_the_rows_of_the_last_answers_then_ends(tmp_path: Path) -> None:
    """Once the run has answered (`Drafts.wind_down`), each drafting process makes the rows of
    the records the file holds, those written just before included, and ends by itself."""
    data = write_release(tmp_path / "data", make_rows(SAMPLES))
    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(data)
    report = tmp_path / "run" / "report"
    records = tmp_path / "run" / "records.jsonl"
    records.parent.mkdir()

    def items_of(done: list[Any], recs: list[Any]) -> list[ReportItem]:
        return bench.report_items(samples.with_samples(done), recs)

    started = drafts.start(report / "thumbs", records, list(samples), items_of, expected=SAMPLES, processes=2)
    assert started is not None
    pids = list(started.pids)
    answer = [[1.0, 2.0, 30.0, 40.0]]
    lines = [json_line({"id": s.id, "status": "done", "turns": [{"reply": "x"}], "answer": answer, "iou": 0.0}) for s in samples]
    try:
        records.write_bytes(b"\n".join(lines[:-1]) + b"\n")
        deadline = time.monotonic() + 60
        while _drafted(report) < SAMPLES - 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        with records.open("ab") as fh:  # the last answer, then the run's end at once
            fh.write(lines[-1] + b"\n")
        started.wind_down()
        assert [os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) for pid in pids] == [0, 0]  # ended by themselves
    finally:
        started.stop()
    made = rows.read_rows(report / rows.ROWS_DIR)
    assert sorted(made) == sorted(s.id for s in samples)
    assert all(made[s.id].record == rows.record_mark(json_line(json.loads(line))) for s, line in zip(samples, lines))


def test_the_end_does_not_wait_on_drafts_that_make_no_rows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Drafts that a busy host gives no core (stopped here) are waited for only while their rows
    files grow: the end then kills them and makes the rows itself, long before the longest wait."""
    monkeypatch.setattr(drafts, "WIND_DOWN_S", 60.0)
    started = drafts.start(tmp_path / "report" / "thumbs", tmp_path / "records.jsonl", [], lambda d, r: [], SAMPLES, 2)
    assert started is not None
    pids = list(started.pids)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    started.wind_down()
    begun = time.monotonic()
    started.stop(wait=True)
    assert time.monotonic() - begun < 30  # not the 60 s a wait for them to end would take
    assert all(reaped(pid) for pid in pids)

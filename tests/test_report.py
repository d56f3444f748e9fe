"""The HTML run report, the demo index and the leaderboard (`needlepoint report`).

Runs the offline demo once (all three benchmarks, simulated model) and checks the pages and the
leaderboard against the runs' own files: every leaderboard cell against metrics.json, the
"wrong only" data against records.jsonl, hostile answers and prompts never reaching the page
unescaped, no secret in the page, thumbnails written once.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import re
import shutil
from argparse import Namespace
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from helpers import TEST_DATA, records
from helpers import report_blob as blob
from PIL import Image

from needlepoint.benchmarks.mc_bench.board import mc_values
from needlepoint.benchmarks.mc_bench.tables import table2_row
from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.ref_adv.data import RefAdvSample
from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release
from needlepoint.cli import main as cli_main
from needlepoint.contract.base import Dataset, ReportBox, ReportImage, ReportItem, format_cell
from needlepoint.contract.boards import Corrupt
from needlepoint.contract.registry import BUILTIN, declaration
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.files import write_atomic
from needlepoint.core.records import Record
from needlepoint.report import html as report_html
from needlepoint.report import leaderboard as lb
from needlepoint.report import rows as report_rows
from needlepoint.report import thumbs
from needlepoint.report.published import published_tables

NAMES = tuple(BUILTIN)  # the built-in benchmarks

PUBLISHED_DIGESTS = TEST_DATA / "published.sha256"  # the shipped tables as transcribed (tests/data/README.md)
HOSTILE = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "\"quoted\" and 'single' </script><b onclick=alert(1)>x</b> &amp; </",
]


# --- helpers -------------------------------------------------------------------------------------


class PageParser(HTMLParser):
    """Every start tag with its attributes, and the text of each <script>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self._in_script: dict[str, str | None] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in_script = dict(attrs)
            self.scripts.append((self._in_script, ""))

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = None

    def handle_data(self, data: str) -> None:
        if self._in_script is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def parse_page(path: Path) -> PageParser:
    parser = PageParser()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def metrics(run_dir: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`needlepoint demo` output: runs/<bench> with reports, and report/index.html."""
    out = tmp_path_factory.mktemp("demo")
    assert cli_main(["demo", "--out", str(out)]) == 0
    return out


def hostile_run(
    tmp_path: Path, header_extra: dict[str, Any] | None = None
) -> tuple[Path, RefAdv, Dataset[RefAdvSample], list[Record], dict[str, Any]]:
    """A small Ref-Adv-s run whose captions and answers are hostile strings."""
    rows = make_rows(4)
    for row, text in zip(rows, HOSTILE):
        row["normal_caption"] = "caption " + text
    data = write_release(tmp_path / "data", rows)
    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(data)
    recs: list[Record] = []
    for s, text in zip(samples, [*HOSTILE, "fine"]):
        box = [1.0, 2.0, 30.0, 40.0]
        recs.append(
            {
                "id": s.id,
                "status": "done",
                "turns": [{"reply": "answer " + text}],
                "repair_used": False,
                "answer": [box],
                "parse_error": "no_bbox_found" if text == HOSTILE[1] else None,
                "scores": {"iou": 0.0, "hit": False},
            }
        )
    header: dict[str, Any] = {
        "config": {
            "benchmark": "ref_adv_s",
            "model": "<script>alert('model')</script>",
            "api_key": "sk-SECRET-123",
            "api_urls": ["https://alice:hunter2@api.example.com/v1?key=QUERYSECRET"],
            "generation": {"extra": {"Authorization": "Bearer TOKENSECRET"}},
        },
        "identity": {"model": "x"},
        "status": "complete",
        **(header_extra or {}),
    }
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    return run_dir, bench, samples, recs, header


# --- escaping and secrets ------------------------------------------------------------------------


def test_script_json_cannot_close_the_script() -> None:
    text = report_rows.script_json({"a": "</script><!-- & >"})
    assert "</" not in text and "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"a": "</script><!-- & >"}


def test_hostile_answers_and_prompts_are_escaped(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = hostile_run(tmp_path)
    page = report_html.write_run_report(run_dir, bench, samples, recs, bench.score(samples, recs), header)
    text = page.read_text(encoding="utf-8")
    for raw in [*HOSTILE, "<script>alert('model')</script>", "onerror=alert(1)>", "</script><b"]:
        assert raw not in text
    parsed = parse_page(page)
    # No inline event handler anywhere, and no element that the data could have made.
    for tag, attrs in parsed.tags:
        assert not [a for a in attrs if a.lower().startswith("on")], (tag, attrs)
        assert not (tag == "img" and attrs.get("src") == "x")
        assert tag not in ("b", "iframe", "object", "embed")
    # Exactly our two scripts: the JSON blob and the page's code.
    assert [a.get("type") for a, _ in parsed.scripts] == ["application/json", None]
    # The data arrives intact (so the page shows it literally, via textContent).
    data = blob(page)
    assert {it["a"] for it in data["items"]} >= {"answer " + h for h in HOSTILE}
    assert {it["p"] for it in data["items"]} >= {"caption " + h for h in HOSTILE}
    # The page's code never writes HTML from data.
    code = parsed.scripts[1][1]
    assert (
        "innerHTML" not in code and "outerHTML" not in code and "insertAdjacentHTML" not in code and "document.write" not in code
    )
    # The CSP allows only the page's own script.
    csp = next(a["content"] for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert csp is not None
    assert "script-src 'sha256-" in csp and "unsafe-inline" not in csp.split("script-src")[1].split(";")[0]


def test_report_holds_no_secret(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = hostile_run(tmp_path)
    page = report_html.write_run_report(run_dir, bench, samples, recs, bench.score(samples, recs), header)
    text = page.read_text(encoding="utf-8")
    for secret in ("sk-SECRET-123", "hunter2", "QUERYSECRET", "TOKENSECRET", "alice"):
        assert secret not in text
    assert "api.example.com/v1" in text


def test_public_config_redacts_keys_and_url_credentials() -> None:
    out = report_html.public_config(
        {"config": {"api_key": "k", "api_urls": ["http://u:p@h:1/v1?token=t"], "model": "m", "extra": {"x-api-token": "t"}}}
    )
    assert out["config"]["api_key"] == "[redacted]"
    assert out["config"]["extra"]["x-api-token"] == "[redacted]"
    assert out["config"]["api_urls"] == ["http://h:1/v1?[redacted]"]
    assert out["config"]["model"] == "m"


# --- thumbnails ----------------------------------------------------------------------------------


def _png(width: int, height: int) -> bytes:
    import io

    buf = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buf, format="PNG")
    return buf.getvalue()


def _jpeg(width: int, height: int, mode: str = "RGB", quality: int = 90) -> bytes:
    buf = io.BytesIO()
    Image.effect_noise((width, height), 60).convert(mode).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def test_thumbnail_is_a_small_jpeg_of_the_image_and_names_its_size() -> None:
    jpeg, size = thumbs.make_thumbnail(_png(960, 480), "x")
    assert size == (960, 480)  # the image's own size: what the boxes refer to
    im = Image.open(io.BytesIO(jpeg))
    assert im.format == "JPEG" and im.size == (thumbs.THUMB_MAX, thumbs.THUMB_MAX // 2)
    assert im.convert("RGB").getpixel((100, 50)) == (255, 255, 255)  # the image alone: no box drawn in


def test_a_thumbnail_is_drawn_at_the_size_the_page_shows_and_at_most_thumb_bytes() -> None:
    buf = io.BytesIO()
    Image.linear_gradient("L").resize((640, 480)).convert("RGB").save(buf, format="JPEG", quality=95)
    smooth = buf.getvalue()
    drawn, size = thumbs.make_thumbnail(smooth, "x")  # never the image's own bytes: always drawn small
    assert size == (640, 480) and drawn != smooth and Image.open(io.BytesIO(drawn)).size == (320, 240)
    many, _ = thumbs.make_thumbnail(smooth, "x", thumbs.THUMB_MANY)  # a card of many images shows them small
    assert Image.open(io.BytesIO(many)).size == (thumbs.THUMB_MANY, thumbs.THUMB_MANY * 3 // 4)
    small = _jpeg(640, 480)  # noise: the quality steps down, then the side, until it fits
    for data, why in (
        (small, "noise"),
        (_jpeg(900, 900, quality=100), "noise at full quality"),
        (_jpeg(200, 100, "L"), "grey"),
        (_jpeg(64, 64, "CMYK"), "CMYK"),
        (_png(64, 32), "not a JPEG"),
    ):
        jpeg, _ = thumbs.make_thumbnail(data, "x")
        assert len(jpeg) <= thumbs.THUMB_BYTES and Image.open(io.BytesIO(jpeg)).mode in ("RGB", "L"), why
    assert len(small) > 5 * thumbs.THUMB_BYTES  # the noise makes the quality step down


def test_the_page_lays_the_boxes_over_the_image() -> None:
    image = ReportImage(
        ImageRef("x", loader=lambda: b""),
        [
            ReportBox([510, 300, 90.04, 90], "pred"),
            ReportBox([90, 90, 300, 210], "gt"),
            ReportBox([1, 2, float("nan"), 4], "pred"),
        ],
    )
    # Ground truth first (predictions on top), corners ordered, a box that is not four numbers left out.
    assert report_rows.overlay_boxes(image, False) == [
        [90.0, 90.0, 300.0, 210.0, thumbs.GT_COLOUR, 0],
        [90.0, 90.0, 510.0, 300.0, thumbs.PRED_COLOUR, 1],
    ]
    grouped = ReportImage(ImageRef("y", loader=lambda: b""), [ReportBox([0, 0, 5, 5], "gt", group=2)])
    assert report_rows.overlay_boxes(grouped, True) == [[0.0, 0.0, 5.0, 5.0, thumbs.GROUP_COLOURS[1], 0]]
    row = report_rows.make_row(ReportItem("1", "p", "a", [image]), None)
    pieces, _ = report_html.sample_json("ref_adv_s", [row], report_html.Places({thumbs.thumb_key(image): (960, 480)}), False)
    blob_ = json.loads("".join(pieces))
    src, width, height, caption, boxes = blob_["items"][0]["im"][0]
    assert src == f"thumbs/{thumbs.thumb_key(image)}-960x480.jpg" and (width, height) == (960, 480) and len(boxes) == 2


def test_thumbnails_written_once_and_stale_ones_removed(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = hostile_run(tmp_path)
    m = bench.score(samples, recs)
    before = blob(report_html.write_run_report(run_dir, bench, samples, recs, m, header))["items"][0]["im"][0]
    files = sorted((run_dir / "report" / "thumbs").glob("*.jpg"))
    assert len(files) == len(recs)
    sizes = {Image.open(io.BytesIO(s.image.read_bytes())).size for s in samples}
    for f in files:  # the size in the name is the image's own; the file is at most THUMB_MAX
        w, h = f.stem.split("-")[1].split("x")
        assert (int(w), int(h)) in sizes and max(Image.open(f).size) <= thumbs.THUMB_MAX
    stamps = {t.name: t.stat().st_mtime_ns for t in files}
    (run_dir / "report" / "thumbs" / "stale.jpg").write_bytes(b"x")
    report_html.write_run_report(run_dir, bench, samples, recs, m, header)
    assert {t.name: t.stat().st_mtime_ns for t in (run_dir / "report" / "thumbs").glob("*.jpg")} == stamps
    # A new prediction moves its box on the page and reuses the thumbnail.
    recs[0] = {**recs[0], "answer": [[5.0, 5.0, 60.0, 60.0]]}
    after = blob(report_html.write_run_report(run_dir, bench, samples, recs, m, header))["items"][0]["im"][0]
    assert {t.name: t.stat().st_mtime_ns for t in (run_dir / "report" / "thumbs").glob("*.jpg")} == stamps
    assert before[:4] == after[:4] and before[4] != after[4]
    assert [5.0, 5.0, 60.0, 60.0] in [b[:4] for b in after[4]]


def test_existing_thumbnails_are_reused_without_reading_the_images(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = hostile_run(tmp_path)
    m = bench.score(samples, recs)
    first = blob(report_html.write_run_report(run_dir, bench, samples, recs, m, header))
    # The images can no longer be read: a rewritten report (a resumed run) still shows every
    # thumbnail, because it draws none of them again.
    for s in samples:
        s.image = ImageRef(s.image.key, loader=lambda: b"gone")
    again = blob(report_html.write_run_report(run_dir, bench, samples, recs, m, header))
    assert [it["im"] for it in again["items"]] == [it["im"] for it in first["items"]]
    assert all(it["im"][0][0] for it in again["items"])


def test_what_a_run_could_not_draft_from_a_parquet_release_is_drawn_small_at_its_end(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = hostile_run(tmp_path)
    folder = run_dir / "report" / "thumbs"
    for s in samples[:2]:  # drafted while the run answered (report.drafts); the others not
        assert thumbs.draw(folder, thumbs.thumb_key(ReportImage(s.image)), s.image) is not None
    drafted = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    page = report_html.write_run_report(  # at the run's end: images of no file of their own are drawn
        run_dir, bench, samples, recs, bench.score(samples, recs), header, link_missing=True
    )
    shown = {it["id"]: it["im"][0][0] for it in blob(page)["items"]}
    for s in samples:
        assert s.image.path is None and shown[s.id].startswith("thumbs/")  # parquet rows: no file to link
        made = (run_dir / "report" / shown[s.id]).read_bytes()
        assert made != s.image.read_bytes() and len(made) <= thumbs.THUMB_BYTES
        assert max(Image.open(io.BytesIO(made)).size) <= thumbs.THUMB_MAX
    assert len(list(folder.iterdir())) == len(samples)
    assert all(p.stat().st_mtime_ns == drafted[p.name] for p in folder.iterdir() if p.name in drafted)  # drafts kept


def test_thumbnails_drawn_in_processes_equal_those_drawn_on_threads(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = hostile_run(tmp_path)
    items = bench.report_items(samples, recs)
    items[0].images[0].image = ImageRef("broken", loader=lambda: b"not an image")
    by_kind = {}
    for processes in (False, True):
        folder = tmp_path / f"thumbs-{processes}"
        sizes = thumbs.Thumbnails(folder, workers=2, processes=processes).finish(items)
        by_kind[processes] = (sizes, {p.name: p.read_bytes() for p in folder.glob("*.jpg")})
    assert by_kind[True] == by_kind[False]
    sizes, files = by_kind[True]
    assert sum(s is None for s in sizes.values()) == 1 and len(files) == len(items) - 1


def test_drawing_processes_stop_with_their_pool(tmp_path: Path) -> None:
    import os

    pool = thumbs.DrawingProcesses(2)
    image = _png(64, 32)
    futures = [pool.submit(thumbs._draw_job, str(tmp_path), f"k{i}", image, "x", thumbs.THUMB_MAX) for i in range(4)]
    assert [f.result(timeout=60) for f in futures] == [(64, 32)] * 4
    children = [int(p) for p in os.listdir("/proc") if p.isdigit() and _parent(int(p)) == os.getpid()]
    assert len(children) == 2
    # They draw at the command's own priority: a run's end or a report waits on them (the drafts
    # that draw while a run answers are the ones in the idle class, report.drafts).
    assert [_niceness(c) for c in children] == [_niceness(os.getpid())] * 2
    pool.shutdown()
    assert not any(os.path.exists(f"/proc/{c}") and _parent(c) == os.getpid() for c in children)


def _niceness(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[16])


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return -1


def test_unreadable_image_does_not_break_the_report(tmp_path: Path) -> None:
    run_dir, bench, samples, recs, header = hostile_run(tmp_path)
    samples[0].image = ImageRef("broken", loader=lambda: b"not an image")
    page = report_html.write_run_report(run_dir, bench, samples, recs, bench.score(samples, recs), header)
    first = blob(page)["items"][0]
    assert first["im"][0][0] == ""


# --- the demo's run reports ----------------------------------------------------------------------


def test_every_demo_run_has_a_report(demo: Path) -> None:
    for name in NAMES:
        page = demo / "runs" / name / "report" / "index.html"
        assert page.is_file()
        data = blob(page)
        assert len(data["items"]) == len(records(demo / "runs" / name))
        text = page.read_text(encoding="utf-8")
        assert 'id="np-count"' in text and 'id="np-wrong"' in text and 'id="np-search"' in text
        for item in data["items"]:
            for src, *_ in item["im"]:
                assert src and (page.parent / src).is_file()


def test_ref_adv_report_data_matches_records(demo: Path) -> None:
    run = demo / "runs" / "ref_adv_s"
    data = blob(run / "report" / "index.html")
    recs = {r["id"]: r for r in records(run)}
    assert {it["id"] for it in data["items"]} == set(recs)
    for it in data["items"]:
        rec = recs[it["id"]]
        assert it["c"] is bool(rec["scores"]["hit"])
        assert it["e"] == rec.get("parse_error")
        assert it["s"] == pytest.approx(rec["scores"]["iou"])
    keys = {f["key"] for f in data["filters"]}
    assert {"bin", "source"} <= keys
    bins = next(f for f in data["filters"] if f["key"] == "bin")
    assert [v for v, _ in bins["values"]] == [v for v in ("<2", "2-3", "4-6", ">=7") if v in {v for v, _ in bins["values"]}]
    assert data["sort_label"] == "IoU"


def test_mc_bench_report_colours_groups(demo: Path) -> None:
    page = demo / "runs" / "mc_bench" / "report" / "index.html"
    text = page.read_text(encoding="utf-8")
    assert "group 1" in text and "dashed: prediction" in text
    data = blob(page)
    assert all(len(it["im"]) == 2 for it in data["items"])
    assert "style" in {f["key"] for f in data["filters"]}


def test_mm_niah_report_shows_heatmaps(demo: Path) -> None:
    run = demo / "runs" / "mm_niah"
    page = run / "report" / "index.html"
    text = page.read_text(encoding="utf-8")
    for png in (run / "heatmaps").glob("*.png"):
        assert (run / "report" / "heatmaps" / png.name).read_bytes() == png.read_bytes()
        assert f'src="heatmaps/{png.name}"' in text
    data = blob(page)
    assert {"task", "range"} <= {f["key"] for f in data["filters"]}
    fields = dict(map(tuple, data["items"][0]["f"]))
    assert {"expected", "context length", "depth", "images"} <= set(fields)
    # Fields read like the terminal's table cells (one formatter for both).
    recs = {r["id"]: r for r in records(run)}
    assert all(dict(map(tuple, it["f"]))["score"] == format_cell(recs[it["id"]]["scores"].get("score")) for it in data["items"])
    # The cards show the document (its needles marked) and its images, beside the question.
    # Each image is a small thumbnail drafted while the run answered, or (not drafted by its end)
    # the image's own file, linked from the page without a copy.
    with_images = [it for it in data["items"] if it["im"]]
    assert with_images
    for it in with_images:
        for src, *_ in it["im"]:
            shown = (page.parent / unquote(src)).resolve()
            assert shown.is_file() and (src.startswith("thumbs/") or (demo / "data" / "mm_niah").resolve() in shown.parents)
            assert src.startswith("thumbs/") == (shown.parent == (page.parent / "thumbs").resolve())
    documents = [it for it in data["items"] if "x" in it]
    assert documents and all(it["xl"].startswith("document") for it in documents)
    text_needles = [it for it in documents if it["k"]["task"].endswith("-text")]  # an image needle is pasted into an image
    assert text_needles and all(any(mark for _, mark in it["x"]) for it in text_needles)


def test_demo_index_links_every_run(demo: Path) -> None:
    index = demo / "report" / "index.html"
    parsed = parse_page(index)
    links = [href for t, a in parsed.tags if t == "a" and (href := a.get("href"))]
    targets = {(index.parent / h).resolve() for h in links}
    for name in NAMES:
        assert (demo / "runs" / name / "report" / "index.html").resolve() in targets
    text = index.read_text(encoding="utf-8")
    assert "Acc@0.5" in text and "AP50" in text and "overall" in text
    images = [a["src"] or "" for t, a in parsed.tags if t == "img"]
    assert images and all((index.parent / s).is_file() for s in images)


# --- the leaderboard -----------------------------------------------------------------------------

REF_PATHS = {
    "n": ("n",),
    "Acc@0.5": ("acc@0.5",),
    "Acc@0.75": ("acc@0.75",),
    "Acc@0.9": ("acc@0.9",),
    "2-3": ("bins", "2-3", "acc@0.5"),
    "4-6": ("bins", "4-6", "acc@0.5"),
    ">=7": ("bins", ">=7", "acc@0.5"),
    "parse fail": ("parse_fail",),
}
STYLE = {"ref": "Referring", "com": "Comparison", "rea": "Reasoning"}
COUNTS = {"n", "parse fail"}


def _dig(d: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        if d is None:
            return None
        d = d[k] if isinstance(d, list) else d.get(k)
    return d


def expected_path(board: str, column: str, protocol: str | None, m: dict[str, Any]) -> tuple[Any, ...]:
    """Where in metrics.json a leaderboard cell comes from (written out independently of the code)."""
    if board == "ref_adv_s":
        return REF_PATHS[column]
    if board == "mc_bench":
        metric = "acc" if column.startswith("Acc") else "ap50"
        if "^" not in column:
            return (protocol, metric)
        style = STYLE[column.split("^")[1]]
        return (protocol, "by_style", style, metric) if protocol == "official" else ("analyses", "by_style", style, metric)
    if board == "mm_niah_ranges":
        return ("overall", "overall") if column == "overall" else ("overall", "scores", m["context_ranges"].index(column))
    return ("overall", "overall") if column == "overall" else ("tasks", column, "overall")


@pytest.fixture(scope="module")
def many_runs(demo: Path, tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The demo runs plus a second 'model' per benchmark, with changed metrics."""
    root = tmp_path_factory.mktemp("runs")
    dirs = []
    for name in NAMES:
        src = demo / "runs" / name
        a = root / name / "model-a"
        shutil.copytree(src, a)
        b = root / name / "model-b" / "20260101-000000"
        shutil.copytree(src, b)
        header = json.loads((b / "run.json").read_text())
        header["config"]["model"] = "org/Model-B"
        header["created"] = "2027-01-01T00:00:00+0000"
        (b / "run.json").write_text(json.dumps(header))
        old = root / name / "model-b" / "20250101-000000"  # an older run of the same model: not taken
        shutil.copytree(src, old)
        (old / "run.json").write_text(json.dumps({**header, "created": "2020-01-01T00:00:00+0000"}))
        (old / "metrics.json").write_text("{}")
        m = metrics(b)
        if name == "ref_adv_s":
            m["acc@0.5"], m["bins"]["4-6"]["acc@0.5"], m["parse_fail"] = 0.123456789, 0.0285, 7
        elif name == "mc_bench":
            m["official"]["ap50"], m["corrected"]["acc"] = 0.99072033335085, 0.1445
        elif name == "mm_niah":
            m["overall"]["scores"][3], m["tasks"]["counting-image"]["overall"] = 0.333333, 0.987654
        (b / "metrics.json").write_text(json.dumps(m))
        dirs += [a, b.parent]  # the second as a model folder: its newest run is taken
    return dirs


def test_leaderboard_cells_equal_metrics(many_runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "lb"
    assert cli_main(["report", *map(str, many_runs), "--out", str(out)]) == 0
    md = (out / "leaderboard.md").read_text(encoding="utf-8")
    assert re.search(r"\d \[[0-9.]+, [0-9.]+\]", md)  # the runs' intervals (stats), compared apart: tests/test_stats_runs.py
    md = re.sub(r" \[[0-9.]+, [0-9.]+\]", "", md)
    checked = 0
    for key in ("ref_adv_s", "mc_bench", "mm_niah_ranges", "mm_niah_tasks"):
        with (out / f"leaderboard_{key}.csv").open(encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) == (4 if key == "mc_bench" else 2)
        for row in rows:
            m = metrics(Path(row["source"]))
            header = json.loads((Path(row["source"]) / "run.json").read_text())
            assert row["model"] == header["config"]["model"]
            value_columns = [c for c in row if c not in ("model", "prompt", "input", "protocol", "split", "source")]
            md_cells = []
            for column in value_columns:
                want = _dig(m, expected_path(key, column, row.get("protocol"), m))
                if want is None:
                    assert row[column] == ""
                    md_cells.append("")
                elif column in COUNTS:
                    assert int(row[column]) == want
                    md_cells.append(str(want))
                else:
                    assert float(row[column]) == 100 * want
                    md_cells.append(f"{100 * want:.1f}")
                checked += 1
            labels = [row[c] for c in ("model", "prompt", "input", "protocol", "split") if c in row]
            assert "| " + " | ".join([*labels, *md_cells, row["source"]]) + " |" in md
    assert checked > 60


def _number(value: object) -> float:
    assert isinstance(value, (int, float)), value
    return value


def test_leaderboard_sorts_by_headline_and_takes_newest_run(many_runs: list[Path]) -> None:
    runs = [lb.read_run(p) for p in many_runs]
    assert {r.model for r in runs} == {"needlepoint-simulated", "org/Model-B"}
    boards = {b.key: b for b in lb.build_boards(runs)}
    ref = boards["ref_adv_s"]
    acc = [_number(r.values[ref.columns.index("Acc@0.5")]) for r in ref.rows]
    assert acc == sorted(acc, reverse=True)
    assert all(r.dir.name != "20250101-000000" for r in runs)
    assert sum(r.dir.name == "20260101-000000" for r in runs) == len(NAMES)


class BoardParser(HTMLParser):
    """The cell texts of every <table class="board">: one list of rows per table, header first."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and dict(attrs).get("class") == "board":
            self.tables.append([])
        elif tag == "tr" and self.tables:
            self.tables[-1].append([])
        elif tag in ("td", "th") and self.tables:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def _shipped(name: str) -> Any:
    return files("needlepoint.report") / "published_data" / name


def _csv_rows(path: Any) -> list[dict[str, str]]:
    """A CSV file (a path or a package resource), read here independently of report/published.py."""
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_shipped_published_tables_equal_their_sources() -> None:
    """The shipped tables and their README are byte for byte the transcriptions whose SHA-256 digests
    tests/data/published.sha256 records: a cell edited in the package alone fails here."""
    lines = PUBLISHED_DIGESTS.read_text(encoding="utf-8").splitlines()
    recorded = {name: digest for digest, name in (line.split("  ", 1) for line in lines)}
    names = sorted(recorded)
    assert sorted(p.name for p in _shipped("").iterdir()) == names
    for name in names:
        assert hashlib.sha256(_shipped(name).read_bytes()).hexdigest() == recorded[name], name
    report_tables = [t.file for _, t in published_tables() if t.package == "needlepoint.report"]
    assert sorted(report_tables) == [f"published_data/{n}" for n in names if n.endswith(".csv")]


def test_leaderboard_shows_every_published_row(many_runs: list[Path], tmp_path: Path) -> None:
    """Every row of every shipped table, cell for cell and labelled with its source, in the CSV,
    Markdown and HTML outputs; the run rows beside them unchanged."""
    out, plain = tmp_path / "with", tmp_path / "plain"
    assert cli_main(["report", *map(str, many_runs), "--with-published", "--out", str(out)]) == 0
    assert cli_main(["report", *map(str, many_runs), "--out", str(plain)]) == 0
    md = (out / "leaderboard.md").read_text(encoding="utf-8")
    html_tables = BoardParser()
    html_tables.feed((out / "leaderboard.html").read_text(encoding="utf-8"))
    keys = ["ref_adv_s", "mc_bench", "mm_niah_ranges", "mm_niah_tasks", "refcoco"]
    boards = {key: _csv_rows(out / f"leaderboard_{key}.csv") for key in keys}
    assert len(html_tables.tables) == len(keys)

    # The run rows sit beside, as without --with-published; columns only a source has are empty in them.
    for key, rows in boards.items():
        mine = [r for r in rows if not r["source"].startswith("published: ")]
        before = _csv_rows(plain / f"leaderboard_{key}.csv")
        assert len(mine) == len(before) > 0
        for row, old in zip(mine, before):
            assert (Path(row["source"]) / "run.json").is_file()
            assert {c: v for c, v in row.items() if c in old} == old
            assert all(v == "" for c, v in row.items() if c not in old)

    def shown(key: str, row: dict[str, str]) -> None:
        """The CSV row (checked) is in the Markdown and the HTML as the same cells."""
        cells = list(row.values())
        md_cells = [f"*{c}*" if c else c for c in cells[:-1]] + [cells[-1]]
        assert "| " + " | ".join(md_cells) + " |" in md
        assert cells in html_tables.tables[keys.index(key)]

    for benchmark, table in published_tables():
        label = f"published: {table.source}"
        key = {"mm_niah": "mm_niah_ranges"}.get(benchmark, benchmark)
        # RefCOCO's layout names each row's own report as its source and its prompt and evaluator as labels
        relabelled = benchmark == "refcoco"
        written = [r for r in boards[key] if (r["source"].startswith("published: ") if relabelled else r["source"] == label)]
        resource = files(table.package)
        for part in table.file.split("/"):
            resource = resource / part
        published = _csv_rows(resource)
        assert len(written) == len(published) > 0
        for want in published:  # rows are ranked by the headline column (report/formats.py): found by their cells
            if relabelled:
                want = {c: v for c, v in want.items() if c in table.columns}
            row = next(r for r in written if all(r[table.columns.get(c, c)] == v for c, v in want.items()))
            renamed = {table.columns.get(c, c) for c in want}
            assert relabelled or all(v == "" for c, v in row.items() if c not in renamed and c != "source")
            shown(key, row)
        if benchmark == "mm_niah":  # the by-task board: each task's overall cell, per split and model
            by_task = {(r["split"], r["model"]): r for r in boards["mm_niah_tasks"] if r["source"] == label}
            assert len(by_task) == len({(r.get("split", ""), r["model"]) for r in published})
            for want in published:
                assert by_task[(want.get("split", ""), want["model"])][want["task"]] == want["overall"]
            for row in by_task.values():
                shown("mm_niah_tasks", row)

    # The columns land where they belong (the mapping above is the code's; these cells are not).
    def find(key: str, **labels: str) -> dict[str, str]:
        (row,) = [r for r in boards[key] if r["source"].startswith("published: ") and labels.items() <= r.items()]
        return row

    ref = find("ref_adv_s", model="Qwen2.5-VL-72B", cot="no")
    assert (ref["Acc@0.5"], ref["Acc@0.75"], ref["Acc@0.9"], ref[">=7"], ref["n"], ref["prompt"]) == (
        "54.0",
        "40.1",
        "18.0",
        "41.1",
        "",
        "",
    )
    mc = find("mc_bench", model="GPT-4o")
    assert (mc["Acc^com"], mc["Acc"], mc["AP50^ref"], mc["AP50"], mc["group"]) == (
        "82.8",
        "78.3",
        "1.8",
        "2.8",
        "API-Based Generalist MLLMs",
    )
    paper = find("mm_niah_ranges", model="InternVL-1.5", task="overall")
    board = find("mm_niah_ranges", model="InternVL-Chat-V1-5", task="overall", split="test")
    assert (paper["1k"], paper["64k"], paper["overall"], board["overall"]) == ("59.5", "30.1", "42.4", "41.1")
    assert paper["source"] != board["source"]  # the paper and the later leaderboard disagree: both, labelled
    gpt4v = find("mm_niah_tasks", model="GPT-4V", split="")
    assert (gpt4v["retrieval-text"], gpt4v["retrieval-image"], gpt4v["overall"]) == ("94.8", "", "")


def test_leaderboard_main_writes_to_out(many_runs: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ns = Namespace(runs=many_runs[:2], out=tmp_path / "o", with_published=False)
    assert lb.main(ns) == 0
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == [
        "leaderboard.html",
        "leaderboard.md",
        "leaderboard_ref_adv_s.csv",
    ]
    assert "Acc@0.5" in capsys.readouterr().out


def test_leaderboard_escapes_model_names(many_runs: list[Path], tmp_path: Path) -> None:
    run = tmp_path / "evil"
    shutil.copytree(many_runs[0], run)
    header = json.loads((run / "run.json").read_text())
    header["config"]["model"] = "<img src=x onerror=alert(1)>"
    (run / "run.json").write_text(json.dumps(header))
    lb.write_leaderboard(lb.build_boards([lb.read_run(run)]), tmp_path / "o")
    page = tmp_path / "o" / "leaderboard.html"
    assert "<img src=x" not in page.read_text(encoding="utf-8")
    assert all(not any(a.startswith("on") for a in attrs) for _, attrs in parse_page(page).tags)


def test_not_a_run_is_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="is not a run folder"):
        lb.read_run(empty)
    with pytest.raises(DataError, match="does not exist"):
        lb.read_run(tmp_path / "missing")
    unfinished = tmp_path / "unfinished"
    unfinished.mkdir()
    (unfinished / "run.json").write_text(json.dumps({"config": {"benchmark": "ref_adv_s", "model": "m"}}))
    with pytest.raises(DataError, match="no metrics.json"):
        lb.read_run(unfinished)
    assert cli_main(["report", str(empty), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a run folder" in err and "Traceback" not in err


def _write_run(folder: Path, header: Any, metrics_value: Any) -> Path:
    folder.mkdir(parents=True)
    (folder / "run.json").write_text(json.dumps(header), encoding="utf-8")
    if metrics_value is not None:
        (folder / "metrics.json").write_text(json.dumps(metrics_value), encoding="utf-8")
    return folder


GOOD_HEADER = {"config": {"benchmark": "ref_adv_s", "model": "m"}, "created": "2026-01-01T00:00:00+0000"}


@pytest.mark.parametrize("bad", [[], [1, 2], "text", 3, None, True])
def test_run_files_that_are_not_objects_are_one_sentence(bad: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    header_bad = _write_run(tmp_path / "header_bad", bad, {"n": 1})
    metrics_bad = _write_run(tmp_path / "metrics_bad", GOOD_HEADER, None)
    (metrics_bad / "metrics.json").write_text(json.dumps(bad), encoding="utf-8")
    # A model folder whose runs' headers are compared by their creation time.
    model_folder = tmp_path / "model"
    _write_run(model_folder / "a", GOOD_HEADER, {"n": 1})
    _write_run(model_folder / "b", bad, {"n": 1})
    for run, name in ((header_bad, "run.json"), (metrics_bad, "metrics.json"), (model_folder, "run.json")):
        with pytest.raises(DataError, match=f"{name} holds a JSON .*, not an object"):
            lb.read_run(run)
    for run in (header_bad, metrics_bad):
        assert cli_main(["report", str(run), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "not an object" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
    # A folder of runs: the good run is reported, the bad one is named as skipped, with why.
    assert cli_main(["report", str(model_folder), "--out", str(tmp_path / "o")]) == 0
    err = capsys.readouterr().err
    assert f"skipped {model_folder / 'b'}: " in err and "not an object" in err and "Traceback" not in err


def test_unreadable_or_malformed_run_files_are_one_sentence(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken_header = _write_run(tmp_path / "broken_header", GOOD_HEADER, {"n": 1})
    (broken_header / "run.json").write_text("{not json", encoding="utf-8")
    broken_metrics = _write_run(tmp_path / "broken_metrics", GOOD_HEADER, None)
    (broken_metrics / "metrics.json").write_text("{not json", encoding="utf-8")
    metrics_dir = _write_run(tmp_path / "metrics_dir", GOOD_HEADER, None)
    (metrics_dir / "metrics.json").mkdir()
    unknown = _write_run(tmp_path / "unknown", {"config": {"benchmark": "nope"}}, {"n": 1})
    cases = [
        (broken_header, "is not valid JSON"),
        (broken_metrics, "is not valid JSON"),
        (metrics_dir, "cannot be read"),
        (unknown, "which has no leaderboard"),
    ]
    for run, message in cases:
        with pytest.raises(DataError, match=message):
            lb.read_run(run)
        assert cli_main(["report", str(run), "--out", str(tmp_path / "o")]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and message in err and "Traceback" not in err


def test_odd_but_object_metrics_give_empty_cells(tmp_path: Path) -> None:
    """Objects of the wrong shape inside metrics.json leave cells empty instead of crashing."""
    odd = {
        "bins": [],
        "acc@0.5": "high",
        "official": [],
        "corrected": {"by_style": 3},
        "overall": {"scores": 7},
        "context_ranges": {"1k": 0},
        "tasks": "x",
        "n": True,
    }
    runs = []
    for name in NAMES:
        header = {"config": {"benchmark": name, "model": "m", "options": []}, "identity": []}
        runs.append(lb.read_run(_write_run(tmp_path / name, header, odd)))
    boards = lb.build_boards(runs)
    assert [b.key for b in boards] == ["ref_adv_s", "mc_bench", "mm_niah_ranges", "mm_niah_tasks", "refcoco"]
    # a cell of the wrong shape is empty; a value that is no number ("high", true) is shown as corrupt
    assert all(v is None or isinstance(v, Corrupt) for b in boards for r in b.rows for v in r.values)
    assert boards[0].display_rows()[0][2:4] == ["corrupt", "corrupt"]  # n: true, Acc@0.5: "high"
    lb.write_leaderboard(boards, tmp_path / "o")


def test_every_benchmark_has_a_leaderboard() -> None:
    """Each built-in benchmark declares a layout, and it lays out at least one board."""
    for name in NAMES:
        assert declaration(name).leaderboard and callable(lb.layout(name))


def test_mc_bench_cells_are_table2_unrounded(many_runs: list[Path]) -> None:
    """The leaderboard's MC-Bench row is the terminal's Table 2 row before rounding."""
    run = lb.read_run(next(p for p in many_runs if p.parent.name == "mc_bench"))
    official = run.metrics["official"]
    values = mc_values(official, official["by_style"])
    assert [None if v is None else round(v, 1) for v in values] == table2_row(official)


def _item(*boxes: ReportBox) -> ReportItem:
    return ReportItem("1", "p", "a", images=[ReportImage(ImageRef("x", loader=lambda: b""), list(boxes))])


def _legend(*items: ReportItem) -> str:
    """The page's legend of these items' rows, coloured by group when an item is grouped."""
    rows = [report_rows.make_row(it, None) for it in items]
    assert any(row.grouped for row in rows) == thumbs.grouped(items)
    return report_html._legend(rows, thumbs.grouped(items))


def test_legend_follows_the_boxes() -> None:
    legend = _legend(_item(ReportBox([0, 0, 1, 1], "gt"), ReportBox([0, 0, 1, 1], "pred", label="first box")))
    assert "ground truth" in legend and "prediction (first box)" in legend and "group" not in legend
    legend = _legend(_item(ReportBox([0, 0, 1, 1], "gt", 1), ReportBox([0, 0, 1, 1], "pred", 2)))
    assert "group 1" in legend and "group 2" in legend and "dashed: prediction" in legend
    assert _legend(_item()) == ""
    only_gt = _legend(_item(ReportBox([0, 0, 1, 1], "gt")))
    assert "ground truth" in only_gt and "prediction" not in only_gt


def test_write_atomic_leaves_no_temporary_file(tmp_path: Path) -> None:
    path = write_atomic(tmp_path / "a" / "b.txt", "é")
    assert path.read_text(encoding="utf-8") == "é"
    write_atomic(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert [p.name for p in path.parent.iterdir()] == ["b.txt"]

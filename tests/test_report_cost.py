"""Issue 45.2: the report must not cost more than the run. Thumbnails at the size the page shows
and at most THUMB_BYTES; at a run's end an image that is a file of its own is linked from the page
rather than copied or decoded, one without a file (a parquet row) is drawn small; a report
written on its own draws them all; MM-NIAH's cards cut out of the document by a few searches
(the same card as cutting it into sentences); what the model saw of a long document shown by its
ends; heatmaps drawn without matplotlib. Behaviour only, never time (docs/performance.md has the
timings, perf/bench_report_overhead.py takes them)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from helpers import report_blob, small_niah
from PIL import Image

from needlepoint.benchmarks.mm_niah import heatmap
from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.cards import add_document, document_parts
from needlepoint.benchmarks.mm_niah.rag import document_from_row
from needlepoint.benchmarks.mm_niah.rag_results import context_parts
from needlepoint.contract.base import ReportBox, ReportImage, ReportItem
from needlepoint.core.conversation import ImageRef
from needlepoint.core.records import TEXT_END_CHARS, kept_texts
from needlepoint.report import html as report_html
from needlepoint.report import rows as report_rows
from needlepoint.report import thumbs


def _noise_jpeg(path: Path, width: int, height: int, seed: int = 0) -> bytes:
    """A JPEG of noise (the worst case for its size), written to `path` when given."""
    im = Image.effect_noise((width, height), 40 + seed).convert("RGB")
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=92)
    data = buf.getvalue()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return data


def _items(folder: Path) -> tuple[ReportItem, ReportItem, ReportItem]:
    """A card of one image file with a box, a card of six image files (drawn small), and a card of
    one image without a file of its own (a parquet row's loader)."""
    one = ReportItem(
        "one", "p", "a", [ReportImage(ImageRef("one.jpg", path=folder / "one.jpg"), [ReportBox([1, 2, 30, 40], "gt")])]
    )
    many = ReportItem("many", "p", "a", [ReportImage(ImageRef(f"m{k}.jpg", path=folder / f"m{k}.jpg")) for k in range(6)])
    row = _noise_jpeg(folder / "row.jpg", 500, 300, 9)
    parquet = ReportItem("row", "p", "a", [ReportImage(ImageRef("row", loader=lambda: row))])
    _noise_jpeg(folder / "one.jpg", 640, 480)
    for k in range(6):
        _noise_jpeg(folder / f"m{k}.jpg", 448, 448, k)
    return one, many, parquet


def test_a_report_written_on_its_own_draws_every_thumbnail_small(tmp_path: Path) -> None:
    items = _items(tmp_path / "images")
    folder = tmp_path / "report" / "thumbs"
    drawer = thumbs.Thumbnails(folder, workers=2)
    sizes = drawer.finish(items)
    assert drawer.links == {}
    files = {p.name.split("-")[0]: p for p in folder.glob("*.jpg")}
    assert len(files) == 8 == len(sizes)
    for it in items:
        side = thumbs.side_of(it)
        assert side == (thumbs.THUMB_MANY if len(it.images) > thumbs.MANY else thumbs.THUMB_MAX)
        for im in it.images:
            made = files[thumbs.thumb_key(im, side)].read_bytes()
            assert made != im.image.read_bytes() and len(made) <= thumbs.THUMB_BYTES  # never a copy
            assert max(Image.open(io.BytesIO(made)).size) <= side
            assert sizes[thumbs.thumb_key(im, side)] == Image.open(io.BytesIO(im.image.read_bytes())).size


def test_a_runs_end_links_image_files_and_draws_only_what_has_no_file(tmp_path: Path) -> None:
    one, many, parquet = _items(tmp_path / "data" / "images")
    report = tmp_path / "run" / "report"
    drafted = ReportImage(ImageRef("m0.jpg", path=many.images[0].image.path))
    assert thumbs.draw(report / "thumbs", thumbs.thumb_key(drafted, thumbs.THUMB_MANY), drafted.image, thumbs.THUMB_MANY)
    drawer = thumbs.Thumbnails(report / "thumbs", workers=2, link_missing=True)
    sizes = drawer.finish([one, many, parquet])
    # One file in thumbs/ for the draft and one for the image of no file of its own; none for the rest.
    names = sorted(p.name.split("-")[0] for p in (report / "thumbs").iterdir())
    row_key = thumbs.thumb_key(parquet.images[0])
    assert names == sorted([thumbs.thumb_key(drafted, thumbs.THUMB_MANY), row_key])
    assert set(drawer.links) == {thumbs.thumb_key(one.images[0])} | {
        thumbs.thumb_key(im, thumbs.THUMB_MANY) for im in many.images[1:]
    }
    for url in drawer.links.values():
        assert (report / unquote(url)).resolve().parent == (tmp_path / "data" / "images").resolve()
    # A linked image with boxes has its size read from its header (the boxes refer to it); one
    # without boxes needs none.
    assert sizes[thumbs.thumb_key(one.images[0])] == (640, 480)
    assert sizes[thumbs.thumb_key(many.images[1], thumbs.THUMB_MANY)] == thumbs.UNKNOWN_SIZE
    rows = [report_rows.make_row(it, None) for it in (one, many, parquet)]
    blob = json.loads("".join(report_html.sample_json("x", rows, report_html.Places(sizes, drawer.links), False)[0]))
    shown = {it["id"]: it["im"] for it in blob["items"]}
    assert shown["one"][0][:3] == [drawer.links[thumbs.thumb_key(one.images[0])], 640, 480]
    assert shown["many"][0][0].startswith("thumbs/") and not shown["many"][1][0].startswith("thumbs/")
    assert shown["row"][0][0] == f"thumbs/{thumbs.file_name(row_key, (500, 300))}"


def test_only_small_files_in_a_browser_format_are_linked(tmp_path: Path) -> None:
    big = tmp_path / "big.jpg"
    big.write_bytes(b"\xff\xd8" + b"\0" * (thumbs.LINK_MAX_BYTES + 1))
    tiff = tmp_path / "scan.tiff"
    Image.new("RGB", (8, 8)).save(tiff)
    small = tmp_path / "small.JPG"
    _noise_jpeg(small, 32, 32)
    assert thumbs.linkable(ImageRef("big", path=big)) is None
    assert thumbs.linkable(ImageRef("scan", path=tiff)) is None
    assert thumbs.linkable(ImageRef("gone", path=tmp_path / "gone.jpg")) is None
    assert thumbs.linkable(ImageRef("row", loader=lambda: small.read_bytes())) is None
    assert thumbs.linkable(ImageRef("small", path=small)) == small


def test_mm_niah_cards_are_the_sentence_cut_cards_without_cutting_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder, settings, _ = small_niah(tmp_path / "data")
    samples = MmNiah(**settings).load(folder)
    wanted = {}
    for s in samples:  # the card as the document cut into the authors' sentences gives it
        row = s.row()
        doc = document_from_row(row, s.images)
        note = {"kept": [[0, len(doc.pieces) - 1]], "needles": [{"pieces": list(n.pieces)} for n in doc.needles]}
        wanted[s.id] = context_parts(doc.pieces, note)
    import needlepoint.benchmarks.mm_niah.rag as rag

    def no_cutting(context: str) -> list[str]:
        raise AssertionError("a card cut the whole document into sentences")

    monkeypatch.setattr(rag, "split_pieces", no_cutting)
    marked = 0
    for s in samples:
        item = ReportItem(s.id, "q", "a")
        add_document(item, s)
        assert item.context == wanted[s.id]
        marked += any(flag for _, flag in item.context)
    assert marked  # the demo set's text needles are found and marked


def test_document_parts_marks_each_needles_sentences_and_cuts_long_runs() -> None:
    filler = "Nothing here. " * 100
    context = f"{filler}The key is 7! It opens. <image>{filler}Blue <image>rain falls.{filler}"
    parts = document_parts(context, ["key is 7", "rain", "pic2.jpg", "absent", 3], ["pic1.jpg", "pic2.jpg"])
    # the second image mark (pic2.jpg) and the sentence after it are neighbours: one marked run
    assert [text for text, flag in parts if flag] == [" The key is 7!", "<image>rain falls."]
    assert "".join(t for t, _ in parts).count("[…]") == 3 and all(len(t) < 600 for t, _ in parts)
    assert document_parts("short. text.", []) == [("short. text.", False)]


def test_a_long_turn_of_what_the_model_saw_is_shown_by_its_ends() -> None:
    long_text = "a" * 30_000 + "THE-END"
    record: Any = {
        "turns": [
            {"sent": [{"role": "user", "content": [{"type": "text", "text": long_text}, {"type": "text", "text": "short"}]}]}
        ]
    }
    ((_, ((_, parts),)),) = report_rows.sent_view(record, {})  # a record of an earlier version: the whole text
    assert parts[0][1].endswith("THE-END") and parts[0][1].startswith("a" * TEXT_END_CHARS)
    assert len(parts[0][1]) < 3 * TEXT_END_CHARS + 100 and f"[... {30_007 - 2 * TEXT_END_CHARS} more characters" in parts[0][1]
    assert parts[1] == ["t", "short"]
    kept: Any = {"turns": [{"sent": [{"role": "user", "content": kept_texts([long_text, "short"])}]}]}  # as records keep it now
    assert report_rows.sent_view(kept, {}) == report_rows.sent_view(record, {})
    short: Any = {"turns": [{"sent": [{"role": "user", "content": "b" * 5000}]}]}  # a turn within MAX_TEXT stays verbatim
    assert report_rows.sent_view(short, {})[0][1][0][1] == [["t", "b" * 5000]]


def test_heatmaps_are_drawn_without_matplotlib_in_the_cells_colours(tmp_path: Path) -> None:
    cells = [[0.0, 1.0, 0.5] + [0.25] * 8 for _ in range(5)]
    counts = [[3, 2, 0] + [1] * 8 for _ in range(5)]
    code = (
        "import json, sys; from pathlib import Path; from needlepoint.benchmarks.mm_niah.heatmap import draw_heatmap; "
        f"draw_heatmap({cells!r}, {counts!r}, 'a <title>', Path(sys.argv[1])); "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'matplotlib')))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "t")], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []
    png = Image.open(tmp_path / "t.png").convert("RGB")
    width, height = png.size
    assert 1000 < width < 2500 and 400 < height < 1200
    cw, ch, xs, ys = heatmap._cells(5, 11)
    for col, want in ((0, heatmap.colour(0.0)), (1, heatmap.colour(1.0)), (2, heatmap._rgb(heatmap.EMPTY))):
        got: Any = png.getpixel(
            (round(xs[col] - cw / 2 + 4), round(ys[0] - ch / 2 + 4))
        )  # a corner of the cell, clear of its text
        assert max(abs(a - b) for a, b in zip(got, want)) <= 12, (col, got, want)
    svg = (tmp_path / "t.svg").read_text(encoding="utf-8")
    assert "a &lt;title&gt;" in svg and "n=2" in svg and heatmap._hex(heatmap.colour(1.0)) in svg
    assert heatmap.colour(0.0) == heatmap._rgb(heatmap.RDYLGN[0]) and heatmap.colour(1.0) == heatmap._rgb(heatmap.RDYLGN[-1])


def test_an_mm_niah_runs_report_holds_no_full_size_image(tmp_path: Path) -> None:
    from needlepoint.core.config import RunConfig
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
    from needlepoint.run.evaluate import evaluate

    data, options, script = small_niah(tmp_path / "data")
    with SimulatedServer(script=script, default=None) as server:
        config = RunConfig(
            benchmark="mm_niah",
            data=data,
            model=SIMULATED_MODEL_NAME,
            api_urls=[server.url],
            options=options,
            out=tmp_path / "run",
            concurrency=4,
            show_progress=False,
        )
        result: Any = evaluate(config)
    report = result.run_dir / "report"
    page = report_blob(report / "index.html")
    images = [src for it in page["items"] for src, *_ in it["im"]]
    assert images and all((report / unquote(src)).is_file() for src in images)
    made = list((report / "thumbs").glob("*.jpg")) if (report / "thumbs").is_dir() else []
    assert all(p.stat().st_size <= thumbs.THUMB_BYTES for p in made)
    originals = {p.read_bytes() for p in Path(data).rglob("*") if p.suffix.lower() in (".jpg", ".jpeg", ".png")}
    assert originals and not any(p.read_bytes() in originals for p in made)


def test_a_runs_end_leaves_what_it_has_no_time_for_to_a_later_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: Any
) -> None:
    from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
    from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release

    data = write_release(tmp_path / "data", make_rows(4))
    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(data)
    recs: list[Any] = [
        {
            "id": s.id,
            "status": "done",
            "turns": [{"reply": "x"}],
            "answer": [[1.0, 2.0, 30.0, 40.0]],
            "scores": {"iou": 0.0, "hit": False},
        }
        for s in samples
    ]
    header: dict[str, Any] = {"config": {"benchmark": "ref_adv_s", "model": "m"}, "status": "finished"}
    run_dir, metrics = tmp_path / "run", bench.score(samples, recs)
    monkeypatch.setattr(report_html, "end_budget", lambda samples: 0.0)  # a run's end with no time left to draw
    page = report_html.write_run_report(run_dir, bench, samples, recs, metrics, header, link_missing=True)
    data_ = report_blob(page)
    assert data_["undrawn"] == len(samples) and all(it["im"][0][0] == "" and it["im"][0][5] == 1 for it in data_["items"])
    assert "4 thumbnails were not drawn by the end of the run" in page.read_text(encoding="utf-8")
    assert "4 thumbnails not drawn by the run's end" in capfd.readouterr().err
    assert not list((run_dir / "report" / "thumbs").glob("*.jpg"))
    # The same command run again (nothing new to answer: the same records) draws them, whatever its budget.
    data_ = report_blob(report_html.write_run_report(run_dir, bench, samples, recs, metrics, header, link_missing=True))
    assert data_["undrawn"] == 0 and all(it["im"][0][0].startswith("thumbs/") for it in data_["items"])
    assert all(p.stat().st_size <= thumbs.THUMB_BYTES for p in (run_dir / "report" / "thumbs").glob("*.jpg"))
    # ...and the page is then current: a third run rewrites nothing.
    stamp = page.stat().st_mtime_ns
    report_html.write_run_report(run_dir, bench, samples, recs, metrics, header, link_missing=True)
    assert page.stat().st_mtime_ns == stamp
    assert thumbs.end_budget(100) == thumbs.END_BUDGET_MIN_S and thumbs.end_budget(10_000) == pytest.approx(6.0)


def test_a_linked_images_url_is_relative_and_percent_encoded(tmp_path: Path) -> None:
    """A linked image's URL from the page's folder: a name of URL-safe characters as it is, any
    other quoted, the folder's part made once however many images it holds."""
    page = tmp_path / "run" / "report"
    images = tmp_path / "data" / "doc 1"
    for name, want in (
        ("img-01_x.v2~.jpg", "img-01_x.v2~.jpg"),
        ("a b#?.jpg", "a%20b%23%3F.jpg"),
        ("é%.jpg", "%C3%A9%25.jpg"),
    ):
        assert thumbs.relative_url(images / name, page) == f"../../data/doc%201/{want}"
        assert thumbs.relative_url(str(page / name), str(page)) == want

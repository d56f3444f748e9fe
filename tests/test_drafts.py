"""The report's drafts (`report.drafts`): forked processes that draw the thumbnails of the samples
whose records a run appends, from their own reads of the release, while the run answers; the run's
client hands them nothing. The report then finds them in the folder and copies what they did not
draw."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import records as stored_records
from helpers import report_blob as blob
from helpers.kills import reaped
from PIL import Image

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.ref_adv.demo import HEIGHT, WIDTH, make_rows, write_release
from needlepoint.contract.base import ReportImage, ReportItem
from needlepoint.core import forks
from needlepoint.core.config import RunConfig
from needlepoint.core.records import Record
from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
from needlepoint.report import drafts, thumbs
from needlepoint.run.evaluate import evaluate

SAMPLES = drafts.MIN_SAMPLES + 16


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    """A Ref-Adv-s release in the Hugging Face parquet layout, and its images' bytes by row."""
    rows = make_rows(SAMPLES)
    data = write_release(tmp_path_factory.mktemp("drafts") / "data", rows)
    return data, [r["image"]["bytes"] for r in rows]


def _record(sample: Any) -> dict[str, Any]:
    return {"id": sample.id, "status": "done", "turns": [{"reply": "x"}], "answer": [[1.0, 2.0, 30.0, 40.0]], "iou": 0.0}


def _wait_for(count: int, folder: Path, deadline: float) -> dict[str, thumbs.Size]:
    while len(found := thumbs.existing(folder)) < count and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


def test_drafts_draw_what_the_records_file_names_from_their_own_reads(release: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    data, originals = release
    bench = RefAdv(box_format="abs_xyxy")
    samples = bench.load(data)
    # The parent has read from the parquet file: its reader thread and its file handle exist
    # before the fork, and neither may be used by a drafting process.
    assert samples[0].image.read_bytes() == originals[0]
    run = tmp_path / "run"
    run.mkdir()
    folder, records = run / "report" / "thumbs", run / "records.jsonl"
    answered = list(samples)[: SAMPLES - 10]
    before, later, earlier = answered[:-5], answered[-5:], list(samples)[-3:]
    old = "".join(json.dumps(_record(s)) + "\n" for s in earlier)  # a resumed run's: the report's to make
    records.write_text(old)

    def items_of(done: list[Any], recs: list[Record]) -> list[ReportItem]:
        return bench.report_items(samples.with_samples(done), recs)

    started = drafts.start(folder, records, list(samples), items_of, expected=SAMPLES, processes=2)
    assert started is not None and len(started.pids) == 2
    pids = list(started.pids)
    deadline = time.monotonic() + 120
    try:
        # The run reads the release through its own handle meanwhile, undisturbed...
        assert [s.image.read_bytes() for s in samples] == originals
        # ...answers many samples at once (all seen at one look: a new file in one rename)...
        fresh = tmp_path / "records.new"
        fresh.write_text(old + "".join(json.dumps(_record(s)) + "\n" for s in before) + "not a record\n")
        fresh.replace(records)
        _wait_for(len(before), folder, deadline)
        with records.open("a") as fh:  # ...then the last ones one at a time
            for n, s in enumerate(later, 1):
                fh.write(json.dumps(_record(s)) + "\n")
                fh.flush()
                _wait_for(len(before) + n, folder, deadline)
        found = _wait_for(len(answered), folder, deadline)
    finally:
        started.stop()
    key = {s.id: thumbs.thumb_key(ReportImage(s.image)) for s in samples}
    assert set(found) == {key[s.id] for s in answered}  # those answered since the start, no other
    # Every draft is drawn small, also those a process found many at one look (behind the run):
    # never the image's own bytes.
    for s in answered:
        k, original = key[s.id], originals[int(s.id)]
        assert found[k] == (WIDTH, HEIGHT)  # the image's own size, which the boxes refer to
        made = (folder / thumbs.file_name(k, found[k])).read_bytes()
        assert made == thumbs.make_thumbnail(original, k)[0] and made != original
        assert max(Image.open(io.BytesIO(made)).size) <= thumbs.THUMB_MAX and len(made) <= thumbs.THUMB_BYTES
    assert all(reaped(pid) for pid in pids)
    assert not [p for p in folder.iterdir() if ".tmp" in p.name]
    started.stop()  # twice: nothing left to stop


def test_an_interrupt_while_forking_stops_the_drafts_forked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    forked: list[int] = []
    real = forks.fork  # what drafts forks with, patched below

    def fork_once(child: Any) -> int:
        if forked:
            raise KeyboardInterrupt
        forked.append(real(child))
        return forked[-1]

    monkeypatch.setattr(drafts, "fork", fork_once)
    with pytest.raises(KeyboardInterrupt):
        drafts.start(tmp_path, tmp_path / "records.jsonl", [], lambda d, r: [], expected=drafts.MIN_SAMPLES, processes=3)
    assert len(forked) == 1 and reaped(forked[0])


@pytest.fixture
def forked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pids of the drafting processes that the test's runs start."""
    pids: list[int] = []
    real = drafts.start

    def start(*args: Any, **kw: Any) -> drafts.Drafts | None:
        made = real(*args, **kw)
        pids.extend(made.pids if made is not None else [])
        return made

    monkeypatch.setattr(drafts, "start", start)
    return pids


def test_an_interrupted_run_stops_its_drafts(release: tuple[Path, list[bytes]], tmp_path: Path, forked: list[int]) -> None:
    data, _ = release
    running: list[int] = []

    async def hold(key: str) -> None:
        if "(case 20)" in key:
            running.extend(forked)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the middle of the run
            await asyncio.sleep(3600)

    with SimulatedServer(before_answer=hold) as server, pytest.raises(KeyboardInterrupt):
        evaluate(_config(data, server.url, tmp_path / "run"))
    assert running and all(reaped(pid) for pid in running)


def _config(data: Path, url: str, out: Path, processes: int = 1) -> RunConfig:
    return RunConfig(
        benchmark="ref_adv_s",
        data=data,
        model=SIMULATED_MODEL_NAME,
        api_urls=[url],
        options={"box_format": "abs_xyxy"},
        out=out,
        concurrency=4,
        show_progress=False,
        processes=processes,
    )


def test_a_small_run_forks_no_drafts(tmp_path: Path) -> None:
    assert drafts.start(tmp_path, tmp_path / "records.jsonl", [], lambda d, r: [], expected=drafts.MIN_SAMPLES - 1) is None


@pytest.mark.parametrize("processes", [1, 2])
def test_a_run_draws_its_thumbnails_while_it_answers(
    release: tuple[Path, list[bytes]], tmp_path: Path, processes: int, forked: list[int]
) -> None:
    """The server holds the last sample's request until the drafts of every other sample are in
    the folder: they can only come from the drafting processes, since the run has not ended (with
    --processes, they follow the records the command copies from its workers). The report shows
    them, and the last sample's thumbnail, which the run's end made, as well."""
    data, originals = release
    folder = tmp_path / "run" / "report" / "thumbs"
    last = f"(case {SAMPLES - 1})"
    held: list[int] = []

    async def hold(key: str) -> None:
        if last in key:
            deadline = time.monotonic() + 60
            while len(thumbs.existing(folder)) < SAMPLES - 1 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            held.append(len(thumbs.existing(folder)))

    with SimulatedServer(before_answer=hold) as server:
        result = evaluate(_config(data, server.url, tmp_path / "run", processes))
    assert held == [SAMPLES - 1]  # every other sample drafted before the last one was answered
    assert len(stored_records(result.run_dir)) == SAMPLES
    page = blob(result.run_dir / "report" / "index.html")
    shown = {it["id"]: it["im"][0][0] for it in page["items"]}
    assert len(shown) == SAMPLES
    for sample_id, name in shown.items():
        made = (result.run_dir / "report" / name).read_bytes()
        key = name.split("/")[-1].split("-")[0]
        assert made == thumbs.make_thumbnail(originals[int(sample_id)], key)[0]  # drawn small, by a draft or the run's end
    assert forked and all(reaped(pid) for pid in forked)

"""`needlepoint build mc_bench_sft` under hostile input: the output folder is replaced whole or
refused (another build, other files, an older build's leftover, kill -9 in a subprocess), image
paths stay inside `--images` (absolute ones inside are accepted), and images that do not decode
(rendered here with Pillow: a truncated JPEG, a text file named .jpg, a decompression-bomb header)
are never referenced by the training data, only counted; a 12,000 x 12,000 image is checked reduced."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers.coco import make_coco, sft_build_args
from helpers.images import big_png, png_header_only

from needlepoint.cli import main

SRC = Path(__file__).resolve().parents[1] / "src"
OUTPUTS = ["dataset_info.json", "manifest.json", "mc_bench_sft.json", "samples_meta.jsonl"]


@pytest.fixture
def coco(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    folder = tmp_path / "coco"
    return folder, make_coco(folder)


def tree(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    rc = main(argv)
    return rc, capsys.readouterr().err


# --- the output folder: whole or refused -------------------------------------------------------------


def test_a_folder_holding_a_build_is_refused_and_kept(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = coco
    out = tmp_path / "out"
    assert run(sft_build_args(folder, out, "--format", "swift"), capsys)[0] == 0
    before = tree(out)
    rc, err = run(sft_build_args(folder, out), capsys)
    assert rc == 2 and "already holds a complete build" in err and len(err.strip().splitlines()) == 1, err
    assert tree(out) == before, "the old build is untouched, nothing of the new one beside it"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coco", "out"]


def test_a_folder_of_other_files_is_refused(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = coco
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    rc, err = run(sft_build_args(folder, out), capsys)
    assert rc == 2 and "not a needlepoint mc_bench_sft build" in err
    assert tree(out) == {"notes.txt": b"mine"}


def test_an_older_builds_leftover_is_replaced_whole(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = coco
    out = tmp_path / "out"
    out.mkdir()
    (out / "mc_bench_sft.jsonl.tmp").write_text('{"messages": [')  # an older version, killed while writing in place
    (out / "samples_meta.jsonl.tmp").write_text("{}\n")
    (out / "dataset_info.json").write_text('{"old": {"file_name": "old.json"}}')
    beside = tmp_path / "out.replaced"  # someone's folder of the name the replacement once used, and removed
    beside.mkdir()
    (beside / "precious.txt").write_text("mine")
    rc, err = run(sft_build_args(folder, out), capsys)
    assert rc == 0 and "replacing the incomplete build left in" in err, err
    assert sorted(tree(out)) == OUTPUTS
    assert tree(beside) == {"precious.txt": b"mine"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coco", "out", "out.replaced"]  # the leftover's copy is gone
    assert "old" not in json.loads((out / "dataset_info.json").read_text())
    assert json.loads((out / "manifest.json").read_text())["status"] == "complete"


def test_kill_9_leaves_only_a_partial_folder_that_the_next_build_replaces(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, _ = coco
    out = tmp_path / "out"
    argv = [sys.executable, "-m", "needlepoint.cli", *sft_build_args(folder, out, samples=200_000)]
    proc = subprocess.Popen(
        argv, env={**os.environ, "PYTHONPATH": str(SRC)}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    partial = tmp_path / "out.partial"
    try:  # the data file is written through a temporary file beside its name (store.AtomicFile)
        while proc.poll() is None and not any(p.stat().st_size > 10_000 for p in partial.glob("mc_bench_sft.json.tmp*")):
            time.sleep(0.01)
        assert proc.poll() is None, "the build ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    assert not out.exists()
    assert json.loads((tmp_path / "out.partial" / "manifest.json").read_text())["status"] == "incomplete"
    rc, err = run(sft_build_args(folder, out), capsys)
    assert rc == 0, err
    assert sorted(tree(out)) == OUTPUTS and not (tmp_path / "out.partial").exists()


# --- paths ---------------------------------------------------------------------------------------------


def test_absolute_paths_inside_images_are_accepted_and_outside_refused(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, data = coco
    images = (folder / "images").resolve()
    for im in data["images"]:
        im["file_name"] = str(images / im["file_name"])
    (folder / "instances.json").write_text(json.dumps(data))
    rc, err = run(sft_build_args(folder, tmp_path / "a"), capsys)
    assert rc == 0, err
    samples = json.loads((tmp_path / "a" / "mc_bench_sft.json").read_text())
    assert {p for s in samples for p in s["images"]} <= {im["file_name"] for im in data["images"]}

    shutil.copy(images / data["images"][0]["file_name"], tmp_path / "outside_secret.jpg")
    data["images"][0]["file_name"] = str(images / ".." / ".." / "outside_secret.jpg")
    (folder / "instances.json").write_text(json.dumps(data))
    rc, err = run(sft_build_args(folder, tmp_path / "b"), capsys)
    assert (
        rc == 2 and "outside_secret.jpg" in err and "lies outside the images folder" in err and len(err.strip().splitlines()) == 1
    ), err
    assert not (tmp_path / "b").exists()


# --- images that do not decode -------------------------------------------------------------------------


def test_images_that_do_not_decode_are_never_referenced_only_counted(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, data = coco
    names = [im["file_name"] for im in data["images"]]
    truncated, text, bomb, huge = names[1], names[4], names[7], names[9]
    path = folder / "images"
    good = (path / truncated).read_bytes()
    (path / truncated).write_bytes(good[: len(good) // 2])
    (path / text).write_text("not a picture\n")
    (path / bomb).write_bytes(png_header_only(100_000, 100_000))
    big_png(path / huge, 12_000)  # decodes (reduced): used
    rc, err = main(sft_build_args(folder, tmp_path / "out", samples=300)), capsys.readouterr().err
    assert rc == 0 and "Traceback" not in err and "DecompressionBomb" not in err, err
    samples = json.loads((tmp_path / "out" / "mc_bench_sft.json").read_text())
    used = {Path(p).relative_to(path.resolve()).as_posix() for s in samples for p in s["images"]}
    assert not used & {truncated, text, bomb} and huge in used
    report = json.loads((tmp_path / "out" / "manifest.json").read_text())["images_not_decodable"]
    assert report["count"] == 3 and sorted(report["files"]) == sorted([truncated, text, bomb]) and report["samples_redrawn"] > 0
    assert "truncated" in report["files"][truncated]
    assert "skipped 3 images that do not decode" in err


def test_a_mix_sample_with_an_image_that_does_not_decode_is_skipped_and_counted(
    coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder, data = coco
    mix = tmp_path / "mixdir"
    mix.mkdir()
    shutil.copyfile(folder / "images" / data["images"][0]["file_name"], mix / "a.jpg")
    (mix / "b.jpg").write_text("a text file named .jpg")
    turns = [{"from": "human", "value": "<image>What is it?"}, {"from": "gpt", "value": "A box."}]
    (mix / "mix.json").write_text(
        json.dumps([{"conversations": turns, "images": ["a.jpg"]}, {"conversations": turns, "images": ["b.jpg"]}])
    )
    rc, err = run(sft_build_args(folder, tmp_path / "out", "--mix", str(mix / "mix.json"), samples=20), capsys)
    assert rc == 0, err
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert manifest["mix_samples"] == 1 and manifest["images_not_decodable"]["mix_samples_skipped"] == 1
    samples = json.loads((tmp_path / "out" / "mc_bench_sft.json").read_text())
    assert len(samples) == 21 and samples[-1]["images"] == [str((mix / "a.jpg").resolve())]


def test_a_build_says_what_it_does(coco: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = coco
    argv = sft_build_args(folder, tmp_path / "out")
    argv.remove("--no-progress")
    rc, err = run(argv, capsys)
    assert rc == 0 and f"build mc_bench_sft: reading {folder / 'instances.json'}" in err and "wrote 120 samples" in err, err

"""One rule for every reader of data-file paths (issue 42): an image path of a data file is read only
when it resolves inside the images folder. A link inside the folder that leads out of it is refused
when the data is loaded, by each benchmark's loader alike, in one sentence; a folder reached through
a link (an images folder on another disk) and a Hugging Face cache snapshot (whose files are links
into its repository's `blobs/`) are read as before."""

from __future__ import annotations

import itertools
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any

import pytest
from helpers import write_jsonl_release

from needlepoint.benchmarks.mc_bench import demo as mc_demo
from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mm_niah import demo as niah_demo
from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.benchmarks.refcoco import demo as refcoco_demo
from needlepoint.benchmarks.refcoco.benchmark import RefCoco
from needlepoint.core.errors import DataError
from needlepoint.core.images import lies_inside, safe_path, stays_inside

Loader = Callable[[Path], Any]


def _mc_bench(folder: Path) -> tuple[Path, Path, Loader]:
    data, options, _ = mc_demo.build(folder)
    return data, data / "mc-bench_images", McBench(**options).load


def _mm_niah(folder: Path) -> tuple[Path, Path, Loader]:
    data, options, _ = niah_demo.build(folder)
    return data, data / "mm_niah_val" / "images", MmNiah(**options).load


def _refcoco(folder: Path) -> tuple[Path, Path, Loader]:
    data, options, _ = refcoco_demo.build(folder)
    return data, data / "images", RefCoco(**options).load


def _ref_adv(folder: Path, rows: list[dict[str, Any]]) -> tuple[Path, Path, Loader]:
    release = write_jsonl_release(folder, rows)
    return release / "data.jsonl", release / "images", RefAdv(box_format="abs_xyxy").load


@pytest.fixture(params=["mc_bench", "mm_niah", "refcoco", "ref_adv_s"])
def release(request: pytest.FixtureRequest, tmp_path: Path, ref_release: Any) -> tuple[Path, Path, Loader]:
    """(data path, images folder, load) of one benchmark's release written for the test."""
    folder = tmp_path / "data"
    name = request.param
    if name == "ref_adv_s":
        return _ref_adv(folder, ref_release[1])
    return {"mc_bench": _mc_bench, "mm_niah": _mm_niah, "refcoco": _refcoco}[name](folder)


def _first_image(images: Path) -> Path:
    return sorted(p for p in images.rglob("*") if p.is_file())[0]


def test_a_link_out_of_the_images_folder_is_refused_by_every_loader(release: tuple[Path, Path, Loader], tmp_path: Path) -> None:
    data, images, load = release
    assert load(data)  # as written: read
    secret = tmp_path / "elsewhere" / "secret.jpg"
    secret.parent.mkdir()
    image = _first_image(images)
    shutil.copy(image, secret)
    image.unlink()
    image.symlink_to(secret)
    try:
        loaded = load(data)
    except DataError as refused:
        messages = [str(refused)]
    else:  # MM-NIAH skips (and counts) the documents whose images cannot be sent, as for a path with ".."
        messages = [reason for _, reason in loaded.skipped]
        assert len(messages) >= 1 and all(image.name in m for m in messages)
    for message in messages:
        assert "is a link that leads out of the images folder" in message and str(secret.resolve()) in message
        assert "\n" not in message


def test_an_images_folder_reached_through_a_link_is_read(release: tuple[Path, Path, Loader], tmp_path: Path) -> None:
    """The images on another disk, the folder linked into the release: every file resolves inside
    the folder the loader was given (resolved), so the data loads as before."""
    data, images, load = release
    before = len(load(data))
    moved = tmp_path / "other-disk" / images.name
    moved.parent.mkdir()
    shutil.move(images, moved)
    images.symlink_to(moved, target_is_directory=True)
    assert len(load(data)) == before


def test_a_hugging_face_cache_snapshot_is_read_and_a_link_out_of_it_is_not(tmp_path: Path) -> None:
    """The hub cache keeps a snapshot's files as links into the repository's blobs/: inside the
    rule; a link from the snapshot to anywhere else is not."""
    repo = tmp_path / "hub" / "datasets--org--set"
    blob = repo / "blobs" / "0a1b2c"
    blob.parent.mkdir(parents=True)
    blob.write_bytes(b"\xff\xd8\xff")
    images = repo / "snapshots" / "f00d" / "images"
    images.mkdir(parents=True)
    (images / "a.jpg").symlink_to(os.path.relpath(blob, images))
    assert safe_path(images, "a.jpg") == images / "a.jpg"
    outside = tmp_path / "outside.jpg"
    outside.write_bytes(b"\xff\xd8\xff")
    (images / "b.jpg").symlink_to(outside)
    with pytest.raises(DataError, match="is a link that leads out of the images folder"):
        safe_path(images, "b.jpg")
    assert not lies_inside(images, Path("b.jpg")) and lies_inside(images, Path("a.jpg"))
    # outside a snapshot, a link into a folder named blobs is no exception
    plain = tmp_path / "plain"
    (plain / "blobs").mkdir(parents=True)
    (plain / "blobs" / "c.jpg").write_bytes(b"\xff\xd8\xff")
    (plain / "images").mkdir()
    (plain / "images" / "c.jpg").symlink_to(plain / "blobs" / "c.jpg")
    assert not lies_inside(plain / "images", Path("c.jpg"))


def test_the_lexical_rule_still_comes_first(tmp_path: Path) -> None:
    for bad in ("../x.jpg", "/etc/passwd", "C:\\x.jpg", ""):
        with pytest.raises(DataError, match="must be relative to the images folder"):
            safe_path(tmp_path, bad)
    missing = safe_path(tmp_path, "not/yet/there.jpg")  # a missing file is the request's input error, later
    assert missing == tmp_path / "not" / "yet" / "there.jpg"


def test_the_lexical_rule_read_from_the_text_is_pathlibs(tmp_path: Path) -> None:
    """`stays_inside` reads the text itself (pathlib's parsing was most of a load's time); it
    agrees with pathlib's reading (no POSIX root, no Windows drive, no `..` part) on every string
    of up to five characters over the letters that matter, and `safe_path` returns the path that
    `root / PurePosixPath(...)` names. Stricter on purpose: `:` as the second character is a drive
    whatever the first (Python 3.12's reading of `1:x`; 3.11's pathlib wants a letter)."""

    def by_pathlib(text: str) -> bool:
        posix = PurePosixPath(text.replace("\\", "/"))
        return bool(text.strip()) and not posix.is_absolute() and not PureWindowsPath(text).drive and ".." not in posix.parts

    checked = 0
    for n in range(6):
        for chars in itertools.product("a.:/\\ ", repeat=n):
            text = "".join(chars)
            if text[1:2] == ":":  # the one difference, stricter here
                assert not stays_inside(text), text
                continue
            assert stays_inside(text) == by_pathlib(text), text
            checked += 1
    assert checked > 5000
    for spelled in ("a.jpg", "doc/a.jpg", "doc//a.jpg", "./doc/./a.jpg", "doc\\a.jpg", "doc/a.jpg/", " a .jpg"):
        assert safe_path(tmp_path, spelled) == tmp_path / PurePosixPath(spelled.replace("\\", "/")), spelled
    for bad in ("a/../../b.jpg", "a\\..\\b.jpg", "\\\\server\\share\\x.jpg", "1:x.jpg", " "):
        assert not stays_inside(bad), bad


def test_an_absolute_path_through_a_link_and_dotdot_is_refused(tmp_path: Path) -> None:
    """`data/L/../../x.jpg` with L a link to `data/deep/a/b`: resolved (links first, as the check
    did) it names `data/deep/x.jpg`, inside; the lexical `normpath` that was returned and read
    names the `x.jpg` beside the data folder. RefCOCO's JSONL takes absolute image paths inside
    the folder (a download script's); this one is refused."""
    data, _, load = _refcoco(tmp_path / "data")
    (data / "deep" / "a" / "b").mkdir(parents=True)
    (data / "L").symlink_to(data / "deep" / "a" / "b", target_is_directory=True)
    secret = tmp_path / "secret.jpg"
    shutil.copy(_first_image(data / "images"), secret)
    tricky = f"{data}/L/../../secret.jpg"
    assert os.path.realpath(tricky) == str((data / "deep" / "secret.jpg").resolve())  # what the check saw: inside
    assert os.path.normpath(tricky) == str(secret)  # what was read: outside
    assert lies_inside(data, Path(f"{data}/deep/../images")) and safe_path(data, f"{data}/L/x.jpg", absolute=True)
    with pytest.raises(DataError, match="lies outside the images folder"):
        safe_path(data, tricky, absolute=True)
    files = sorted(data.glob("*.jsonl"))
    lines = files[0].read_text().splitlines()
    row = json.loads(lines[0])
    row["image"] = tricky
    files[0].write_text("\n".join([json.dumps(row), *lines[1:]]) + "\n")
    with pytest.raises(DataError, match="lies outside the images folder") as refused:
        load(data)
    assert "\n" not in str(refused.value)

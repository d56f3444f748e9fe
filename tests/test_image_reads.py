"""Each image is read once a sample (issue 45 item 1): the record's description of an image (its
path, digest or file identity, size as sent) is taken from what the request read of it, not from
a second read and hash of the file. An image file is named by its size and modification time
(with --local-images the request reads only a JPEG's header; as base64 it reads the file once and
hashes none of it), bytes that are no file of their own (a parquet row) by their sha256.

The reads are counted where every image file is opened (`core.images`' `os.open`), in a real run
against the simulated server."""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers import demo_config, small_niah
from PIL import Image

import needlepoint.core.images as images_module
from needlepoint.core.conversation import ImageRef
from needlepoint.demo import builder
from needlepoint.models.openai_compat import LOCAL_IMAGES_PROBE
from needlepoint.models.simulated import SimulatedServer
from needlepoint.run.evaluate import evaluate

Sets = tuple[Path, dict[str, Any], dict[str, list[Any]]]


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> Sets:
    """MM-NIAH's demo documents (6 a task; more than two images each: read in a worker thread) and
    MC-Bench's demo pairs (two images a sample: read on the event loop), with the model's script."""
    root = tmp_path_factory.mktemp("image_reads")
    plans: dict[str, Any] = {}
    script: dict[str, list[Any]] = {}
    for name in ("mm_niah", "mc_bench"):
        data, options, answers = (small_niah if name == "mm_niah" else builder(name))(root / name)
        plans[name] = (data, options)
        script.update(answers)
    script[LOCAL_IMAGES_PROBE] = ["shapes"]
    return root, plans, script


def _counted_opens(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """Opens of files by needlepoint.core.images (every reader of image files), by real path."""
    opens: Counter[str] = Counter()
    real_open = os.open

    def counting(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        opens[os.path.realpath(path)] += 1
        return real_open(path, flags, *args, **kwargs)

    proxy = SimpleNamespace(**{k: getattr(os, k) for k in dir(os) if not k.startswith("__")})
    proxy.open = counting
    monkeypatch.setattr(images_module, "os", proxy)
    return opens


def _images_sent(run_dir: Path) -> list[dict[str, Any]]:
    """Every image part of every turn's `sent` messages in the run's records."""
    out = []
    for line in (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines():
        for turn in json.loads(line).get("turns") or []:
            out += [p for m in turn.get("sent") or [] for p in m["content"] if p["type"] == "image"]
    return out


def _file_of(folder: Path, key: str) -> Path:
    """The image file a record's path names, under the release `folder`."""
    found = [p for p in folder.rglob("*") if p.is_file() and p.as_posix().endswith("/" + key)]
    assert len(found) == 1, (key, found)
    return found[0]


@pytest.mark.parametrize("local", [False, True], ids=["base64", "local-images"])
@pytest.mark.parametrize("name", ["mm_niah", "mc_bench"])
def test_each_image_is_read_once_a_sample_and_described_from_that_read(
    sets: Sets, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, local: bool
) -> None:
    root, plans, script = sets
    folder = plans[name][0]
    opens = _counted_opens(monkeypatch)
    with SimulatedServer(script=script, default=None, local_media=root) as server:
        result = evaluate(demo_config(plans, server, name, tmp_path / "run", report=False, local_images=local))
    assert result.failed == []
    sent = _images_sent(result.run_dir)
    uses = Counter(os.path.realpath(_file_of(folder, p["path"])) for p in sent)
    assert uses and set(opens) - {os.path.realpath(folder)} >= set(uses) - set(opens) == set()
    once = [path for path, k in uses.items() if k == 1]
    assert len(once) >= 4  # images sent once: each read once (the record's description read each again)
    probe = 2 if local else 0  # --local-images reads one image's header twice more before the run: the server check
    assert sum(opens[path] for path in once) <= len(once) + probe
    assert all(opens[path] <= k + probe for path, k in uses.items())  # repeats may come from the client's cache
    for part in sent:
        path = _file_of(folder, part["path"])
        stored = path.read_bytes()
        with Image.open(path) as im:
            assert (part["width"], part["height"]) == im.size
        assert part["bytes"] == len(stored)  # RGB JPEGs, sent as they are stored
        # by URL or as base64, a file is named by its size and modification time, never hashed
        assert "sha256" not in part and (part["file_bytes"], part["mtime_ns"]) == (len(stored), path.stat().st_mtime_ns)


def test_a_record_waits_for_the_requests_read_and_reads_itself_when_that_read_failed(tmp_path: Path) -> None:
    """A record whose images a request is still reading (in a worker thread) takes that read's
    descriptions once it ends; where the read ended without one (it failed), the record reads the
    image itself. Either way it never waits on a read of another event loop."""
    import asyncio

    from needlepoint.core.conversation import Conversation, Message
    from needlepoint.core.errors import DataError
    from needlepoint.core.images import NOTED, facts_key
    from needlepoint.solvers.sent import forget_described, sent_messages

    path = tmp_path / "a.jpg"
    Image.new("RGB", (30, 20), (1, 2, 3)).save(path, quality=90)
    ref = ImageRef("a.jpg", path)
    conversation = Conversation([Message("user", ["look", ref, "here", ref, ref])])  # three: a document's path
    key = facts_key(ref, False)
    noted = {"type": "image", "path": "a.jpg", "sha256": "from-the-requests-read", "width": 30, "height": 20, "bytes": 1}

    def images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [p for m in messages for p in m["content"] if p["type"] == "image"]

    async def scenario() -> tuple[list[dict[str, Any]], list[dict[str, Any]], bool]:
        loop = asyncio.get_running_loop()
        forget_described()
        reading = loop.create_future()
        NOTED.expect([key], reading)
        record = asyncio.ensure_future(sent_messages(conversation))
        for _ in range(20):
            await asyncio.sleep(0)
        waited = not record.done()  # the read is under way: the record waits for it
        NOTED.note(key, noted)
        reading.set_result(None)
        first = await record
        forget_described()
        failing = loop.create_future()
        NOTED.expect([key], failing)
        record = asyncio.ensure_future(sent_messages(conversation))
        await asyncio.sleep(0)
        failing.set_exception(DataError("the request's read failed"))
        second = await record
        assert isinstance(failing.exception(), DataError)
        return first, second, waited

    first, second, waited = asyncio.run(scenario())
    own = (path.stat().st_size, path.stat().st_mtime_ns)  # what the record's own read names the file by
    assert waited and [p["sha256"] for p in images(first)] == ["from-the-requests-read"] * 3
    assert [(p["file_bytes"], p["mtime_ns"]) for p in images(second)] == [own] * 3

    async def other_loop() -> list[dict[str, Any]]:  # a future left by an earlier loop is not waited on
        return await sent_messages(conversation)

    forget_described()
    earlier = asyncio.new_event_loop()
    stale: asyncio.Future[Any] = earlier.create_future()
    earlier.close()
    NOTED.expect([key], stale)
    assert [(p["file_bytes"], p["mtime_ns"]) for p in images(asyncio.run(other_loop()))] == [own] * 3


def test_a_file_is_named_by_its_size_and_time_and_loaded_bytes_by_their_digest(tmp_path: Path) -> None:
    """The record's two ways of naming an image: a file by the status of the descriptor it was read
    from (no digest of its bytes), bytes loaded otherwise (a parquet row) by their sha256."""
    path = tmp_path / "a.jpg"
    Image.new("RGB", (30, 20), "red").save(path, "JPEG")
    stored = path.read_bytes()
    ref = ImageRef(key="a.jpg", path=path)
    data, st = images_module.read_small_image_status(ref)
    assert data == stored and st is not None
    facts = images_module.stored_facts(ref, data, data, st=st)
    assert facts == {
        "type": "image",
        "path": "a.jpg",
        "width": 30,
        "height": 20,
        "bytes": len(stored),
        "file_bytes": len(stored),
        "mtime_ns": path.stat().st_mtime_ns,
    }
    row = ImageRef(key="row-7", loader=lambda: stored)
    assert images_module.read_small_image_status(row) == (stored, None)
    loaded = images_module.stored_facts(row, stored, stored)
    assert loaded["sha256"] == hashlib.sha256(stored).hexdigest() and "mtime_ns" not in loaded and "file_bytes" not in loaded

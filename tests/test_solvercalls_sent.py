"""What the model saw: every turn of a record keeps the messages as sent (text verbatim; each image
by its path, its file's size and modification time and the width, height and bytes it was sent
at, never the bytes), checked against the request bodies a real local server received; each
image is described once per run, however often it is sent."""

from __future__ import annotations

import base64
import io
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from helpers import ref_run_config, write_jsonl_release
from PIL import Image

import needlepoint.models.openai_compat as oc_module
from needlepoint.core.images import encode_jpeg
from needlepoint.core.store import read_records
from needlepoint.run.evaluate import evaluate
from needlepoint.solvers import sent as sent_module


def _as_received(body: dict[str, Any]) -> list[dict[str, Any]]:
    """A request body's messages in the `sent` shape, images by what arrived (size and bytes)."""
    out = []
    for m in body["messages"]:
        if isinstance(m["content"], str):
            out.append({"role": m["role"], "content": [{"type": "text", "text": m["content"]}]})
            continue
        content = []
        for p in m["content"]:
            if p["type"] == "text":
                content.append({"type": "text", "text": p["text"]})
            else:
                data = base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
                width, height = Image.open(io.BytesIO(data)).size
                content.append({"type": "image", "width": width, "height": height, "bytes": len(data)})
        out.append({"role": m["role"], "content": content})
    return out


def _without_source(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            **m,
            "content": [
                {k: v for k, v in p.items() if k not in ("path", "sha256", "file_bytes", "mtime_ns")} for p in m["content"]
            ],
        }
        for m in messages
    ]


def test_turns_record_the_messages_as_sent(serve: Any, ref_release: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, rows = ref_release
    folder = write_jsonl_release(tmp_path / "release", rows, fmt="PNG")  # PNG: transcoded to JPEG when sent
    encoded: list[str] = []
    real = encode_jpeg  # what solvers/sent.py encodes with, patched below

    def counting(ref: Any, *args: Any) -> bytes:
        encoded.append(ref.key)
        return real(ref, *args)

    monkeypatch.setattr(sent_module, "encode_jpeg", counting)
    monkeypatch.setattr(oc_module, "encode_jpeg", counting)
    monkeypatch.setattr(sent_module, "_cache", OrderedDict())
    server = serve(default="I see no box here.")  # a parse error: the repair turn sends the image again
    out = tmp_path / "run"
    config = ref_run_config(
        folder / "data.jsonl", [server.url], out, limit=3, options={"box_format": "abs_xyxy", "max_image_side": 64}
    )
    evaluate(config)
    records = read_records(out / "records.jsonl")
    received = [_as_received(body) for _, body in server.requests]
    turns = [t for r in records.values() for t in r["turns"]]
    assert len(turns) == 6 and len(received) == 6  # three samples, each with its repair turn
    for rec in records.values():
        for turn in rec["turns"]:
            sent = turn["sent"]
            assert _without_source(sent) in received  # text verbatim, images at the size and bytes that arrived
            images = [p for m in sent for p in m["content"] if p["type"] == "image"]
            assert len(images) == 1
            (image,) = images
            stored = folder / "images" / image["path"]
            assert (image["file_bytes"], image["mtime_ns"]) == (stored.stat().st_size, stored.stat().st_mtime_ns)
            assert "sha256" not in image and "data" not in image and image["bytes"] != image["file_bytes"]  # downscaled
            assert max(image["width"], image["height"]) == 64  # downscaled to --max-image-side
        assert rec["turns"][1]["sent"][1] == {"role": "assistant", "content": [{"type": "text", "text": "I see no box here."}]}
    paths = {p["path"] for t in turns for m in t["sent"] for p in m["content"] if p["type"] == "image"}
    # encoded for the request and its repair turn; the record describes them from those reads, adding none
    assert len(paths) == 3 and sorted(encoded) == sorted([*paths, *paths])


def test_an_image_rewritten_between_two_runs_of_one_process_is_described_afresh(
    serve: Any, ref_release: Any, tmp_path: Path
) -> None:
    """Within a run each image is described once (its file taken to stay as it is); the next run
    in the same process reads the files again, so a rewritten image gets its new digest and size."""
    _, rows = ref_release
    folder = write_jsonl_release(tmp_path / "release", rows[:1])
    server = serve(default='{"bbox_2d": [0, 0, 4, 4]}')

    def image_of(out: Path) -> dict[str, Any]:
        config = ref_run_config(folder / "data.jsonl", [server.url], out, limit=1, options={"box_format": "abs_xyxy"})
        evaluate(config)
        (record,) = read_records(out / "records.jsonl").values()
        image: dict[str, Any]
        (image,) = [p for m in record["turns"][0]["sent"] for p in m["content"] if p["type"] == "image"]
        return image

    first = image_of(tmp_path / "first")
    path = folder / "images" / first["path"]
    with Image.open(path) as im:
        im.resize((im.width // 2, im.height // 2)).save(path, "JPEG", quality=80)
    second = image_of(tmp_path / "second")
    assert (first["file_bytes"], first["mtime_ns"]) != (second["file_bytes"], second["mtime_ns"])
    assert (second["file_bytes"], second["mtime_ns"]) == (path.stat().st_size, path.stat().st_mtime_ns)
    assert (second["width"], second["height"]) == Image.open(path).size != (first["width"], first["height"])


def test_image_descriptions_leave_the_event_loops_executor_free(
    ref_release: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record's image descriptions run in threads of their own: with more of them held back than
    the loop's default executor has threads, work given to that executor (a request's images read
    and encoded: `OpenAICompatModel._encode_images`) still runs at once. When descriptions shared
    it, held ones took all of its threads and a request waited behind them (a run's first long
    documents waited behind the hashing of the others' images)."""
    import asyncio
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from needlepoint.core.conversation import Conversation, ImageRef, Message

    _, rows = ref_release
    folder = write_jsonl_release(tmp_path / "release", rows[:6], fmt="PNG")
    paths = sorted((folder / "images").iterdir())
    refs = [ImageRef(key=p.name, path=p) for p in paths]
    released = threading.Event()
    real = sent_module.describe_image

    def held(*args: Any) -> Any:
        released.wait(30)
        return real(*args)

    monkeypatch.setattr(sent_module, "describe_image", held)
    monkeypatch.setattr(sent_module, "_cache", OrderedDict())

    async def scenario() -> tuple[bool, list[list[dict[str, Any]]]]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(2))  # fewer threads than descriptions held
        describing = [
            asyncio.ensure_future(sent_module.sent_messages(Conversation([Message("user", [r, "box it"])]))) for r in refs
        ]
        await asyncio.sleep(0.2)  # every description has been handed to its threads and is held
        try:
            await asyncio.wait_for(loop.run_in_executor(None, lambda: None), 5)
            free = True
        except asyncio.TimeoutError:
            free = False
        released.set()
        return free, await asyncio.gather(*describing)

    try:
        free, described = asyncio.run(scenario())
    finally:
        released.set()
    assert free  # the loop's executor ran its work while six descriptions were held
    images = [p for messages in described for m in messages for p in m["content"] if p["type"] == "image"]
    assert [p["path"] for p in images] == [path.name for path in paths]
    assert [(p["file_bytes"], p["mtime_ns"]) for p in images] == [(q.stat().st_size, q.stat().st_mtime_ns) for q in paths]

"""`--local-images`: image files go to a server on this machine as file:// URLs, never their bytes.

A file goes by its URL only where the client would send its stored bytes as they are (an RGB JPEG
within the size asked for), so the server decodes the same bytes; anything else still goes as
base64. The simulated server reads file URLs as vLLM does under --allowed-local-media-path, and
refuses them, in vLLM's words, without it.
"""

from __future__ import annotations

import base64
import io
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from helpers import demo_config, one_sentence, run_quiet, small_niah
from helpers.agentic import FMT, LOCALIZER, REASONER, agentic_args, scripts
from PIL import Image

from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.core.config import RunConfig, hash_identity, identity
from needlepoint.core.conversation import Conversation, Generation, ImageRef, Message
from needlepoint.core.drawing import render
from needlepoint.core.errors import DataError
from needlepoint.core.images import FIRST_HEADER_BYTES, HEADER_BYTES, base64_jpeg, encode_jpeg, file_url, file_url_facts
from needlepoint.demo import builder
from needlepoint.models.openai_compat import LOCAL_IMAGES_PROBE, OpenAICompatModel, request_body
from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
from needlepoint.run.evaluate import evaluate, image_folder
from needlepoint.serve.command import ServeSpec, server_command

Sets = tuple[Path, dict[str, Any], dict[str, list[Any]]]  # the folder, each set's (data, options), the script


def _jpeg(path: Path, size: tuple[int, int] = (64, 48), mode: str = "RGB", extra: int = 0) -> Path:
    """A JPEG file; `extra`: bytes of APP segments (EXIF-like) between SOI and the frame header."""
    buf = io.BytesIO()
    Image.new(mode, size, 90).save(buf, "JPEG", quality=90)
    data = buf.getvalue()
    segments = b""
    while extra > 0:
        n = min(extra, 60000)
        segments += b"\xff\xe1" + (n + 2).to_bytes(2, "big") + bytes(n)
        extra -= n
    path.write_bytes(data[:2] + segments + data[2:])
    return path


def test_a_file_url_is_the_paths_uri(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file URL is Path.as_uri()'s, odd names and folders included, and a relative path's follows
    the working folder it is read from."""
    for folder in ("plain", "a 100% ünï", "x#y"):
        (tmp_path / folder / "rel").mkdir(parents=True)
        for name in ("p.jpg", "b c%20.jpg", "é#1.jpg"):
            path = _jpeg(tmp_path / folder / name)
            assert file_url(ImageRef(name, path)) == path.as_uri().encode()
    for here in ("plain", "x#y"):
        monkeypatch.chdir(tmp_path / here)
        relative = Path("rel") / "r 1.jpg"
        _jpeg(relative)
        assert file_url(ImageRef("r", relative)) == (tmp_path / here / relative).as_uri().encode()


def test_a_file_url_only_for_a_jpeg_sent_as_it_is(tmp_path: Path) -> None:
    rgb = _jpeg(tmp_path / "a b#1.jpg")
    url = file_url(ImageRef("a b#1.jpg", rgb))
    assert url is not None and url.startswith(b"file:///")
    assert Path(os.path.abspath(rgb)).as_uri().encode() == url  # absolute, the space and '#' quoted
    assert b" " not in url and b"#" not in url
    # What the client transcodes (or reads from elsewhere) goes as base64: no URL.
    assert file_url(ImageRef("a", rgb, max_side=32)) is None  # to be downscaled
    assert file_url(ImageRef("a", rgb, max_side=64)) is not None
    assert file_url(ImageRef("a", rgb), reencode=True) is None
    assert file_url(ImageRef("g", _jpeg(tmp_path / "g.jpg", mode="L"))) is None  # grey: converted to RGB
    png = tmp_path / "p.png"
    png.write_bytes(render(40, 30, [((2, 2, 20, 20), "red", "square")], fmt="PNG"))
    assert file_url(ImageRef("p", png)) is None
    assert file_url(ImageRef("row", loader=lambda: rgb.read_bytes())) is None  # a parquet row
    # A frame header past what is read: base64, decided by the full rule then.
    late = _jpeg(tmp_path / "late.jpg", extra=HEADER_BYTES)
    assert Image.open(late).format == "JPEG"
    assert file_url(ImageRef("late", late)) is None
    assert file_url(ImageRef("early", _jpeg(tmp_path / "early.jpg", extra=1000))) is not None
    # A frame header past the first read, within HEADER_BYTES: found by the second.
    assert file_url(ImageRef("mid", _jpeg(tmp_path / "mid.jpg", extra=FIRST_HEADER_BYTES + 5000))) is not None
    assert file_url(ImageRef("mid", _jpeg(tmp_path / "mid-grey.jpg", mode="L", extra=FIRST_HEADER_BYTES))) is None


def test_a_document_s_file_urls_are_decided_on_the_loop_from_one_header_read_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under --local-images a document's JPEG headers are read on the event loop, one read each,
    and what cannot go by its URL (a PNG) is read once and transcoded in a worker thread; the
    request keeps the document's order, and each image's record description comes from that
    one read."""
    import asyncio
    import threading

    import needlepoint.models.openai_compat as oc
    from needlepoint.core.images import NOTED, facts_key

    refs = [ImageRef(f"{k}.jpg", _jpeg(tmp_path / f"{k}.jpg", size=(40 + k, 30))) for k in range(6)]
    png = tmp_path / "p.png"
    png.write_bytes(render(40, 30, [((2, 2, 20, 20), "red", "square")], fmt="PNG"))
    refs.insert(3, ImageRef("p.png", png))
    headers: list[int] = []
    transcoders: list[int] = []
    real_header, real_encode = file_url_facts, encode_jpeg

    def header(ref: ImageRef, reencode: bool = False) -> Any:
        headers.append(threading.get_ident())
        return real_header(ref, reencode)

    def transcode(ref: ImageRef, reencode: bool = False, data: bytes | None = None) -> bytes:
        transcoders.append(threading.get_ident())
        return real_encode(ref, reencode, data)

    monkeypatch.setattr(oc, "file_url_facts", header)
    monkeypatch.setattr(oc, "encode_jpeg", transcode)

    async def encode() -> tuple[list[bytes], int]:
        model = OpenAICompatModel("m", ["http://127.0.0.1:9/v1"], local_images=True)
        try:
            return await model._encode_images(Conversation([Message("user", ["look", *refs])])), threading.get_ident()
        finally:
            await model.aclose()

    NOTED.clear()
    sent, loop_thread = asyncio.run(encode())
    assert headers == [loop_thread] * 7 and len(transcoders) == 1 and transcoders[0] != loop_thread
    assert sent[3] == base64_jpeg(refs[3]) and [u for k, u in enumerate(sent) if k != 3] == [
        file_url(r) for k, r in enumerate(refs) if k != 3
    ]
    described = NOTED.lookup([facts_key(r, False) for r in refs])
    assert [d["path"] if isinstance(d, dict) else d for d in described] == [r.key for r in refs]


def test_a_file_url_is_decided_once_per_image(tmp_path: Path) -> None:
    """The client reads an image's header for its URL once: the URL (a hundred bytes) is kept from
    its first use, where base64 waits for the second (a data set of distinct images holds none)."""
    jpeg = _jpeg(tmp_path / "a.jpg")
    client = OpenAICompatModel("m", ["http://127.0.0.1:9/v1"], local_images=True)
    url, _, _ = client._ready(ImageRef("a.jpg", jpeg))
    assert url == file_url(ImageRef("a.jpg", jpeg))
    jpeg.write_bytes(b"not an image any more")  # not read again: the URL comes from the cache
    assert client._ready(ImageRef("a.jpg", jpeg)) == (url, None, None)
    base64_client = OpenAICompatModel("m", ["http://127.0.0.1:9/v1"])
    other = _jpeg(tmp_path / "b.jpg")
    first, _, _ = base64_client._ready(ImageRef("b.jpg", other))
    _jpeg(other, size=(32, 24))  # base64 is not kept from a first use: the file is read again
    again, stored, st = base64_client._ready(ImageRef("b.jpg", other))
    assert stored == other.read_bytes() and again == base64.b64encode(stored) != first
    assert st is not None and st.st_size == len(stored)  # the status the record names the file by


def test_a_body_holds_file_urls_and_data_urls_side_by_side(tmp_path: Path) -> None:
    jpg = _jpeg(tmp_path / "a.jpg")
    png = tmp_path / "b.png"
    png.write_bytes(render(40, 30, [((2, 2, 20, 20), "red", "square")], fmt="PNG"))
    refs = [ImageRef("a", jpg), ImageRef("b", png)]
    conversation = Conversation([Message("user", ["look", refs[0], "and", refs[1]])])
    url = file_url(refs[0])
    assert url is not None
    body = json.loads(request_body("m", conversation, Generation(max_tokens=3), [url, base64_jpeg(refs[1])]))
    (message,) = body["messages"]
    sent = [p["image_url"]["url"] for p in message["content"] if p["type"] == "image_url"]
    assert sent == [url.decode(), "data:image/jpeg;base64," + base64_jpeg(refs[1]).decode()]
    assert [p["text"] for p in message["content"] if p["type"] == "text"] == ["look", "and"]


@pytest.fixture(scope="module")
def sets(tmp_path_factory: pytest.TempPathFactory) -> Sets:
    """MC-Bench's demo set (its images as JPEG files) and MM-NIAH's (6 documents a task), with the
    simulated model's script, under one folder."""
    root = tmp_path_factory.mktemp("local_images")
    plans: dict[str, Any] = {}
    script: dict[str, list[Any]] = {}
    for name in ("mc_bench", "mm_niah"):
        data, options, answers = (small_niah if name == "mm_niah" else builder(name))(root / name)
        plans[name] = (data, options)
        script.update(answers)
    script[LOCAL_IMAGES_PROBE] = ["shapes"]  # the check's request, before a run
    return root, plans, script


def _image_urls(bodies: list[Any]) -> list[str]:
    return [p["image_url"]["url"] for b in bodies for m in b["messages"] if isinstance(m["content"], list) for p in m["content"] if p["type"] == "image_url"]  # fmt: skip


@pytest.mark.parametrize("name", ["mc_bench", "mm_niah"])
def test_a_run_with_local_images_sends_urls_and_scores_as_one_with_base64(sets: Sets, tmp_path: Path, name: str) -> None:
    root, plans, script = sets
    with SimulatedServer(script=script, default=None, local_media=root, keep_requests=True) as server:
        base = evaluate(demo_config(plans, server, name, tmp_path / "base64", report=False))
        sent_b64 = server.bodies()
        server.requests.clear()
        local = evaluate(demo_config(plans, server, name, tmp_path / "local", report=False, local_images=True))
        probe, *sent_local = server.bodies()
    assert probe["max_tokens"] == 1 and probe["messages"][0]["content"][1]["text"] == LOCAL_IMAGES_PROBE
    b64_urls, local_urls = _image_urls(sent_b64), _image_urls(sent_local)
    assert b64_urls and all(u.startswith("data:image/jpeg;base64,") for u in b64_urls)
    assert len(local_urls) == len(b64_urls) and all(u.startswith("file:///") for u in local_urls)
    assert all(Path(u.removeprefix("file://")).resolve().is_relative_to(root.resolve()) for u in local_urls)
    # The same answers (the server keys them by the images' bytes), scores and metrics.
    assert local.failed == base.failed == []
    strip = ("run", "usage")
    assert {k: v for k, v in local.metrics.items() if k not in strip} == {k: v for k, v in base.metrics.items() if k not in strip}
    records = {
        p: [json.loads(line) for line in (p / "records.jsonl").read_text().splitlines()] for p in (base.run_dir, local.run_dir)
    }
    by_id = [{r["id"]: (r["answer"], r["scores"], r["request"]) for r in records[p]} for p in (base.run_dir, local.run_dir)]
    assert by_id[0] == by_id[1]  # the records name the same images, by path and digest
    small = sum(r["turns"][0]["request_bytes"] for r in records[local.run_dir])
    assert small < sum(r["turns"][0]["request_bytes"] for r in records[base.run_dir]) / 2
    # Not part of the run's identity (the model sees the same bytes); recorded in run.json.
    headers = [json.loads((p / "run.json").read_text()) for p in (base.run_dir, local.run_dir)]
    assert headers[0]["hash"] == headers[1]["hash"] and headers[0]["identity"] == headers[1]["identity"]
    assert headers[1]["config"]["local_images"] is True and "local_images" not in headers[0]["config"]


def test_the_identity_does_not_hold_local_images(tmp_path: Path) -> None:
    configs = [RunConfig("ref_adv_s", tmp_path, "m", ["http://x/v1"], local_images=flag) for flag in (False, True)]
    idents = [identity(c, {}, Generation(), "fp") for c in configs]
    assert hash_identity(idents[0]) == hash_identity(idents[1])
    assert "local_images" not in configs[0].public() and configs[1].public()["local_images"] is True


def test_a_server_that_reads_no_files_is_named_before_a_run_folder_exists(sets: Sets, tmp_path: Path) -> None:
    root, plans, script = sets
    data, options = plans["mc_bench"]
    out = tmp_path / "run"
    args = ["eval", "mc_bench", "--data", str(data), "--model", SIMULATED_MODEL_NAME, "--out", str(out), "--no-progress"]
    args += ["--box-format", options["box_format"], "--input-mode", options["input_mode"], "--local-images"]
    with SimulatedServer(script=script, default=None, keep_requests=True) as server:  # no local_media: vLLM's refusal
        rc, err = run_quiet([*args, "--api-url", server.url])
        (probe,) = server.bodies()  # the check's one request, nothing else
        assert probe["messages"][0]["content"][1]["text"] == LOCAL_IMAGES_PROBE
    line = one_sentence(err)
    assert rc == 2 and "did not answer a request with an image given by its file:// URL (HTTP 500" in line, line
    assert "Cannot load local files without `--allowed-local-media-path`" in line
    assert f"reads the files under {os.path.realpath(data / 'mc-bench_images' / 'demo')} when allowed" in line
    assert "--allowed-local-media-path" in line and "drop --local-images" in line
    assert not out.exists()
    with SimulatedServer(script=script, default=None, local_media=tmp_path / "elsewhere") as server:
        (tmp_path / "elsewhere").mkdir()
        rc, err = run_quiet([*args, "--api-url", server.url])
    assert rc == 2 and "must be a subpath of" in one_sentence(err)
    with SimulatedServer(script=script, default=None, failing=True, local_media=root) as server:  # a 503: not files
        rc, err = run_quiet([*args, "--api-url", server.url])
    line = one_sentence(err)
    assert rc == 2 and "(HTTP 503: simulated 503: the server is failing); run again once it answers" in line, line
    # Merged pairs are canvases made here: nothing goes by URL, so nothing is probed.
    with SimulatedServer(script=script, default='{"bboxes": []}') as server:
        merged = [a if a != "sequence" else "merged" for a in args]
        rc, err = run_quiet([*merged, "--api-url", server.url, "--limit", "1", "--no-report"])
        assert rc == 0, err
        assert all(key != LOCAL_IMAGES_PROBE for key, _ in server.log)


def test_local_images_with_a_batch_is_refused(tmp_path: Path) -> None:
    rc, err = run_quiet(["eval", "ref_adv_s", "--data", str(tmp_path), "--model", "m", "--api-url", "http://127.0.0.1:9/v1", "--local-images", "--batch"])  # fmt: skip
    assert rc == 2 and "--local-images sends file:// URLs" in one_sentence(err)


def test_serve_vllm_lets_the_chat_server_read_the_images_folder(tmp_path: Path) -> None:
    chat = ServeSpec("model", "vllm", "org/model")
    command = server_command(chat, ["vllm", "serve"], 8000, local_media=tmp_path)
    assert command[command.index("--allowed-local-media-path") + 1] == str(tmp_path)
    assert "--allowed-local-media-path" not in server_command(chat, ["vllm", "serve"], 8000)
    given = ServeSpec("model", "vllm", "org/model", args=("--allowed-local-media-path", "/srv"))
    assert server_command(given, ["vllm", "serve"], 8000, local_media=tmp_path).count("--allowed-local-media-path") == 1
    embedder = ServeSpec("embed", "vllm", "org/embed", pooling=True)
    assert "--allowed-local-media-path" not in server_command(embedder, ["vllm", "serve"], 8000, local_media=tmp_path)


def test_the_images_folder_is_where_the_files_are_links_resolved(sets: Sets, tmp_path: Path) -> None:
    root, plans, _ = sets
    data, options = plans["mc_bench"]
    link = tmp_path / "link"
    link.symlink_to(data, target_is_directory=True)  # --data through a link: vLLM resolves the files' paths
    bench = McBench(**options)
    assert image_folder(bench, bench.load(link)) == Path(os.path.realpath(data / "mc-bench_images" / "demo"))
    niah_data, niah_options = plans["mm_niah"]
    niah = MmNiah(**niah_options)
    assert image_folder(niah, niah.load(niah_data)) == Path(os.path.realpath(niah_data / "mm_niah_val" / "images"))
    merged = McBench(**{**options, "input_mode": "merged"})  # canvases made here: no file to read
    assert image_folder(merged, merged.load(data)) is None


def _outside_tmp(tmp_path: Path) -> Path:
    """A new folder under a top-level folder other than tmp_path's (shared memory or /var/tmp)."""
    top = tmp_path.resolve().parts[1]
    for base in (Path("/dev/shm"), Path("/var/tmp")):
        if base.is_dir() and os.access(base, os.W_OK) and base.resolve().parts[1] != top:
            return Path(tempfile.mkdtemp(dir=base, prefix="needlepoint-test-"))
    raise AssertionError("neither /dev/shm nor /var/tmp is a writable folder apart from the temporary one")


def test_an_image_linked_from_another_tree_is_refused_when_loaded(sets: Sets, tmp_path: Path) -> None:
    """An image linked from another tree of the machine leaves the images folder: refused when the
    data is loaded, by every reader alike (core/images.py lies_inside), with or without
    --local-images, before a run folder exists; a server is never asked for it."""
    root, plans, script = sets
    data, options = plans["mc_bench"]
    copy = tmp_path / "mc_bench"
    shutil.copytree(data, copy)
    elsewhere = _outside_tmp(tmp_path)
    try:
        image = copy / "mc-bench_images" / "demo" / "pair000_1.jpg"
        shutil.move(image, elsewhere / image.name)
        image.symlink_to(elsewhere / image.name)
        with pytest.raises(DataError) as refused:
            McBench(**options).load(copy)
        assert "is a link that leads out of the images folder" in str(refused.value)
        assert str((elsewhere / image.name).resolve()) in str(refused.value)
        for extra in ([], ["--local-images"]):
            args = ["eval", "mc_bench", "--data", str(copy), "--model", SIMULATED_MODEL_NAME, "--out", str(tmp_path / "run")]
            args += ["--box-format", options["box_format"], "--input-mode", options["input_mode"], *extra]
            with SimulatedServer(script=script, default=None) as server:
                rc, err = run_quiet([*args, "--api-url", server.url, "--no-progress"])
            line = one_sentence(err)
            assert rc == 2 and "pair000_1.jpg" in line and "copy the file into the folder" in line, line
            assert not (tmp_path / "run").exists() and not server.requests
    finally:
        shutil.rmtree(elsewhere)


def test_a_request_carries_urls_and_base64_side_by_side(sets: Sets, tmp_path: Path) -> None:
    root, plans, _ = sets
    data, options = plans["mc_bench"]
    copy = tmp_path / "mc_bench"
    shutil.copytree(data, copy)
    second = copy / "mc-bench_images" / "demo" / "pair000_1.jpg"
    with Image.open(second) as im:  # a PNG under a .jpg name: converted here, so base64
        buf = io.BytesIO()
        im.save(buf, "PNG")
    second.write_bytes(buf.getvalue())
    with SimulatedServer(default='{"image_1": [], "image_2": []}', local_media=copy, keep_requests=True) as server:
        config = RunConfig("mc_bench", copy, SIMULATED_MODEL_NAME, [server.url], options=options, limit=1, out=tmp_path / "run")
        config.show_progress, config.report, config.local_images = False, False, True
        assert evaluate(config).failed == []
        _, body = server.bodies()
    first, other = _image_urls([body])
    assert first == (copy / "mc-bench_images" / "demo" / "pair000_0.jpg").absolute().as_uri()
    assert other.startswith("data:image/jpeg;base64,")


def test_the_localizer_is_checked_too(serve: Any, tmp_path: Path) -> None:
    """The agentic solver's `vlm:` localizer sends the same files by URL, and its server is checked
    as the --model one is: one that reads no files is named before a run folder exists."""
    folder, _ = write_release(tmp_path / "mc", pairs=2)
    bench = McBench(box_format=FMT)
    reasoner_script, localizer_script = scripts(bench, bench.load(folder))
    probe = {LOCAL_IMAGES_PROBE: ["shapes"]}
    reasoner = serve(script={**reasoner_script, **probe}, default=None, models=(REASONER,), local_media=folder)
    blind = serve(script={**localizer_script, **probe}, default=None, models=(LOCALIZER,))
    out = tmp_path / "run"
    rc, err = run_quiet(agentic_args(folder, reasoner.url, blind.url, out, "--local-images"))
    line = one_sentence(err)
    assert rc == 2 and line.startswith(f"needlepoint: error: {blind.url} did not answer") and "Cannot load local files" in line
    assert not out.exists()
    localizer = serve(script={**localizer_script, **probe}, default=None, models=(LOCALIZER,), local_media=folder)
    rc, err = run_quiet(agentic_args(folder, reasoner.url, localizer.url, out, "--local-images", "--no-report"))
    assert rc == 0, err
    probe_body, *phrases = localizer.bodies()
    urls = _image_urls(phrases)
    assert len(urls) == len(phrases) > 2 and all(u.startswith("file:///") for u in urls)

"""Each benchmark end to end through a real vLLM: release files made by needlepoint.demo ->
`needlepoint eval --limit` -> vLLM serving the tiny Qwen2.5-VL -> records, metrics, exports."""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.mc_bench import demo as mc_bench
from needlepoint.benchmarks.mm_niah import demo as mm_niah
from needlepoint.benchmarks.ref_adv import demo as ref_adv
from needlepoint.core.status import DONE

from .conftest import API_KEY, MODEL_NAME, Servers, needlepoint, read_records, vllm_counter

pytestmark = pytest.mark.vllm

LIMIT = 3


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, list[str]]]:
    """Each benchmark's demo release on disk, with the options its eval needs."""
    root = tmp_path_factory.mktemp("releases")
    ref = ref_adv.write_release(root / "ref_adv_s", ref_adv.make_rows(8))
    mc, _ = mc_bench.write_release(root / "mc_bench", pairs=6)
    niah = mm_niah.write_release(root / "mm_niah", per_task=2)
    return {
        "ref_adv_s": (ref, ["--box-format", "abs_xyxy", "--prompt-mode", "direct"]),
        "mc_bench": (mc, ["--box-format", "norm_1000_xyxy", "--input-mode", "sequence"]),
        "mm_niah": (niah, ["--split", "val", "--tasks", "retrieval-image,counting-text"]),
    }


# The authors' export each benchmark writes into the run folder.
EXPORTS = {
    "ref_adv_s": "predictions_ref_adv.jsonl",
    "mc_bench": "results_coco.json",
    "mm_niah": "leaderboard",
}


@pytest.mark.parametrize("benchmark", ["ref_adv_s", "mc_bench", "mm_niah"])
def test_eval_through_vllm(benchmark: str, releases: dict[str, tuple[Path, list[str]]], servers: Servers, tmp_path: Path) -> None:
    data, options = releases[benchmark]
    out = tmp_path / "run"
    server = servers.open
    before = vllm_counter(server, "vllm:request_success_total")
    proc = needlepoint(
        [
            "eval",
            benchmark,
            "--data",
            str(data),
            "--model",
            MODEL_NAME,
            "--api-url",
            server.url,
            "--limit",
            str(LIMIT),
            "--max-tokens",
            "24",
            "--temperature",
            "0",
            "--out",
            str(out),
            "--no-progress",
            *options,
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]

    records = read_records(out)
    assert len(records) == LIMIT, [r["id"] for r in records]
    assert len({r["id"] for r in records}) == LIMIT
    for rec in records:
        assert rec["status"] == DONE, rec
        first: dict[str, Any] = rec["turns"][0]
        assert first["error"] is None, first
        # A reply the model generated: tokens counted by vLLM, a finish reason, text on disk.
        assert first["usage"]["prompt_tokens"] > 0 and first["usage"]["completion_tokens"] > 0, first
        assert first["finish_reason"] in ("stop", "length"), first
        assert isinstance(first["reply"], str) and first["reply"], first
    turns = sum(len(r["turns"]) for r in records)
    assert vllm_counter(server, "vllm:request_success_total") - before == turns

    counts = json.loads((out / "metrics.json").read_text())["run"]
    assert (counts["answered"], counts["failed"]) == (LIMIT, 0), counts
    assert json.loads((out / "run.json").read_text())["status"] == "complete"
    # The authors' export, always written: MC-Bench's COCO results hold only parsed boxes (noise
    # parses to none, and a run without a box writes an empty list).
    assert (out / EXPORTS[benchmark]).exists()
    parsed = [r for r in records if r["answer"] is not None and not r["parse_error"]]
    if benchmark == "mc_bench" and not parsed:
        assert json.loads((out / EXPORTS[benchmark]).read_text()) == []
    assert (out / "report" / "index.html").exists()
    assert MODEL_NAME in json.loads((out / "run.json").read_text())["config"]["model"]


def test_processes_answer_through_vllm(releases: dict[str, tuple[Path, list[str]]], servers: Servers, tmp_path: Path) -> None:
    """`--processes 2`: two forked workers send the requests to vLLM; every sample is answered and
    stored once, and the parent counts the workers' requests as vLLM counted them."""
    data, options = releases["ref_adv_s"]
    out = tmp_path / "run"
    server = servers.open
    before = vllm_counter(server, "vllm:request_success_total")
    args = ["eval", "ref_adv_s", "--data", str(data), "--model", MODEL_NAME, "--api-url", server.url, "--limit", "4"]
    args += ["--max-tokens", "24", "--temperature", "0", "--out", str(out), "--no-progress", "--no-report"]
    proc = needlepoint([*args, *options, "--processes", "2", "--concurrency", "4"])
    assert proc.returncode == 0, proc.stderr[-3000:]

    records = read_records(out)
    assert len(records) == len({r["id"] for r in records}) == 4
    assert all(r["status"] == DONE and r["turns"][0]["usage"]["completion_tokens"] > 0 for r in records)
    turns = sum(len(r["turns"]) for r in records)
    assert vllm_counter(server, "vllm:request_success_total") - before == turns
    header = json.loads((out / "run.json").read_text())
    assert header["status"] == "complete" and header["config"]["processes"] == 2
    assert sum(e["requests"] for e in header["endpoints"]) == turns  # the workers' requests, counted once


def test_images_reach_the_model(releases: dict[str, tuple[Path, list[str]]], servers: Servers, tmp_path: Path) -> None:
    """An MC-Bench sample costs more prompt tokens than its text alone: vLLM's processor expanded
    both images into their <|image_pad|> tokens (at least 4 each, with the vision markers)."""
    from needlepoint.benchmarks.mc_bench.benchmark import McBench

    data, options = releases["mc_bench"]
    out = tmp_path / "run"
    proc = needlepoint(
        [
            "eval",
            "mc_bench",
            "--data",
            str(data),
            "--model",
            MODEL_NAME,
            "--api-url",
            servers.open.url,
            "--limit",
            "1",
            "--max-tokens",
            "4",
            "--out",
            str(out),
            "--no-progress",
            "--no-report",
            *options,
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (rec,) = read_records(out)
    assert len(rec["request"]["images"]) == 2
    bench = McBench(box_format="norm_1000_xyxy", input_mode="sequence")
    conversation = bench.prompt(next(iter(bench.load(data))))
    text = "".join(m.text for m in conversation.messages)
    body = json.dumps({"model": MODEL_NAME, "messages": [{"role": "user", "content": text}]}).encode()
    request = urllib.request.Request(f"{servers.open.base}/tokenize", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        text_only = int(json.loads(resp.read())["count"])
    assert rec["turns"][0]["usage"]["prompt_tokens"] >= text_only + 2 * (4 + 2), (rec["turns"][0]["usage"], text_only)


def test_local_images_reach_the_model_as_the_same_bytes(
    releases: dict[str, tuple[Path, list[str]]], servers: Servers, tmp_path: Path
) -> None:
    """`--local-images`: vLLM reads MC-Bench's image files by their file:// URLs (server A runs with
    --allowed-local-media-path), and the prompt tokens and greedy replies equal a base64 run's;
    server B reads no local files, and the run is refused before a run folder exists."""
    data, options = releases["mc_bench"]
    args = ["eval", "mc_bench", "--data", str(data), "--model", MODEL_NAME, "--limit", "2", "--max-tokens", "12"]
    args += ["--temperature", "0", "--concurrency", "1", "--no-progress", "--no-report", *options]
    runs = {}
    for flags in ([], ["--local-images"]):
        out = tmp_path / ("local" if flags else "base64")
        proc = needlepoint([*args, "--api-url", servers.open.url, "--out", str(out), *flags])
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[bool(flags)] = {r["id"]: r["turns"][0] for r in read_records(out)}
    assert runs[True].keys() == runs[False].keys() and len(runs[True]) == 2
    for key, local in runs[True].items():
        base = runs[False][key]
        assert local["error"] is None and local["reply"] == base["reply"], (local, base)
        assert local["usage"]["prompt_tokens"] == base["usage"]["prompt_tokens"] > 2 * (4 + 2)
        assert local["request_bytes"] < base["request_bytes"] / 2  # URLs, not the images' base64

    out = tmp_path / "refused"
    keyed = servers.ensure_keyed()
    proc = needlepoint([*args, "--api-url", keyed.url, "--api-key", API_KEY, "--out", str(out), "--local-images"])
    assert proc.returncode == 2, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "did not answer a request with an image given by its file:// URL (HTTP" in lines[0], proc.stderr
    assert f"reads the files under {os.path.realpath(data / 'mc-bench_images' / 'demo')} when allowed" in lines[0]
    assert "local files" in lines[0] and "--allowed-local-media-path" in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()

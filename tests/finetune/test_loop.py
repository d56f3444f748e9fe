"""MC-Bench's finetuned baseline, its whole loop at toy scale (`pytest -m finetune tests/finetune`):
`needlepoint build mc_bench_sft` on a small COCO-format set made here (JSON and grounding-token
answers) -> a LoRA on a tiny random Qwen2-VL, from examples/llamafactory/'s config with only the
model path, sizes, step count (and, for a model this small, the learning rate and LoRA on the output layer) changed -> the
adapter merged -> the merged model served by vLLM's CPU build -> `needlepoint eval mc_bench
--answer-format grounding-tokens` on it, against the same eval of the untrained model.

Training runs with PEFT directly (scripts/finetune_lora.py) in the venv of
scripts/setup-llamafactory.sh: LLaMA-Factory 0.9.5's trainer cannot run beside PyPI's torch CPU
build (that script says why). The scores of a 1.5 M-parameter model mean nothing and are not
asserted: that every stage ran, read what the previous one wrote, and that the served replies
parse in the trained syntax more often than the untrained model's do, is the point.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.finetune

REPO = Path(__file__).resolve().parents[2]
LF_PYTHON = Path(os.environ.get("NEEDLEPOINT_LLAMAFACTORY_VENV", REPO / ".venv-llamafactory")) / "bin" / "python"
CONFIG = REPO / "examples" / "llamafactory" / "qwen2vl_lora_mcbench.yaml"
STEPS = 80
TIMINGS: dict[str, float] = {}


def _vllm() -> Any:
    """tests/vllm/conftest.py's server helpers (that suite's one implementation of a vLLM server)."""
    spec = importlib.util.spec_from_file_location("vllm_suite_conftest", REPO / "tests" / "vllm" / "conftest.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run(command: list[str], stage: str, timeout: float = 1200) -> subprocess.CompletedProcess[str]:
    """A stage as its own process; fails the test with its output's tail when it fails."""
    started = time.monotonic()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO / "src")}
    env.pop("OPENAI_API_KEY", None)
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)
    TIMINGS[stage] = time.monotonic() - started
    if proc.returncode != 0:
        pytest.fail(f"{stage} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return proc


def build(coco: Path, out: Path, *extra: str) -> list[dict[str, Any]]:
    run(
        [
            sys.executable,
            "-m",
            "needlepoint.cli",
            "build",
            "mc_bench_sft",
            "--coco",
            str(coco / "instances.json"),
            "--images",
            str(coco / "images"),
            "--out",
            str(out),
            "--samples",
            "32",
            "--no-progress",
            *extra,
        ],
        "build " + (" ".join(extra) or "json"),
    )
    built: list[dict[str, Any]] = json.loads((out / "mc_bench_sft.json").read_text(encoding="utf-8"))
    return built


def parse_errors(run_dir: Path) -> tuple[int, int]:
    """(samples, samples with a parse error) of a run folder's records."""
    records = [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines() if line.strip()]
    return len(records), sum(bool(r.get("parse_error")) for r in records)


def test_build_train_merge_serve_and_score(tmp_path: Path) -> None:
    if not LF_PYTHON.exists():
        pytest.fail(
            f"no fine-tuning environment at {LF_PYTHON.parent.parent}: run `bash scripts/setup-llamafactory.sh`", pytrace=False
        )
    from helpers.coco import make_coco

    make_coco(tmp_path / "coco", n_images=14)
    # 1. data, in both answer formats; the grounding-token one is trained
    as_json = build(tmp_path / "coco", tmp_path / "sft_json", "--box-format", "norm_1000_xyxy")
    data = build(tmp_path / "coco", tmp_path / "sft", "--grounding-tokens")
    assert len(as_json) == len(data) == 32
    assert as_json[0]["messages"][1]["content"].startswith("{")
    assert all(d["messages"][1]["content"].startswith("Image 1: ") for d in data)

    # 2. the tiny base model, and the example config with only path, sizes and steps changed
    base = tmp_path / "base"
    run([str(LF_PYTHON), str(REPO / "scripts" / "make_tiny_qwen2vl.py"), str(base)], "tiny model")
    config = yaml.safe_load(CONFIG.read_text(encoding="utf-8"))
    config.update(
        model_name_or_path=str(base),
        dataset_dir=str(tmp_path / "sft"),
        output_dir=str(tmp_path / "saves"),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=1,
        max_steps=STEPS,
        # A random 1.5 M-parameter model barely moves in 80 steps at 1e-4 with LoRA on its layers
        # alone: a higher rate, and LoRA on the output layer too (LLaMA-Factory's additional_target).
        learning_rate=3.0e-3,
        additional_target="lm_head",
        bf16=False,
    )
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(config))

    # 3. train and merge
    out = tmp_path / "saves"
    run(
        [
            str(LF_PYTHON),
            str(REPO / "scripts" / "finetune_lora.py"),
            str(tmp_path / "train.yaml"),
            str(tmp_path / "sft"),
            str(base),
            str(out),
        ],
        "train + merge",
    )
    log = json.loads((out / "trainer_log.json").read_text())
    losses = log["losses"]
    assert log["samples"] == 32 and len(losses) == STEPS
    assert sum(losses[-5:]) / 5 < 0.8 * sum(losses[:5]) / 5, losses
    assert (out / "adapter" / "adapter_config.json").is_file() and (out / "merged" / "model.safetensors").is_file()

    # 4. serve the merged model and the base with vLLM; 5. eval both in the trained syntax
    vllm = _vllm()
    from needlepoint.benchmarks.mc_bench.demo import write_release

    release, _ = write_release(tmp_path / "mc_bench", pairs=6)
    counts = {}
    for name, model in (("untrained", base), ("trained", out / "merged")):
        server = vllm.VllmServer(model, tmp_path / f"{name}.log", served_name=f"tiny/qwen2-vl-{name}")
        started = time.monotonic()
        vllm.start_servers([server])
        try:
            run_dir = tmp_path / f"run-{name}"
            run(
                [
                    sys.executable,
                    "-m",
                    "needlepoint.cli",
                    "eval",
                    "mc_bench",
                    "--data",
                    str(release),
                    "--model",
                    server.served_name,
                    "--api-url",
                    server.url,
                    "--answer-format",
                    "grounding-tokens",
                    "--max-tokens",
                    "64",
                    "--temperature",
                    "0",
                    "--out",
                    str(run_dir),
                    "--no-progress",
                    "--no-report",
                ],
                f"eval {name}",
            )
        finally:
            server.stop()
        TIMINGS[f"serve + eval {name}"] = time.monotonic() - started
        counts[name] = parse_errors(run_dir)
        header = json.loads((run_dir / "run.json").read_text())
        assert header["identity"]["option.answer_format"] == "grounding-tokens"
    print(f"parse errors (samples, errors): {counts}; seconds per stage: {json.dumps({k: round(v) for k, v in TIMINGS.items()})}")
    (samples, untrained), (_, trained) = counts["untrained"], counts["trained"]
    assert untrained == samples  # random text is never the syntax
    assert trained < untrained

"""MC-Bench's agentic solver: per-stage latency and samples per second against 100 ms servers.

    PYTHONPATH=src python perf/bench_agentic.py [--pairs 96] [--concurrency 16] [--delay-ms 100] [--detector]

The demo's MC-Bench set (--pairs image pairs, about 3 target instances each) is answered with
`--solver agentic`: the reasoner and the `vlm:` localizer are perf/serve_simulated.py processes
(one each) answering after --delay-ms from the demo's agentic script. A sample needs one reasoner
round and then one localizer round whatever its number of phrases, when its phrases go out
together; one after another, it needs one round per phrase. So with C samples in flight the ideal
is C / (2 x delay) samples per second, and one after another would be C / ((1 + phrases) x delay).

Measured, from the run's records: per stage, the median and 90th percentile latency of a call
(reasoner turn, localizer turn), the localizer stage of a sample (first localizer call sent to
last answered: about one delay when the phrases go out together), and samples per second of the
whole run (wall clock of `evaluate`, start-up and scoring included) against the ideal.

With --detector, also the `detector:` path with a tiny random Grounding DINO built here on the CPU
(as the tests build it): the detector's forward passes (phrases per pass, seconds per pass) with
the reasoner at --delay-ms. A tiny model says how the batching behaves, not how fast a real one is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


class Server:
    """perf/serve_simulated.py in its own process, answering from a script after a delay."""

    def __init__(self, script: Path, delay_ms: float, model: str) -> None:
        cmd = [
            sys.executable,
            str(HERE / "serve_simulated.py"),
            "--script",
            str(script),
            "--delay-ms",
            str(delay_ms),
            "--model",
            model,
        ]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env={**os.environ})
        assert self.proc.stdout is not None
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            raise SystemExit(f"serve_simulated.py did not start: {self.url!r}")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def stage_table(records: dict[str, Any], delay_s: float) -> list[str]:
    """Median / p90 per stage, and the localizer stage per sample."""
    reasoner = [t["latency_s"] for r in records.values() for t in r["turns"] if t["role"] == "model"]
    localizer = [t["latency_s"] for r in records.values() for t in r["turns"] if t["role"] == "localizer"]
    detector = [t["latency_s"] for r in records.values() for t in r["turns"] if t["role"] == "tool"]
    phrases = [sum(t["role"] != "model" for t in r["turns"]) for r in records.values()]
    lines = ["| stage | calls | median s | p90 s |", "|---|---|---|---|"]
    for name, values in (("reasoner call", reasoner), ("localizer call", localizer), ("detector call (queue + pass)", detector)):
        if values:
            lines.append(f"| {name} | {len(values)} | {statistics.median(values):.3f} | {pct(values, 0.9):.3f} |")
    with_phrases = [(r, n) for r, n in zip(records.values(), phrases) if n]
    if localizer and with_phrases:
        # a sample's localizer stage: its elapsed time less its reasoner turns (the calls that came first)
        stage = [r["elapsed_s"] - sum(t["latency_s"] for t in r["turns"] if t["role"] == "model") for r, _ in with_phrases]
        sequential = [n * delay_s for _, n in with_phrases]
        lines.append(f"| localizer stage of a sample | {len(stage)} | {statistics.median(stage):.3f} | {pct(stage, 0.9):.3f} |")
        lines.append("")
        lines.append(
            f"phrases per sample: mean {statistics.mean(n for _, n in with_phrases):.2f}, max {max(n for _, n in with_phrases)}; "
            f"one after another the localizer stage would take {statistics.median(sequential):.3f} s (median)"
        )
    return lines


def timed_run(
    data: Path,
    workdir: Path,
    name: str,
    concurrency: int,
    delay_ms: float,
    solver_options: dict[str, Any],
    options: dict[str, Any],
    vlm_localizer: bool = False,
) -> tuple[dict[str, dict[str, Any]], float]:
    """`needlepoint eval mc_bench --solver agentic` against a simulated reasoner (and, with
    `vlm_localizer`, a simulated localizer) answering after `delay_ms`: its records and wall time."""
    from needlepoint.api import evaluate
    from needlepoint.benchmarks.mc_bench.agentic_demo import LOCALIZER_NAME, agentic_script
    from needlepoint.config import RunConfig
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME
    from needlepoint.store import read_records

    script_path = workdir / "script.json"
    script_path.write_text(json.dumps(agentic_script(data)), encoding="utf-8")
    servers = [Server(script_path, delay_ms, SIMULATED_MODEL_NAME)]
    if vlm_localizer:
        servers.append(Server(script_path, delay_ms, LOCALIZER_NAME))
        solver_options = {**solver_options, "localizer_url": [servers[1].url]}
    try:
        config = RunConfig(
            benchmark="mc_bench",
            data=data,
            model=SIMULATED_MODEL_NAME,
            api_urls=[servers[0].url],
            options=options,
            solver="agentic",
            solver_options=solver_options,
            out=workdir / f"run-{name}",
            concurrency=concurrency,
            show_progress=False,
            report=False,
        )
        started = time.perf_counter()
        result = evaluate(config)
        wall = time.perf_counter() - started
    finally:
        for server in servers:
            server.stop()
    return read_records(result.run_dir / "records.jsonl"), wall


def run_vlm(data: Path, workdir: Path, concurrency: int, delay_ms: float) -> list[str]:
    from needlepoint.benchmarks.mc_bench.agentic_demo import BOX_FORMAT, LOCALIZER_NAME

    records, wall = timed_run(
        data,
        workdir,
        "vlm",
        concurrency,
        delay_ms,
        {"localizer": f"vlm:{LOCALIZER_NAME}"},
        {"box_format": BOX_FORMAT},
        vlm_localizer=True,
    )
    n = len(records)
    delay_s = delay_ms / 1000
    ideal = concurrency / (2 * delay_s)
    phrases = statistics.mean(sum(t["role"] == "localizer" for t in r["turns"]) for r in records.values())
    sequential = concurrency / ((1 + phrases) * delay_s)
    lines = [
        f"### vlm: localizer, {n} samples, --concurrency {concurrency}, servers answering after {delay_ms:g} ms",
        "",
        *stage_table(records, delay_s),
        "",
        f"samples/s: {n / wall:.1f} (wall {wall:.2f} s, start-up and scoring included); ideal with phrases together "
        f"{ideal:.1f} ({n / wall / ideal:.0%} of it); the bound if phrases went one after another {sequential:.1f}",
    ]
    return lines


def tiny_grounding_dino(folder: Path) -> Path:
    """A tiny random Grounding DINO model folder (the tests' configuration)."""
    import torch
    import transformers

    words = [
        "[PAD]",
        "[UNK]",
        "[CLS]",
        "[SEP]",
        "[MASK]",
        ".",
        "shape",
        "in",
        "image",
        "1",
        "2",
        "3",
        "4",
        "the",
        "odd",
        "corner",
    ]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    tokenizer = transformers.BertTokenizer.from_pretrained(str(folder))
    swin = transformers.SwinConfig(
        embed_dim=8,
        depths=[1, 1, 1, 1],
        num_heads=[1, 1, 1, 1],
        window_size=2,
        image_size=64,
        out_features=["stage2", "stage3", "stage4"],
    )
    bert = transformers.BertConfig(
        vocab_size=len(words),
        hidden_size=16,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=16,
        max_position_embeddings=32,
    )
    config = transformers.GroundingDinoConfig(
        backbone_config=swin,
        text_config=bert,
        d_model=32,
        encoder_layers=1,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=32,
        decoder_ffn_dim=32,
        num_queries=7,
        num_feature_levels=3,
        encoder_n_points=1,
        decoder_n_points=1,
        max_text_len=32,
    )
    torch.manual_seed(0)
    transformers.GroundingDinoForObjectDetection(config).save_pretrained(folder)
    processor = transformers.GroundingDinoImageProcessor(size={"shortest_edge": 48, "longest_edge": 64})
    transformers.GroundingDinoProcessor(image_processor=processor, tokenizer=tokenizer).save_pretrained(folder)
    return folder


def run_detector(data: Path, workdir: Path, concurrency: int, delay_ms: float) -> list[str]:
    model = tiny_grounding_dino(workdir / "tiny-grounding-dino")
    solver_options = {"localizer": f"detector:{model}", "localizer_device": "cpu"}
    records, wall = timed_run(data, workdir, "detector", concurrency, delay_ms, solver_options, {})
    calls = [t for r in records.values() for t in r["turns"] if t["role"] == "tool"]
    per_pass = [c["result"]["pass_phrases"] for c in calls]
    pass_s = [c["result"]["pass_s"] for c in calls]
    most_per_sample = max(sum(t["role"] == "tool" for t in r["turns"]) for r in records.values())
    return [
        f"### detector: localizer (tiny random Grounding DINO, CPU), {len(records)} samples, --concurrency {concurrency}, "
        f"reasoner after {delay_ms:g} ms",
        "",
        *stage_table(records, delay_ms / 1000),
        "",
        f"phrases per forward pass (as each phrase saw it): median {statistics.median(per_pass):g}, max {max(per_pass)} "
        f"(one sample has at most {most_per_sample}); seconds per pass: median {statistics.median(pass_s):.3f}; "
        f"samples/s {len(records) / wall:.1f} (wall {wall:.2f} s, model loading included)",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=96, help="image pairs of the generated set (default 96)")
    parser.add_argument("--concurrency", type=int, default=16, help="samples in flight (default 16)")
    parser.add_argument("--delay-ms", type=float, default=100.0, help="each server's answer time (default 100)")
    parser.add_argument("--detector", action="store_true", help="also the detector: path (needs the agentic extra)")
    ns = parser.parse_args(argv)
    from needlepoint.benchmarks.mc_bench.demo import write_release

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        data, _ = write_release(workdir / "data", pairs=ns.pairs)
        lines = run_vlm(data, workdir, ns.concurrency, ns.delay_ms)
        if ns.detector:
            lines += ["", *run_detector(data, workdir, ns.concurrency, ns.delay_ms)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

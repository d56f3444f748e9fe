"""MC-Bench's agentic solver: per-stage latency and samples per second against 100 ms servers.

    PYTHONPATH=src python perf/bench_agentic.py [--pairs 96] [--concurrency 16] [--delay-ms 100]
                                                [--localizer-concurrency N] [--detector]

The demo's MC-Bench set (--pairs image pairs, about 3 target instances each) is answered with
`--solver agentic`: the reasoner and the `vlm:` localizer are perf/serve_simulated.py processes
(one each) answering after --delay-ms from the demo's agentic script. A sample needs one reasoner
round and then one localizer round whatever its number of phrases, when its phrases go out
together; one after another, it needs one round per phrase. So with C samples in flight the ideal
is C / (2 x delay) samples per second, and one after another would be C / ((1 + phrases) x delay).

Measured, from the run's records: per stage, the median and 90th percentile latency of a call
(reasoner turn, localizer turn), the localizer stage of a sample (first localizer call sent to
last answered: about one delay when the phrases go out together). From the servers' arrival
counters (serve_simulated.py --stats): samples per second while serving (first request's arrival
to the last answer) against the ideal C / (rounds x delay), rounds being a sample's reasoner turns
plus one localizer round when it names phrases; the samples in flight on average (their elapsed
times over that window) and the client's CPU in that window (sampled every 20 ms), per request.
Also samples per second of the whole call (wall clock of `evaluate`, start-up and scoring included).

With --detector, also the `detector:` path with a tiny random Grounding DINO built here on the CPU
(as the tests build it): the detector's forward passes (phrases per pass, seconds per pass) with
the reasoner at --delay-ms. A tiny model says how the batching behaves, not how fast a real one is.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from measure import ServerProcess, with_bytecode

HERE = Path(__file__).resolve().parent


def _server(script: Path, delay_ms: float, model: str) -> ServerProcess:
    """A simulated server answering from `script` as `model`."""
    return ServerProcess(delay_ms, script.parent, model, ["--script", str(script)], name=model.replace("/", "_")).start()


def client_cpu() -> float:
    """CPU seconds of this process and of its ended children (the --processes workers; the servers
    are still running when it is read)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


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
    localizer_concurrency: int | None = None,
    processes: int = 1,
) -> tuple[dict[str, dict[str, Any]], float, list[dict[str, Any]]]:
    """`needlepoint eval mc_bench --solver agentic` against a simulated reasoner (and, with
    `vlm_localizer`, a simulated localizer) answering after `delay_ms`: its records, wall time and
    each server's request count and first and last arrival."""
    from needlepoint.benchmarks.mc_bench.agentic_demo import LOCALIZER_NAME, agentic_script
    from needlepoint.core.config import RunConfig
    from needlepoint.core.store import read_records
    from needlepoint.models.simulated import SIMULATED_MODEL_NAME
    from needlepoint.run.evaluate import evaluate

    script_path = workdir / "script.json"
    script_path.write_text(json.dumps(agentic_script(data)), encoding="utf-8")
    servers = [_server(script_path, delay_ms, SIMULATED_MODEL_NAME)]
    if vlm_localizer:
        servers.append(_server(script_path, delay_ms, LOCALIZER_NAME))
        solver_options = {**solver_options, "localizer_url": [servers[1].url]}
        if localizer_concurrency is not None:
            solver_options["localizer_concurrency"] = localizer_concurrency
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
            processes=processes,
        )
        for server in servers:
            server.stats()  # restart the counters
        cpu0 = [server.cpu_s() for server in servers] + [client_cpu()]
        trace: list[tuple[float, float]] = []  # (time.time(), this process's CPU seconds), every 20 ms
        done = threading.Event()

        def watch() -> None:
            while not done.wait(0.02):
                trace.append((time.time(), time.process_time()))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.perf_counter()
        try:
            result = evaluate(config)
        finally:
            done.set()
            watcher.join()
        wall = time.perf_counter() - started
        stats = [server.stats() for server in servers]
        cpu1 = [server.cpu_s() for server in servers] + [client_cpu()]
        for stat, a, b in zip(stats + [{}], cpu0, cpu1):
            stat["cpu_s"] = b - a
        stats[0]["client_cpu_s"] = cpu1[-1] - cpu0[-1]
        first = min(s["first"] for s in stats if s["first"])
        last = max(s["last"] for s in stats if s["last"]) + delay_ms / 1000
        inside = [cpu for at, cpu in trace if first <= at <= last]
        stats[0]["client_serving_cpu_s"] = inside[-1] - inside[0] if len(inside) > 1 else float("nan")
    finally:
        for server in servers:
            server.stop()
    return read_records(result.run_dir / "records.jsonl"), wall, stats


def run_vlm(
    data: Path, workdir: Path, concurrency: int, delay_ms: float, localizer_concurrency: int | None = None, processes: int = 1
) -> list[str]:
    from needlepoint.benchmarks.mc_bench.agentic_demo import BOX_FORMAT, LOCALIZER_NAME

    records, wall, stats = timed_run(
        data,
        workdir,
        "vlm",
        concurrency,
        delay_ms,
        {"localizer": f"vlm:{LOCALIZER_NAME}"},
        {"box_format": BOX_FORMAT},
        vlm_localizer=True,
        localizer_concurrency=localizer_concurrency,
        processes=processes,
    )
    n = len(records)
    delay_s = delay_ms / 1000
    # server rounds a sample waits for: its reasoner turns, and one localizer round when it names phrases
    rounds = statistics.mean(
        sum(t["role"] == "model" for t in r["turns"]) + any(t["role"] == "localizer" for t in r["turns"])
        for r in records.values()
    )
    ideal = concurrency / (rounds * delay_s)
    phrases = statistics.mean(sum(t["role"] == "localizer" for t in r["turns"]) for r in records.values())
    sequential = concurrency / ((1 + phrases) * delay_s)
    # serving: from the first request's arrival at either server to the last one's answer
    window = max(s["last"] for s in stats if s["last"]) - min(s["first"] for s in stats if s["first"]) + delay_s
    in_flight = sum(r["elapsed_s"] for r in records.values()) / window
    lines = [
        f"### vlm: localizer, {n} samples, --concurrency {concurrency}, --processes {processes}, "
        f"servers answering after {delay_ms:g} ms",
        "",
        *stage_table(records, delay_s),
        "",
        f"server rounds per sample: {rounds:.2f}; ideal {ideal:.1f} samples/s (--concurrency / (rounds x delay))",
        f"samples/s while serving: {n / window:.1f} ({n / window / ideal:.0%} of the ideal; {window:.2f} s from the "
        f"first request to the last answer, {sum(s['requests'] for s in stats)} requests); samples in flight on average "
        f"{in_flight:.1f} of {concurrency}",
        (
            f"client CPU while serving: {stats[0]['client_serving_cpu_s']:.2f} s ({stats[0]['client_serving_cpu_s'] / window:.0%} "
            f"of a core, {stats[0]['client_serving_cpu_s'] / sum(s['requests'] for s in stats) * 1000:.2f} ms a request)"
            if processes == 1
            else "client CPU while serving: not sampled (the workers' CPU is known once they end)"
        ),
        f"CPU seconds during the call: client {stats[0]['client_cpu_s']:.2f} (start-up and scoring included, "
        "the workers' too), "
        "servers " + ", ".join(f"{s['cpu_s']:.2f}" for s in stats),
        f"samples/s of the whole call: {n / wall:.1f} (wall {wall:.2f} s, start-up and scoring included); "
        f"the bound if phrases went one after another {sequential:.1f}",
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
    records, wall, _ = timed_run(data, workdir, "detector", concurrency, delay_ms, solver_options, {})
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
    parser.add_argument(
        "--localizer-concurrency", type=int, help="the localizer's requests in flight (default: the solver's own default)"
    )
    parser.add_argument("--processes", type=int, default=1, help="client processes (eval --processes; default 1)")
    parser.add_argument("--detector", action="store_true", help="also the detector: path (needs the agentic extra)")
    ns = parser.parse_args(argv)
    with_bytecode()
    from needlepoint.benchmarks.mc_bench.demo import write_release

    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        data, _ = write_release(workdir / "data", pairs=ns.pairs)
        lines = run_vlm(data, workdir, ns.concurrency, ns.delay_ms, ns.localizer_concurrency, ns.processes)
        if ns.detector:
            lines += ["", *run_detector(data, workdir, ns.concurrency, ns.delay_ms)]
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

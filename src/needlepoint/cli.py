"""The command line: `needlepoint eval | score | report | merge | demo`.

Bad input ends in one sentence on stderr and exit code 2; an interrupt says how to resume.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from needlepoint import __version__
from needlepoint.benchmarks import NAMES
from needlepoint.errors import DataError


def _bench_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("benchmark options (each applies to the benchmarks named)")
    g.add_argument("--box-format", help="the model family's box convention: abs_xyxy, norm_1000_xyxy, norm_1_xyxy (ref_adv_s, mc_bench)")
    g.add_argument("--prompt-mode", help="direct or cot (ref_adv_s)")
    g.add_argument("--input-mode", help="sequence or merged (mc_bench)")
    g.add_argument("--prompt-file", help="a prompt template file replacing the default (mc_bench)")
    g.add_argument("--styles", help="comma-separated prompt styles: Referring,Comparison,Reasoning (mc_bench)")
    g.add_argument("--tasks", help="comma-separated tasks, e.g. retrieval-text,counting-image (mm_niah)")
    g.add_argument("--split", help="val or test (mm_niah)")
    g.add_argument("--images", help="images folder for a JSONL data file (ref_adv_s)")
    g.add_argument("--max-image-side", type=int, help="downscale images so no side exceeds this many pixels")
    g.add_argument("--repair-on-length-only", action="store_true", help="repair turn only after finish_reason=length (ref_adv_s)")


def _options(ns: argparse.Namespace) -> dict[str, Any]:
    keys = ("box_format", "prompt_mode", "input_mode", "prompt_file", "styles", "tasks", "split", "images",
            "max_image_side", "repair_on_length_only")  # fmt: skip
    return {k: getattr(ns, k, None) for k in keys}


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for the docs and tests)."""
    parser = argparse.ArgumentParser(prog="needlepoint", description="Evaluate multimodal models on finding things.")
    parser.add_argument("--version", action="version", version=f"needlepoint {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    ev = sub.add_parser("eval", help="evaluate a served model on a benchmark (resumes an interrupted run)")
    ev.add_argument("benchmark", choices=NAMES)
    ev.add_argument("--data", required=True, help="the benchmark's release folder (or file)")
    ev.add_argument("--model", required=True, help="the model name the server expects")
    ev.add_argument("--api-url", action="append", required=True, help="base URL such as http://localhost:8000/v1; repeat to spread requests")
    ev.add_argument("--api-key", help="API key (default: $OPENAI_API_KEY); never written to disk")
    ev.add_argument("--limit", type=int, help="only the first N samples")
    ev.add_argument("--concurrency", type=int, default=32, help="requests in flight (default 32)")
    ev.add_argument("--out", type=Path, help="run folder (default runs/<benchmark>/<model>/<timestamp>)")
    ev.add_argument("--fresh", action="store_true", help="start a new run folder instead of resuming")
    ev.add_argument("--retry-failed", action="store_true", help="rerun only the samples whose request failed")
    ev.add_argument("--temperature", type=float)
    ev.add_argument("--top-p", type=float)
    ev.add_argument("--max-tokens", type=int)
    ev.add_argument("--seed", type=int)
    ev.add_argument("--timeout", type=float, help="seconds per request (default 180)")
    ev.add_argument("--extra-body", help="JSON object merged into every request body (keys neither OpenAI nor vLLM knows are warned about)")
    ev.add_argument("--neutral-sampling", action="store_true",
                    help="send neutral values (temperature 1, top_p 1, top_k -1, min_p 0, repetition_penalty 1, presence/frequency_penalty 0) "
                         "for the sampling settings the benchmark's authors left to the server, instead of the model's generation_config")
    ev.add_argument("--max-wait", type=float, default=300.0,
                    help="longest wait in seconds for a retry (Retry-After or backoff, default 300); a server asking for longer fails the request at once")
    ev.add_argument("--max-retries", type=int, default=6)
    ev.add_argument("--max-request-bytes", type=int, help="report requests larger than this instead of sending them")
    ev.add_argument("--reencode-images", action="store_true", help="re-encode JPEG sources too (JPEG q95 after RGB)")
    ev.add_argument("--shard", metavar="I/N", help="answer only shard I of N (a fixed, cost-balanced 1/N of the samples); combine the shards with `needlepoint merge`")
    ev.add_argument("--no-progress", action="store_true")
    ev.add_argument("--no-report", action="store_true", help="skip the HTML report")
    ev.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    _bench_options(ev)

    sc = sub.add_parser("score", help="score saved predictions (authors' formats or a run folder) without a model")
    sc.add_argument("benchmark", choices=NAMES)
    sc.add_argument("--predictions", required=True, type=Path)
    sc.add_argument("--data", type=Path, help="the release folder, where scoring needs the annotations (mc_bench)")
    sc.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    sc.add_argument("--styles", help="comma-separated prompt styles (mc_bench)")
    sc.add_argument("--split", help="the split to score when a folder holds several: val or test (mm_niah)")

    rp = sub.add_parser("report", help="one leaderboard over several run folders")
    rp.add_argument("runs", nargs="+", type=Path, help="run folders, or model folders (each stands for its newest finished run)")
    rp.add_argument("--out", type=Path, help="folder for leaderboard.md, leaderboard.html and leaderboard_<board>.csv (default ./leaderboard)")
    rp.add_argument("--with-published", action="store_true", help="add every published row, labelled with its source")

    mg = sub.add_parser("merge", help="merge the shard runs of one evaluation (--shard I/N) into one run folder")
    mg.add_argument("runs", nargs="+", type=Path, help="the shards' run folders")
    mg.add_argument("--out", required=True, type=Path, help="the merged run folder")
    mg.add_argument("--allow-partial", action="store_true", help="merge what exists when shards or samples are missing")
    mg.add_argument("--data", type=Path, help="the dataset, where this machine sees it elsewhere than the shards did (same content)")
    mg.add_argument("--no-report", action="store_true", help="skip the HTML report")
    mg.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")

    dm = sub.add_parser("demo", help="all benchmarks on bundled samples against a simulated model, offline")
    dm.add_argument("--out", type=Path, default=Path("runs/demo"), help="where the demo's data and runs go")
    dm.add_argument("--benchmarks", default=",".join(NAMES), help="comma-separated subset")
    return parser


def _generation(ns: argparse.Namespace) -> dict[str, Any]:
    gen: dict[str, Any] = {
        "temperature": ns.temperature,
        "top_p": ns.top_p,
        "max_tokens": ns.max_tokens,
        "seed": ns.seed,
        "timeout_s": ns.timeout,
    }
    if ns.extra_body:
        try:
            extra = json.loads(ns.extra_body)
        except ValueError:
            raise DataError("--extra-body must be a JSON object, e.g. '{\"top_k\": 1}'") from None
        if not isinstance(extra, dict):
            raise DataError("--extra-body must be a JSON object, e.g. '{\"top_k\": 1}'")
        gen["extra"] = extra
        from needlepoint.models.openai_compat import unknown_body_keys

        unknown = unknown_body_keys(extra)
        if unknown:
            print(f"needlepoint: warning: --extra-body key(s) {', '.join(unknown)} are known to neither the OpenAI chat API "
                  "nor vLLM, which ignores unknown keys silently; check the spelling", file=sys.stderr)  # fmt: skip
    return {k: v for k, v in gen.items() if v is not None}


def _print_metrics(bench: Any, metrics: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(metrics, indent=2))
        return
    from needlepoint.report.terminal import print_tables

    print_tables(bench.tables(metrics))


def cmd_eval(ns: argparse.Namespace) -> int:
    from needlepoint.api import evaluate
    from needlepoint.config import RunConfig

    config = RunConfig(
        benchmark=ns.benchmark,
        data=Path(ns.data).expanduser(),
        model=ns.model,
        api_urls=ns.api_url,
        api_key=ns.api_key or os.environ.get("OPENAI_API_KEY"),
        options=_options(ns),
        generation=_generation(ns),
        limit=ns.limit,
        concurrency=ns.concurrency,
        out=ns.out,
        fresh=ns.fresh,
        retry_failed=ns.retry_failed,
        max_retries=ns.max_retries,
        reencode_images=ns.reencode_images,
        max_request_bytes=ns.max_request_bytes,
        max_wait_s=ns.max_wait,
        neutral_sampling=ns.neutral_sampling,
        show_progress=not ns.no_progress and not ns.json,
        report=not ns.no_report,
        shard=ns.shard,
    )
    result = evaluate(config)
    _print_metrics(result.benchmark, result.metrics, ns.json)
    err = sys.stderr
    print(f"run folder: {result.run_dir}", file=err)
    skipped = result.metrics.get("run", {}).get("skipped", [])
    if skipped:
        first = skipped[0]
        print(f"{len(skipped)} row(s) skipped as invalid, not sent (e.g. {first['id']}: {first['reason']}); listed in metrics.json under run.skipped", file=err)
    for line in result.notes:  # failures by kind, what --retry-failed would ask again, context overflows
        print(line, file=err)
    return 0


def cmd_score(ns: argparse.Namespace) -> int:
    from needlepoint.api import score

    options = {"styles": ns.styles, "split": ns.split}
    bench, metrics = score(ns.benchmark, ns.predictions, ns.data, **options)
    _print_metrics(bench, metrics, ns.json)
    return 0


def cmd_report(ns: argparse.Namespace) -> int:
    from needlepoint.report.leaderboard import main as leaderboard_main

    return leaderboard_main(ns)


def cmd_merge(ns: argparse.Namespace) -> int:
    from needlepoint.merge import merge

    result = merge(ns.runs, ns.out, allow_partial=ns.allow_partial, data=ns.data, report=not ns.no_report)
    _print_metrics(result.benchmark, result.metrics, ns.json)
    run = result.metrics.get("run", {})
    print(f"merged run folder: {result.run_dir} ({run.get('answered')} of {run.get('samples')} samples answered)", file=sys.stderr)
    return 0


def cmd_demo(ns: argparse.Namespace) -> int:
    from needlepoint.demo import run_demo

    return run_demo(ns.out, [b.strip() for b in ns.benchmarks.split(",") if b.strip()])


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `needlepoint` command."""
    ns = build_parser().parse_args(argv)
    handlers = {"eval": cmd_eval, "score": cmd_score, "report": cmd_report, "merge": cmd_merge, "demo": cmd_demo}
    try:
        return handlers[ns.command](ns)
    except DataError as exc:
        print(f"needlepoint: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nneedlepoint: interrupted; finished samples are saved, rerun the same command to resume", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"needlepoint: error: {exc.strerror or exc}: {exc.filename or ''}; check the path and permissions", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

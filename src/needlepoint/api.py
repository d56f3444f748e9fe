"""The Python entry points: `evaluate` a served model, `score` saved predictions."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from needlepoint import __version__
from needlepoint.benchmarks import make
from needlepoint.benchmarks.base import Benchmark
from needlepoint.config import (
    RunConfig,
    dataset_fingerprint,
    default_run_dir,
    hash_identity,
    identity,
    model_slug,
)
from needlepoint.conversation import Generation
from needlepoint.errors import DataError
from needlepoint.store import METRICS, RunStore, write_json

RUNS_ROOT = Path("runs")


@dataclass
class RunResult:
    """What a finished (or resumed) run produced."""

    run_dir: Path
    metrics: dict[str, Any]
    benchmark: Benchmark
    failed: list[str]
    exports: list[Path]


def _generation(bench: Benchmark, overrides: dict[str, Any]) -> Generation:
    known = {f.name for f in fields(Generation)}
    wrong = [k for k in overrides if k not in known]
    if wrong:
        raise DataError(f"unknown generation setting(s) {', '.join(wrong)}; use {', '.join(sorted(known))}")
    defaults = dict(bench.generation_defaults)
    return Generation(**{**defaults, **{k: v for k, v in overrides.items() if v is not None}})


def _resolve_run_dir(config: RunConfig, run_hash: str) -> Path:
    if config.out is not None:
        if config.fresh and RunStore.read_header(config.out) is not None:
            raise DataError(f"{config.out} already holds a run; to start over, name a new folder with --out")
        return config.out
    parent = RUNS_ROOT / config.benchmark / model_slug(config.model)
    if not config.fresh and parent.is_dir():
        for previous in sorted((p for p in parent.iterdir() if p.is_dir()), reverse=True):
            header = RunStore.read_header(previous)
            if header is None:
                continue
            if header.get("hash") == run_hash:
                return previous
            if header.get("status") != "complete":
                return previous  # RunStore.open refuses it and says how to start fresh
            break
    return default_run_dir(RUNS_ROOT, config.benchmark, config.model)


def evaluate(config: RunConfig | None = None, /, **settings: Any) -> RunResult:
    """Evaluate a served model on a benchmark; resumes a matching unfinished run.

    Pass a RunConfig, or its fields as keywords, e.g.
    `evaluate(benchmark="ref_adv_s", data=Path("~/data/ref-adv-s"), model="Qwen/Qwen2.5-VL-7B-Instruct",
    api_urls=["http://localhost:8000/v1"], options={"box_format": "abs_xyxy"})`.
    """
    if config is None:
        settings["data"] = Path(settings["data"]).expanduser()
        if isinstance(settings.get("api_urls"), str):
            settings["api_urls"] = [settings["api_urls"]]
        config = RunConfig(**settings)
    if not config.api_urls:
        raise DataError("no --api-url given; pass the base URL of an OpenAI-compatible server, e.g. http://localhost:8000/v1")
    bench = make(config.benchmark, **config.options)
    samples = list(bench.load(config.data))
    if not samples:
        raise DataError(f"{config.data} holds no samples for {config.benchmark}")
    generation = _generation(bench, config.generation)
    ident = identity(config, bench.identity(), generation, dataset_fingerprint(samples))
    run_hash = hash_identity(ident)
    if config.limit:
        samples = samples[: config.limit]
    run_dir = _resolve_run_dir(config, run_hash)
    header = {
        "needlepoint": __version__,
        "hash": run_hash,
        "identity": ident,
        "config": config.public(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "status": "running",
    }
    advice = "choose another --out folder, or drop --out and pass --fresh" if config.out else "pass --fresh for a new run folder"
    store = RunStore.open(run_dir, header, advice)
    try:
        return _run(config, bench, samples, generation, store)
    finally:
        store.close()


def _run(config: RunConfig, bench: Benchmark, samples: list[Any], generation: Generation, store: RunStore) -> RunResult:
    """Answer the pending samples into an open run folder, then score, export and report."""
    from needlepoint.models.openai_compat import OpenAICompatModel, RetryPolicy
    from needlepoint.runner import RunOptions, pending, run

    store.update_header(status="running", last_started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), config=config.public())
    model = OpenAICompatModel(
        config.model,
        config.api_urls,
        config.api_key,
        retry=RetryPolicy(max_retries=config.max_retries, base_s=config.backoff_base_s),
        reencode_images=config.reencode_images,
        max_request_bytes=config.max_request_bytes,
    )
    options = RunOptions(concurrency=config.concurrency, retry_failed=config.retry_failed, show_progress=config.show_progress)
    drafter = None
    if config.report:  # the report's thumbnails are drawn while the run answers
        from needlepoint.report.html import REPORT_DIR, THUMBS_DIR
        from needlepoint.report.thumbs import Drafter

        drafter = Drafter(store.dir / REPORT_DIR / THUMBS_DIR, bench.report_items)
        options.on_record = drafter.add

    async def go() -> dict[str, dict[str, Any]]:
        try:
            if pending(samples, store.records(), config.retry_failed):
                await model.check_reachable()
            return await run(bench, samples, model, store, generation, options)
        finally:
            await model.aclose()

    try:
        records = asyncio.run(go())
    except BaseException:
        if drafter is not None:
            drafter.thumbnails.close(cancel=True)
        raise
    if drafter is not None:
        drafter.flush()
    result = finish(bench, samples, records, store.dir, config.model)
    complete = len(records) == len(samples) and not result.failed
    store.update_header(status="complete" if complete else "incomplete", finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    if config.report:
        answered = [s for s in samples if s.id in records]
        thumbnails = drafter.thumbnails if drafter is not None else None
        result.exports.extend(write_report(store.dir, bench, answered, [records[s.id] for s in answered], result.metrics, thumbnails))
    return result


def finish(bench: Benchmark, samples: list[Any], records: dict[str, dict[str, Any]], run_dir: Path, model: str) -> RunResult:
    """Score the stored records, write metrics.json and the authors' formats."""
    from needlepoint.runner import BACKEND_ERROR, INPUT_ERROR

    ordered = [records[s.id] for s in samples if s.id in records]
    done_ids = {r["id"] for r in ordered}
    metrics = bench.score([s for s in samples if s.id in done_ids], ordered)
    failed = [r["id"] for r in ordered if r.get("status") in (BACKEND_ERROR, INPUT_ERROR)]
    metrics["run"] = {
        "samples": len(samples),
        "answered": len(ordered),
        "failed": len(failed),
        "failed_ids": failed[:1000],
        "skipped": [{"id": i, "reason": r} for i, r in bench.skipped],
    }
    write_json(run_dir / METRICS, metrics)
    exports = bench.export(run_dir, samples, ordered, model, metrics)
    return RunResult(run_dir=run_dir, metrics=metrics, benchmark=bench, failed=failed, exports=list(exports))


def write_report(
    run_dir: Path, bench: Benchmark, samples: list[Any], records: list[dict[str, Any]], metrics: dict[str, Any], thumbnails: Any = None
) -> list[Path]:
    """The HTML report of a run (`<run>/report/index.html`); `thumbnails` (a report.thumbs.Thumbnails)
    brings those drawn during the run."""
    from needlepoint.report.html import write_run_report

    header = RunStore.read_header(run_dir) or {}
    return [write_run_report(run_dir, bench, samples, records, metrics, header, thumbnails)]


def score(benchmark: str, predictions: Path, data: Path | None = None, **options: Any) -> tuple[Benchmark, dict[str, Any]]:
    """Metrics of saved predictions in the authors' format (or a run folder), without a model."""
    bench = make(benchmark, **options)
    if not predictions.exists():
        raise DataError(f"--predictions {predictions} does not exist")
    return bench, bench.score_file(predictions, data)

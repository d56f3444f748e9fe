"""The Python entry points: `evaluate` a served model, `score` saved predictions."""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from needlepoint import __version__
from needlepoint.contract.base import Benchmark, Dataset, ReadsPredictions
from needlepoint.contract.predictions import PredictionsRun
from needlepoint.contract.readable import read_or_name
from needlepoint.contract.registry import make
from needlepoint.core import status
from needlepoint.core.aio import run as run_async
from needlepoint.core.config import RunConfig, dataset_fingerprint, hash_identity, identity
from needlepoint.core.conversation import Checks, ChecksEndpoints, Closes, CountsEndpoints, Generation, Model
from needlepoint.core.endpoints import add_stats
from needlepoint.core.errors import DataError
from needlepoint.core.files import scratch_folder, write_json
from needlepoint.core.heap import collector_paused, give_back_freed
from needlepoint.core.intervalsettings import CiSettings
from needlepoint.core.records import Record, RunHeader, outcome
from needlepoint.core.shard import parse_shard, sample_cost, select
from needlepoint.core.store import METRICS, RECORDS, RunStore, read_records
from needlepoint.run.runfolder import PRE_RUN, refusal_advice, remove_empty_run, resolve_run_dir
from needlepoint.run.strata import sample_subset
from needlepoint.solvers.base import Solver
from needlepoint.solvers.calls import compact

if TYPE_CHECKING:  # typing.Unpack is Python 3.11's; the annotation is never evaluated
    from typing_extensions import Unpack

    from needlepoint.contract.usage import Prices


@dataclass
class RunResult:
    """What a finished (or resumed) run produced."""

    run_dir: Path
    metrics: dict[str, Any]
    benchmark: Benchmark
    failed: list[str]
    exports: list[Path]
    notes: list[str] = field(default_factory=list)  # end-of-run advice (outcome.summary_lines)
    stopped: str | None = None  # why the run stopped taking samples early (a spent budget), if it did
    usage_line: str | None = None  # tokens, requests, time and cost in one line (usage.summary_line)


def _generation(bench: Benchmark, overrides: dict[str, Any], neutral: bool = False) -> Generation:
    from needlepoint.models.openai_compat import with_neutral_sampling

    known = {f.name for f in fields(Generation)}
    wrong = [k for k in overrides if k not in known]
    if wrong:
        raise DataError(f"unknown generation setting(s) {', '.join(wrong)}; use {', '.join(sorted(known))}")
    defaults = dict(bench.generation_defaults)
    given = {k: v for k, v in overrides.items() if v is not None}
    if "extra" in defaults and "extra" in given:  # the benchmark's request keys, the user's over them
        given["extra"] = {**defaults["extra"], **given["extra"]}
    generation = Generation(**{**defaults, **given})
    return with_neutral_sampling(generation) if neutral else generation


def sampling_sent(bench: Benchmark, samples: Sequence[Any], generation: Generation) -> list[dict[str, Any]]:
    """The distinct sampling parameters the requests of a run carry (body keys other than model and
    messages), as sent: usually one set; benchmarks with per-task settings have several."""
    from needlepoint.models.openai_compat import sampling_params

    out: list[dict[str, Any]] = []
    for s in samples:
        params = sampling_params(bench.generation(s, generation))
        if params not in out:
            out.append(params)
    return out


def client_settings(config: RunConfig) -> Any:
    """The run's ClientSettings (models.openai_compat), for the --model client and a solver's own."""
    from needlepoint.models.openai_compat import ClientSettings, RetryPolicy

    timeout_s = config.generation.get("timeout_s") or Generation.timeout_s  # --timeout bounds every request of the run
    retry = RetryPolicy(
        max_retries=config.max_retries, base_s=config.backoff_base_s, max_wait_s=config.max_wait_s, timeout_s=timeout_s
    )
    return ClientSettings(retry, config.reencode_images, config.max_request_bytes, config.concurrency, config.local_images)


def _model(config: RunConfig) -> Any:
    from needlepoint.models.openai_compat import OpenAICompatModel

    client = client_settings(config)
    return OpenAICompatModel(
        config.model,
        config.api_urls,
        config.api_key,
        retry=client.retry,
        reencode_images=client.reencode_images,
        max_request_bytes=client.max_request_bytes,
        max_in_flight=config.concurrency,
        local_images=client.local_images,
    )


def check_endpoints(config: RunConfig) -> None:
    """Raise DataError (one sentence) when an endpoint is unreachable, refuses the key, lacks /v1
    or does not serve the model: before a run folder exists, so a failed start leaves none."""

    async def go() -> None:
        model = _model(config)
        try:
            await model.check_endpoints()
        finally:
            await model.aclose()

    run_async(go)


class EvaluateSettings(TypedDict, total=False):
    """evaluate()'s keywords: RunConfig's fields, with `data` a str too, `api_urls` one URL too, and
    `model` a model object too (tests/test_typed_surfaces.py keeps the two in step)."""

    benchmark: str
    data: str | Path
    model: str | Model
    api_urls: str | list[str]
    api_key: str | None
    options: dict[str, Any]
    generation: dict[str, Any]
    limit: int | None
    concurrency: int
    out: Path | None
    fresh: bool
    retry_failed: bool
    max_retries: int
    backoff_base_s: float
    reencode_images: bool
    local_images: bool
    max_request_bytes: int | None
    max_wait_s: float
    neutral_sampling: bool
    show_progress: bool
    report: bool
    solver: str
    solver_options: dict[str, Any]
    shard: str | None
    ci: CiSettings
    serve: Any
    price: str | None
    prices: Path | None
    max_cost: float | None
    max_tokens_total: int | None
    structured_output: bool
    batch: bool
    batch_poll_s: float
    batch_deadline_h: float
    sample: int | None
    sample_seed: int
    processes: int


def evaluate(config: RunConfig | None = None, /, **keywords: Unpack[EvaluateSettings]) -> RunResult:
    """Evaluate a served model on a benchmark; resumes a matching unfinished run.

    Pass a RunConfig, or its fields as keywords, e.g.
    `evaluate(benchmark="ref_adv_s", data=Path("~/data/ref-adv-s"), model="Qwen/Qwen2.5-VL-7B-Instruct",
    api_urls=["http://localhost:8000/v1"], options={"box_format": "abs_xyxy"})`.

    `model` may also be a model object that answers instead of a client of `api_urls` (anything
    with `name` and `async complete(conversation, generation) -> Reply`: models.replay.ReplayModel,
    an in-process model), with or without a RunConfig: `evaluate(config, model=obj)`. The caller
    owns it (it is neither checked nor closed) and it bounds its own requests in flight; the run's
    model name is `model.name` unless the RunConfig names one.
    """
    from needlepoint.run.runner import pending
    from needlepoint.solvers import make_solver

    settings: dict[str, Any] = dict(keywords)
    model: Model | None = None
    if settings.get("model") is not None and not isinstance(settings["model"], str):
        model = settings.pop("model")
    if config is not None and settings:
        raise TypeError(f"evaluate() takes a RunConfig or its fields, not both ({', '.join(settings)})")
    if config is None:
        settings["data"] = Path(settings["data"]).expanduser()
        if isinstance(settings.get("api_urls"), str):
            settings["api_urls"] = [settings["api_urls"]]
        if model is not None:
            settings["model"] = model.name
            settings.setdefault("api_urls", [])
        config = RunConfig(**settings)
    if not config.api_urls and model is None and config.serve is None:
        raise DataError("no --api-url given; pass the base URL of an OpenAI-compatible server, e.g. http://localhost:8000/v1")
    bench = make(config.benchmark, **config.options)
    solver = make_solver(config.solver, bench, client_settings(config), **config.solver_options)
    if config.batch:
        from needlepoint.run.batchrun import check

        check(config, solver.models(), model)
    samples = bench.load(config.data)
    if not samples:
        raise DataError(f"{config.data} holds no samples for {config.benchmark}")
    generation = _main_generation(config, bench, solver)
    from needlepoint.contract.usage import load_prices

    load_prices(config.prices, config.price)  # a bad price is refused before a run folder exists
    ident, samples = _identify(config, bench, solver, samples, generation)
    model_identity = getattr(model, "identity", None)  # an in-process model's settings (a detector's threshold)
    if callable(model_identity):
        ident["model_settings"] = model_identity()
    run_hash = hash_identity(ident)
    run_dir = resolve_run_dir(config, run_hash, solver.label(config.model))
    requested = samples[: config.limit] if config.limit else samples
    if pending(requested, read_records(run_dir / RECORDS), config.retry_failed):
        if config.serve is not None:  # --serve: the servers start now, their logs in the run folder
            from needlepoint.serve import SERVE_DIR

            media = image_folder(bench, requested) if config.local_images else None
            config.serve.start(run_dir / SERVE_DIR, max_images(bench, requested), config.structured_output, media)
        if model is None:
            check_endpoints(config)
            if config.batch:  # and its Batch API, or --batch would fail every sample retryably, forever
                from needlepoint.run.batchrun import check_batch_api

                check_batch_api(config)
        _check_solver_models(solver)
        if config.local_images:
            check_local_images(config, bench, requested, solver, model)
    header: RunHeader = {
        "needlepoint": __version__,
        "hash": run_hash,
        "identity": ident,
        "config": config.public(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "status": "running",
    }
    if solver.label(config.model) != config.model:  # the leaderboard's name of a system of several parts
        header["model_label"] = solver.label(config.model)
    existed = run_dir.exists()
    store = RunStore.open(run_dir, header, refusal_advice(config), may_hold=PRE_RUN)
    try:
        return _run(config, bench, samples, generation, store, solver, model)
    except BaseException:
        if store.created and not store.records():
            store.close()
            remove_empty_run(run_dir, keep_folder=existed)  # a failed start must not leave a run that blocks the next
        raise
    finally:
        store.close()


def _main_generation(config: RunConfig, bench: Benchmark, solver: Solver) -> Generation:
    """The main model's sampling: the benchmark's defaults, the run's settings, and the answer
    schema under --structured-output."""
    generation = _generation(bench, config.generation, config.neutral_sampling)
    if config.structured_output:
        from needlepoint.core.structured import answer_schema, with_schema

        generation = with_schema(generation, *answer_schema(bench, solver, config.benchmark))
    return generation


def _identify(
    config: RunConfig, bench: Benchmark, solver: Solver, samples: Dataset[Any], generation: Generation
) -> tuple[dict[str, Any], Dataset[Any]]:
    """The run identity of `config` over the whole dataset `samples`, and the samples the run
    holds (a shard's part of them under --shard)."""
    ident = identity(
        config, {**bench.identity(), **samples.identity}, generation, dataset_fingerprint(samples), solver.identity()
    )
    if config.sample is not None:  # --sample N: a stratified seeded subset (run/strata.py), before any shard of it
        samples = sample_subset(bench, samples, config.sample, config.sample_seed)
    if config.shard:  # the shard's part of the whole dataset (whatever --limit requests of it)
        samples = samples.with_samples(select(samples, parse_shard(config.shard), sample_cost(bench)))
        ident["shard"] = config.shard  # the unsharded identity plus I/N (merge checks the rest)
    return ident, samples


def run_folder(config: RunConfig, bench: Benchmark, samples: Dataset[Any]) -> Path:
    """The folder `evaluate(config)` writes for the whole dataset `samples`, found without asking
    a server and without --fresh moving a run aside: the dry run keeps its estimate there."""
    from dataclasses import replace

    from needlepoint.solvers import make_solver

    solver = make_solver(config.solver, bench, client_settings(config), **config.solver_options)
    ident, _ = _identify(config, bench, solver, samples, _main_generation(config, bench, solver))
    return resolve_run_dir(replace(config, fresh=False, retry_failed=False), hash_identity(ident), solver.label(config.model))


def max_images(bench: Benchmark, samples: Sequence[Any]) -> int:
    """The most images one first-turn request of `samples` holds (a served model's per-prompt limit)."""
    return max((sum(len(m.images) for m in bench.prompt(s).messages) for s in samples), default=0)


def _check_solver_models(solver: Solver) -> None:
    """Check a solver's own models and tools (`check_endpoints()` of a chat client, `check()` of an
    embedder), before a run folder exists."""
    checks = [(m, _check_of(m)) for m in solver.models().values() if isinstance(m, (ChecksEndpoints, Checks))]
    if checks:

        async def go() -> None:
            for m, check in checks:  # a chat model's check_endpoints, or an embedder's check
                try:
                    await check()
                finally:
                    await _close([m])  # its connections belong to this event loop; the run opens new ones

        run_async(go)


def image_folder(bench: Benchmark, samples: Sequence[Any]) -> Path | None:
    """The folder that holds every image file of the first-turn requests of `samples`, links
    resolved (a server reading them by their URLs, --local-images, must be allowed it: vLLM's
    --allowed-local-media-path); None when no image is a file. Images with no common folder but the
    root are refused: a server allowed the root could be asked for any file."""
    files = {r.path for s in samples for m in bench.prompt(s).messages for r in m.images if r.loader is None and r.path}
    if not files:
        return None
    folders = sorted({os.path.dirname(os.path.realpath(f)) for f in files})
    common = Path(os.path.commonpath(folders))
    if common == Path(common.anchor):  # a server allowed "/" could be asked for any file of this machine
        raise DataError(
            f"the image files of these samples lie in folders with no common folder but {common} "
            f"(links resolved: {folders[0]} and {folders[-1]}), and a server allowed {common} could read every file "
            "on this machine; keep the images under one folder, or drop --local-images"
        )
    return common


PROBED_SAMPLES = 100  # --local-images: the first samples searched for an image file to send by its URL


def check_local_images(config: RunConfig, bench: Benchmark, samples: Sequence[Any], solver: Solver, model: Model | None) -> None:
    """--local-images: every chat client of the run that sends image files by their URL gets one
    such request answered (OpenAICompatModel.check_local_images), before the run's first request.
    Nothing is asked when the first PROBED_SAMPLES samples have no image file that goes as it is
    stored. The images' folder (`image_folder`: every sample's prompt) is found only for a refusal."""
    from needlepoint.core.images import file_url

    images = (r for s in samples[:PROBED_SAMPLES] for m in bench.prompt(s).messages for r in m.images)
    ref = next((r for r in images if file_url(r, config.reencode_images) is not None), None)
    if ref is None:
        return
    clients: list[Any] = [m for m in solver.models().values() if getattr(m, "local_images", False)]

    async def go() -> None:
        for m in ([_model(config)] if model is None else []) + clients:
            try:
                await m.check_local_images(ref, lambda: image_folder(bench, samples))
            finally:
                await _close([m])  # its connections belong to this event loop; the run opens new ones

    run_async(go)


def _check_of(model: ChecksEndpoints | Checks) -> Callable[[], Awaitable[None]]:
    """A model's endpoint check: a chat client's `check_endpoints`, else a tool's `check`."""
    return model.check_endpoints if isinstance(model, ChecksEndpoints) else model.check


async def _close(models: list[Any]) -> None:
    for m in models:
        if isinstance(m, Closes):
            await m.aclose()


def _run(
    config: RunConfig,
    bench: Benchmark,
    samples: Dataset[Any],
    generation: Generation,
    store: RunStore,
    solver: Solver,
    given: Model | None = None,
) -> RunResult:
    """Answer the pending samples among the first `config.limit` into an open run folder, then
    score, export and report every finished record of the folder: `--limit` bounds what is
    requested, never what a finished run's outputs cover."""
    from needlepoint.contract.usage import Budget, load_prices, summary_line
    from needlepoint.core.outcome import summary_lines
    from needlepoint.run.runner import RunOptions, pending, run

    started = time.monotonic()
    prices = load_prices(config.prices, config.price)
    budget = Budget(config.max_cost, config.max_tokens_total, prices)

    store.update_header(
        status="running",
        last_started=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        config=config.public(),
        sampling_sent=sampling_sent(bench, samples, generation),
    )
    model = given if given is not None else _model(config)
    owned = [*([] if given is not None else [model]), *solver.models().values()]
    options = RunOptions(concurrency=config.concurrency, retry_failed=config.retry_failed, show_progress=config.show_progress)
    done = store.records()
    if budget.active:  # what the stored records used counts against the same budget
        budget.add_records(done.values())
        options.gate = budget
    requested = samples[: config.limit] if config.limit else samples
    todo = pending(requested, done, config.retry_failed)

    if config.batch:  # --batch: the requests go out as batches (batchrun.py)
        from needlepoint.run.batchrun import wrap

        model = wrap(model, config, store.dir, todo, options)
        owned[0] = model

    async def go() -> None:
        try:
            await run(bench, requested, model, store, generation, options, solver)
        finally:
            await _close(owned)

    workers: list[Any] = []
    drafts = None
    try:
        drafts = _drafts(config, bench, samples, store, len(todo))
        if config.processes > 1:
            workers = _answer_in_processes(config, bench, samples, generation, store, solver, given, options)
        elif config.batch:
            from needlepoint.models.batch import BatchStopped

            try:
                run_async(go)
            except BatchStopped as exc:  # a batch that cannot be followed now: kept for the rerun
                options.stopped = str(exc)
        else:
            run_async(go)
        if drafts is not None:
            drafts.wind_down()  # they make the rows of the last answers while the run scores (report.drafts)
        with collector_paused():  # a full collection would walk the records and free nothing
            give_back_freed()  # the answering's request bodies, before the scoring and the report allocate theirs
            records = store.records()
            wanted = [i for i, r in records.items() if r.get("status") not in status.RETRYABLE]
            compact(store.dir, wanted)  # the calls still wanted
            result = finish(bench, samples, records, store.dir, solver.label(config.model), config.ci, prices)
            result.notes = summary_lines([records[s.id] for s in samples if s.id in records])
            wall_s = round(float(store.header.get("wall_s") or 0.0) + time.monotonic() - started, 3)  # over every resume
            result.usage_line = summary_line(result.metrics["usage"], wall_s)
            result.stopped = options.stopped or budget.stop_reason()
            if result.stopped:
                result.notes.append(f"the run stopped early: {result.stopped}")
            # "complete": every requested sample answered (a --limit run is complete at its limit, so that a
            # changed configuration starts a new folder); metrics.json's run block still says how many of the
            # dataset's samples have answers, and `needlepoint report` marks the run from it.
            complete = all(s.id in records for s in requested) and not result.failed and not result.stopped
            stats = [m.endpoint_stats() for m in (model, *solver.models().values()) if isinstance(m, CountsEndpoints)]
            stats += [w.endpoints for w in workers]  # --processes: the workers' clients sent the requests
            endpoints = add_stats(store.header.get("endpoints"), *stats)  # every model's, the solver's too
            store.update_header(
                status="complete" if complete else "incomplete",
                finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                endpoints=endpoints,
                wall_s=wall_s,
            )
            if config.report:
                if drafts is not None:
                    drafts.stop(wait=True)  # the rows they are still making: sooner than made again
                answered = samples.subset(records)  # every finished record, not only this call's
                result.exports.extend(  # the run's end links an image file it has no thumbnail of rather than decode it
                    write_report(
                        store.dir, bench, answered, [records[s.id] for s in answered], result.metrics, store.header, True
                    )
                )
            return result
    finally:
        if drafts is not None:
            drafts.stop()


def _drafts(config: RunConfig, bench: Benchmark, samples: Dataset[Any], store: RunStore, expected: int) -> Any:
    """The processes that make the report's rows and thumbnails while the run answers `expected`
    samples (report.drafts), or None (--no-report, little to answer)."""
    if not config.report:
        return None
    from needlepoint.report import drafts
    from needlepoint.report.html import REPORT_DIR, THUMBS_DIR

    def items_of(done: list[Any], records: list[Record]) -> list[Any]:
        return bench.report_items(samples.with_samples(done), records)

    return drafts.start(store.dir / REPORT_DIR / THUMBS_DIR, store.records_path, list(samples), items_of, expected)


def _answer_in_processes(
    config: RunConfig,
    bench: Benchmark,
    samples: Dataset[Any],
    generation: Generation,
    store: RunStore,
    solver: Solver,
    given: Model | None,
    options: Any,
) -> list[Any]:
    """--processes N: the pending samples answered by forked workers (processes.py), each with its
    own clients, its share of --concurrency and of the solver's `*_concurrency` settings and
    the run's limit of internal errors, which this process also counts over all of them; this
    process copies their records into the records file and drives the progress display."""
    from dataclasses import replace

    from needlepoint.core.errors import InternalFault
    from needlepoint.core.progress import RunProgress, make_progress
    from needlepoint.run.processes import WorkerEnd, answer_in_processes, split
    from needlepoint.run.runner import RunOptions, internal_error_limit, pending, run
    from needlepoint.solvers import make_solver

    if given is not None:
        raise DataError(
            "--processes sends requests from several processes, but a model object answers in this one; pass processes=1"
        )
    local = [role for role, m in solver.models().items() if not isinstance(m, CountsEndpoints)]
    if local:
        raise DataError(
            f"--processes runs HTTP clients in several processes, but the solver's {local[0]} is a model of this process; "
            "pass --processes 1 (or use a served one)"
        )
    requested = samples[: config.limit] if config.limit else samples
    done = store.records()
    todo = pending(requested, done, options.retry_failed)
    bounds = [v for k, v in config.solver_options.items() if k.endswith("_concurrency") and type(v) is int]
    count = max(1, min(config.processes, config.concurrency, *bounds, len(todo)))  # at least one in flight each
    limit = internal_error_limit(len(todo))  # the run's, not a worker's part's

    def answer(part: list[Any], index: int) -> WorkerEnd:
        def share(bound: Any) -> Any:  # this worker's part of a number in flight
            return split(bound, count, index) if type(bound) is int else bound

        mine = replace(
            config,
            concurrency=share(config.concurrency),
            solver_options={k: share(v) if k.endswith("_concurrency") else v for k, v in config.solver_options.items()},
            show_progress=False,
        )
        own = make_solver(mine.solver, bench, client_settings(mine), **mine.solver_options)
        _check_solver_models(own)  # e.g. an embedder's probe of its vector length, as the command's own
        model = _model(mine)
        clients = [model, *own.models().values()]
        opts = RunOptions(concurrency=mine.concurrency, retry_failed=mine.retry_failed, show_progress=False)
        opts.internal_limit = limit  # the run's: this process counts all the workers' against it

        async def go() -> None:
            try:
                await run(bench, part, model, store, generation, opts, own)
            finally:
                await _close(clients)

        run_async(go)
        stats = [m.endpoint_stats() for m in clients if isinstance(m, CountsEndpoints)]
        return WorkerEnd(stopped=opts.stopped, endpoints=add_stats(*stats))

    todo_ids = {s.id for s in todo}
    finished = [outcome(done[s.id]) for s in requested if s.id in done and s.id not in todo_ids]
    progress: list[RunProgress] = []  # started once the workers are forked: a display's thread is not forked
    internal: list[str] = []

    def on_record(record: Record) -> None:
        if str(record["id"]) not in todo_ids:
            return
        todo_ids.discard(str(record["id"]))
        finished.append(outcome(record))
        for shown in progress:
            shown.advance(failed=record.get("status") in status.FAILED)
        if record.get("status") == status.INTERNAL_ERROR:
            internal.append(str(record["id"]))
            if len(internal) >= limit:
                raise InternalFault(
                    f"{len(internal)} samples hit a fault in needlepoint itself (e.g. {record['id']}: {record.get('error')}); "
                    f"the run stops: their tracebacks are in {store.records_path}, please report them"
                )

    def start() -> None:
        progress.append(make_progress(bench, len(todo), finished, options.show_progress, options.progress_every_s))

    def tick() -> None:
        for shown in progress:
            shown.tick()

    try:
        ends = answer_in_processes(count, todo, sample_cost(bench), answer, store, on_record, start, tick)
    finally:
        for shown in progress:
            shown.close()
    options.stopped = next((e.stopped for e in ends if e.stopped), None)
    return ends


def finish(
    bench: Benchmark,
    samples: Dataset[Any],
    records: dict[str, Record],
    run_dir: Path,
    model: str,
    ci: CiSettings | None = None,
    prices: Prices | None = None,
) -> RunResult:
    """Score the stored records, write metrics.json and the authors' formats.

    The headline metrics cover the answered samples only: a failed request (status.FAILED) is no
    wrong answer, so it is left out of `bench.score` and counted in the `run` block instead
    (`answered` of `requested`). A run with nothing answered has no metrics: metrics.json then holds
    only the `run` block (and `usage`: tokens, requests, time and cost per role, usage.summarize,
    priced by `prices`). The authors' formats (`bench.export`) keep their own rules and get every
    record, failed ones too (docs/benchmarks.md says what each includes). `ci` sets the bootstrap
    intervals of the headline numbers, kept in their own `intervals` block (docs/statistics.md)."""
    from needlepoint.contract.usage import read_estimate, summarize
    from needlepoint.core.outcome import run_counts
    from needlepoint.stats import interval_block, resampler_of

    ordered = [records[s.id] for s in samples if s.id in records]
    answered = [r for r in ordered if r.get("status") not in status.FAILED]
    failed = [r["id"] for r in ordered if r.get("status") in status.FAILED]
    scored = samples.subset({r["id"] for r in answered})
    source = run_dir / RECORDS  # a stored record the benchmark cannot read is named, not a traceback
    metrics = read_or_name(bench.score, scored, answered, source, bench.name, "score") if answered else {}
    block = interval_block(resampler_of(bench, scored, answered), ci or CiSettings()) if metrics else None
    if block is not None:
        metrics["intervals"] = block
    counts = run_counts(ordered)
    metrics["run"] = {
        "samples": len(samples),
        "requested": counts["answered"] + counts["failed"],
        **counts,
        "not_requested": len(samples) - len(ordered),
        "failed_ids": failed[:1000],
        "skipped": [{"id": i, "reason": r} for i, r in samples.skipped],
    }
    metrics["usage"] = summarize(ordered, prices, read_estimate(run_dir))
    write_json(run_dir / METRICS, metrics)

    def export(folder: Path, d: Dataset[Any], r: list[Record]) -> list[Path]:
        return list(bench.export(folder, d, r, model, metrics))

    def probe(d: Dataset[Any], r: list[Record]) -> list[Path]:  # the run's own files stay as they were
        with scratch_folder("needlepoint-probe-") as scratch:
            return export(scratch, d, r)

    exports = read_or_name(lambda d, r: export(run_dir, d, r), samples, ordered, source, bench.name, "export", probe)
    return RunResult(run_dir=run_dir, metrics=metrics, benchmark=bench, failed=failed, exports=list(exports))


def write_report(
    run_dir: Path,
    bench: Benchmark,
    samples: Dataset[Any],
    records: list[Record],
    metrics: dict[str, Any],
    header: RunHeader,
    link_missing: bool = False,
) -> list[Path]:
    """The HTML report of a run (`<run>/report/index.html`) with its header (run.json, as the open
    RunStore holds it) and the benchmark's figures (`DrawsFigures`, drawn first: the page shows
    them); `link_missing`: see `report.html.write_run_report`."""
    from needlepoint.contract.base import DrawsFigures
    from needlepoint.report.html import write_run_report

    figures = bench.figures(run_dir, metrics) if isinstance(bench, DrawsFigures) else []
    return [*figures, write_run_report(run_dir, bench, samples, records, metrics, header, link_missing)]


def read_predictions(bench: Benchmark, predictions: Path, data: Path | None) -> PredictionsRun:
    """The authors' prediction file (or a run folder) read as a run by the benchmark's
    `predictions_run` (`ReadsPredictions`); DataError for a benchmark that reads none."""
    if not isinstance(bench, ReadsPredictions):
        raise DataError(
            f"{bench.name} reads no prediction file of its own to score; its run folder's metrics.json holds the scores"
        )
    return bench.predictions_run(predictions, data)


def score_predictions(bench: Benchmark, found: PredictionsRun, ci: CiSettings | None = None) -> dict[str, Any]:
    """The metrics of a prediction file read as a run: the benchmark's own `score` of its records,
    every one of them (a failed request the file records counts as the authors' scorer counts it),
    and with `ci` (default: 1,000 resamples at 95%) the `intervals` of its `resampler`. A file of
    several models (`by_model`) gives {"models": {model: metrics}}, without intervals."""
    if found.by_model:
        return {"models": {m: bench.score(run.dataset, run.records) for m, run in found.by_model.items()}}
    metrics = bench.score(found.dataset, found.records)
    settings = ci or CiSettings()
    if settings.enabled and "intervals" not in metrics:
        from needlepoint.stats import interval_block, resampler_of

        block = interval_block(resampler_of(bench, found.dataset, found.records), settings)
        if block is not None:
            metrics["intervals"] = block
    return metrics


def score(
    benchmark: str, predictions: str | Path, data: str | Path | None = None, *, ci: CiSettings | None = None, **options: Any
) -> tuple[Benchmark, dict[str, Any]]:
    """Metrics of saved predictions in the authors' format (or a run folder), without a model.

    The benchmark reads the file as a run (`predictions_run`) and scores it with its own `score`
    and `resampler` (`score_predictions`). A run folder must be one of `benchmark`; its data path
    (run.json) stands in for a missing `data`. With `ci` (default: 1,000 resamples at 95%) the
    metrics get an `intervals` block where the benchmark can resample."""
    predictions = Path(predictions).expanduser()
    data = Path(data).expanduser() if data is not None else None
    bench = make(benchmark, **options)
    if not predictions.exists():
        raise DataError(f"--predictions {predictions} does not exist")
    folder = predictions if predictions.is_dir() else predictions.parent if predictions.name == RECORDS else None
    header = RunStore.read_header(folder) if folder is not None else None
    if header is not None:
        config = header.get("config")
        config = config if isinstance(config, dict) else {}
        ident = header.get("identity")
        ran = config.get("benchmark") or (ident.get("benchmark") if isinstance(ident, dict) else None)
        if ran and ran != benchmark:
            raise DataError(f"{folder} is a run folder of {ran}, not {benchmark}; score it with `needlepoint score {ran}`")
        if data is None and config.get("data"):
            data = Path(str(config["data"]))
    return bench, score_predictions(bench, read_predictions(bench, predictions, data), ci)

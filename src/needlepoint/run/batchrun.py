"""`needlepoint eval --batch`: the flags, the combinations refused, and the run's batching model
(models/batching.py). Batching changes how requests travel, not what they ask: `--batch` is
recorded in run.json's config, not in the run identity, so a batch run and a live run of the same
settings share a folder (and resume each other).

`--batch-deadline H` (default 24, the completion window the batches are created with) bounds how
long one run waits for an unfinished batch: past it the run stops with one sentence, the batch
kept in `<run>/batches.jsonl`, so that rerunning the command waits for it again (RunConfig's
`batch_deadline_h`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from needlepoint.core.aio import run as run_async
from needlepoint.core.errors import DataError

__all__ = ["DEFAULT_DEADLINE_H", "add_arguments", "check_batch_api", "config_values", "refusal", "wrap"]

DEFAULT_DEADLINE_H = 24.0  # the Batch API's completion window ("24h")


def add_arguments(parser: Any) -> None:
    """The `eval` flags of the Batch API (argparse)."""
    group = parser.add_argument_group("OpenAI Batch API (docs/cost.md)")
    group.add_argument(
        "--batch",
        action="store_true",
        help="send the requests as OpenAI batches (/v1/files, /v1/batches): first turns in one batch, repair turns in the next",
    )
    group.add_argument(
        "--batch-poll", type=float, default=30.0, metavar="S", help="seconds between batch status requests (default 30)"
    )
    group.add_argument(
        "--batch-deadline",
        type=float,
        default=DEFAULT_DEADLINE_H,
        metavar="H",
        help="hours a run waits for an unfinished batch before it stops, keeping the batch for a rerun "
        "(default 24, the completion window)",
    )


def config_values(ns: Any) -> dict[str, Any]:
    """RunConfig's keywords from the flags of `add_arguments`; refuses --batch with --repeats."""
    if ns.batch and getattr(ns, "repeats", None) is not None:
        raise DataError("--batch does not run --repeats; run each repeat's seed on its own with --seed, or drop --batch")
    if not ns.batch_deadline > 0:
        raise DataError("--batch-deadline must be a positive number of hours")
    return {"batch": ns.batch, "batch_poll_s": ns.batch_poll, "batch_deadline_h": ns.batch_deadline}


def refusal(config: Any, solver_models: Mapping[str, Any], given_model: Any = None) -> str | None:
    """Why `config` cannot run with --batch (one sentence), or None when it can (or --batch is off)."""
    if not config.batch:
        return None
    if not config.batch_poll_s > 0:
        return "--batch-poll must be a positive number of seconds"
    if not config.batch_deadline_h > 0:
        return "--batch-deadline must be a positive number of hours"
    if given_model is not None:
        return "--batch sends to an --api-url; a model object answers by itself (drop batch=True)"
    if config.serve is not None:
        return "--batch needs an endpoint with /v1/batches (OpenAI's); a server started by --serve has none: drop --batch"
    if len(config.api_urls) != 1:
        return "--batch sends every batch to one endpoint; give exactly one --api-url"
    if config.max_cost is not None or config.max_tokens_total is not None:
        return "--max-cost and --max-tokens-total stop a run between requests, but a batch is sent whole: drop them or --batch"
    if solver_models:
        roles = ", ".join(solver_models)
        return f"--batch sends only --model's requests; --solver {config.solver} also asks {roles} turn by turn: drop --batch"
    return None


def check(config: Any, solver_models: Mapping[str, Any], given_model: Any = None) -> None:
    """Raise DataError with `refusal`'s sentence."""
    why = refusal(config, solver_models, given_model)
    if why is not None:
        raise DataError(why)


def check_batch_api(config: Any) -> None:
    """Raise DataError (one sentence) when the run's endpoint has no Batch API (`GET /v1/files`
    and `GET /v1/batches` do not answer): before a run folder exists, as the endpoint check does."""
    from needlepoint.models.batch import BatchClient

    client = BatchClient(config.api_urls[0], Path("/nonexistent"), config.api_key)  # the state file is not read
    why = run_async(client.check)
    if why is not None:
        raise DataError(why)


def wrap(model: Any, config: Any, run_dir: Path, todo: Sequence[Any], options: Any) -> Any:
    """The batching model over the run's HTTP client, with `options` (runner.RunOptions) set so
    that every pending sample is in flight (at most MAX_BATCH_REQUESTS) and each stored record
    tells the collector."""
    from needlepoint.models.batching import BATCH_STATE, MAX_BATCH_REQUESTS, BatchingModel, batch_progress

    progress = batch_progress()  # plain lines, with --no-progress and without a terminal too: a batch may take hours
    batching = BatchingModel(
        model, run_dir / BATCH_STATE, config.api_key, config.batch_poll_s, progress=progress, deadline_h=config.batch_deadline_h
    )
    options.concurrency = max(1, min(len(todo), MAX_BATCH_REQUESTS))
    batching.expect(len(todo), options.concurrency)
    before = options.on_record

    def on_record(sample: Any, record: Any) -> None:
        if before is not None:
            before(sample, record)
        batching.recorded()

    options.on_record = on_record
    return batching

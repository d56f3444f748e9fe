"""The `eval`, `score` and `merge` sub-commands: their parsers (`add_parser`) and handlers (`run`),
and what they share: the benchmarks' and solvers' declared flags, the generation flags, the
metrics printed at the end. Exit codes are the command line's (needlepoint/cli.py)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from needlepoint.contract import usage
from needlepoint.contract.registry import names
from needlepoint.core.errors import EXIT_FAILED_SAMPLES, EXIT_OK, DataError
from needlepoint.core.files import json_text
from needlepoint.core.intervalsettings import add_ci_flags, ci_settings
from needlepoint.core.options import Option, add_options, given
from needlepoint.run import batchrun, dryrun
from needlepoint.serve import flags as serve_flags

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`needlepoint eval`, `needlepoint score` and `needlepoint merge`."""
    _add_eval(sub)
    _add_score(sub)
    _add_merge(sub)


def run(ns: argparse.Namespace) -> int:
    """Run the sub-command of this module that the command line named."""
    handlers = {"eval": run_eval, "score": run_score, "merge": run_merge}
    return handlers[ns.command](ns)


# --- the flags benchmarks and solvers declare ----------------------------------------------------


def _merged(kind: str) -> list[Option]:
    """The flags the registered benchmarks declare (`kind`: "options" for eval, "score_options"
    for score), each once: a flag several benchmarks declare keeps the first one's text and names,
    at the end of its help, the benchmarks it applies to (none named when it applies to all)."""
    from needlepoint.contract.registry import declarations

    decls = declarations()
    by_flag: dict[str, tuple[Option, list[str]]] = {}
    for d in decls:
        for opt in getattr(d, kind):
            first, users = by_flag.setdefault(opt.flag, (opt, []))
            if (first.type, first.switch, first.repeat) != (opt.type, opt.switch, opt.repeat):
                raise ValueError(f"{d.name} declares {opt.flag} unlike {users[0]} does (type, switch or repeat differ)")
            users.append(d.name)
    every = kind == "options" and len(decls) > 1
    return [
        replace(opt, help=opt.help if every and len(users) == len(decls) else f"{opt.help} ({', '.join(users)})")
        for opt, users in by_flag.values()
    ]


def _bench_options(p: argparse.ArgumentParser) -> None:
    add_options(p.add_argument_group("benchmark options (each applies to the benchmarks named)"), _merged("options"), set())


def _options(ns: argparse.Namespace, kind: str = "options") -> dict[str, Any]:
    """The benchmark flags that were given, by keyword (`make` refuses those of other benchmarks)."""
    return given(ns, _merged(kind))


def _declared_solvers() -> list[tuple[str, str, type]]:
    """(benchmark, solver name, class) of every solver a benchmark declares besides the default."""
    from needlepoint.contract.declaration import load_target
    from needlepoint.contract.registry import declarations

    return [(d.name, name, load_target(target)) for d in declarations() for name, target in d.solvers.items()]


def _solver_flags(p: argparse.ArgumentParser) -> None:
    """Each declared solver's own flags (its `options`), in a group per solver."""
    from needlepoint.solvers import solver_options

    seen: set[str] = set()
    for bench_name, name, cls in _declared_solvers():
        options = solver_options(cls)
        if options:
            add_options(p.add_argument_group(f"--solver {name} ({bench_name})"), options, seen)


def _given_solver_flags(ns: argparse.Namespace) -> dict[str, Any]:
    """The chosen solver's flags that were given, by keyword; DataError for a flag of another solver."""
    from needlepoint.solvers import solver_options

    declared = _declared_solvers()
    own = [o for b, n, cls in declared if (b, n) == (ns.benchmark, ns.solver) for o in solver_options(cls)]
    own_flags = {o.flag for o in own}
    for b, n, cls in declared:
        for o in solver_options(cls):
            if o.flag not in own_flags and getattr(ns, o.dest, None) is not None:
                raise DataError(f"{o.flag} applies to `needlepoint eval {b} --solver {n}`; add --solver {n} or drop {o.flag}")
    return given(ns, own)


# --- the parsers ----------------------------------------------------------------------------------


def _add_eval(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ev = sub.add_parser("eval", help="evaluate a served model on a benchmark (resumes an interrupted run)")
    ev.add_argument("benchmark", choices=names())
    ev.add_argument("--data", required=True, help="the benchmark's release folder (or file)")
    ev.add_argument("--model", required=True, help="the model name the server expects")
    ev.add_argument(
        "--api-url",
        action="append",
        help="base URL such as http://localhost:8000/v1; repeat to spread requests (not with --serve or --dry-run)",
    )
    ev.add_argument("--api-key", help="API key (default: $OPENAI_API_KEY); never written to disk")
    ev.add_argument("--limit", type=int, help="only the first N samples")
    ev.add_argument(
        "--sample",
        type=int,
        metavar="N",
        help="a stratified random subset of N samples, seeded by --seed (0 when not given): the samples a "
        "`needlepoint human --plan N --seed S` plan takes (docs/evaluating.md); a run of its own",
    )
    ev.add_argument(
        "--sample-seed",
        type=int,
        metavar="S",
        help="the --sample subset's seed when it should differ from --seed (the seed sent with every request)",
    )
    ev.add_argument("--concurrency", type=int, default=32, help="requests in flight (default 32)")
    ev.add_argument(
        "--processes",
        type=int,
        default=1,
        help="client processes that answer the run, sharing --concurrency (default 1; more where one process's CPU is the bound)",
    )
    ev.add_argument(
        "--out",
        type=Path,
        help="run folder (default runs/<benchmark>/<model>/<identity hash>: the same command finds its run again)",
    )
    ev.add_argument(
        "--fresh",
        action="store_true",
        help="start a new run instead of resuming (with --out, a run already there is moved aside to OUT.replaced-TIME)",
    )
    ev.add_argument("--retry-failed", action="store_true", help="rerun only the samples of an existing run whose request failed")
    from needlepoint.models.detector_model import OPTIONS as DETECTOR_OPTIONS

    add_options(ev.add_argument_group("detector families (--model-family grounding-dino, owlv2)"), DETECTOR_OPTIONS, set())
    ev.add_argument("--temperature", type=float, help="sampling temperature, 0 or more (default: the benchmark authors')")
    ev.add_argument("--top-p", type=float, help="nucleus sampling mass in (0, 1] (default: the benchmark authors')")
    ev.add_argument("--max-tokens", type=int, help="most tokens a reply may have (default: the benchmark authors')")
    ev.add_argument("--seed", type=int, help="sampling seed sent with every request")
    ev.add_argument(
        "--repeats",
        type=int,
        metavar="K",
        help="answer every sample K times (needs --temperature above 0), repeat r with seed --seed + r (docs/reporting.md)",
    )
    ev.add_argument("--timeout", type=float, help="seconds per request (default 180)")
    ev.add_argument(
        "--extra-body", help="JSON object merged into every request body (keys neither OpenAI nor vLLM knows are warned about)"
    )
    ev.add_argument(
        "--neutral-sampling",
        action="store_true",
        help="send neutral values (temperature 1, top_p 1, top_k -1, min_p 0, repetition_penalty 1, presence/frequency_penalty 0) "
        "for the sampling settings the benchmark's authors left to the server, instead of the model's generation_config",
    )
    ev.add_argument(
        "--max-wait",
        type=float,
        default=300.0,
        help="longest wait in seconds for a retry (Retry-After or backoff, default 300); a server asking for longer fails the request at once",
    )
    ev.add_argument(
        "--max-retries", type=int, default=6, help="retries of a failed request before it is recorded as failed (default 6)"
    )
    ev.add_argument("--max-request-bytes", type=int, help="report requests larger than this instead of sending them")
    ev.add_argument("--reencode-images", action="store_true", help="re-encode JPEG sources too (JPEG q95 after RGB)")
    ev.add_argument(
        "--local-images",
        action="store_true",
        help="send image files the client would send as they are by their file:// URL, for a server on this machine to "
        "read itself instead of their base64 (vLLM: --allowed-local-media-path DATA; --serve vllm adds it); "
        "the model sees the same bytes",
    )
    ev.add_argument(
        "--shard",
        metavar="I/N",
        help="answer only shard I of N (a fixed, cost-balanced 1/N of the samples); combine the shards with `needlepoint merge`",
    )
    ev.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines on stderr")
    ev.add_argument("--no-report", action="store_true", help="skip the HTML report")
    ev.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    add_ci_flags(ev)
    ev.add_argument(
        "--solver",
        default="default",
        help="how a sample is answered: default (the benchmark's prompt, one model, one repair turn) or a solver "
        "the benchmark declares (docs/solvers.md)",
    )
    ev.add_argument(
        "--solver-option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a setting of the solver (VALUE read as JSON when it parses, else as text); repeat for several",
    )
    ev.add_argument(
        "--structured-output",
        action="store_true",
        help="send the answer's JSON schema as response_format (a protocol of its own on the leaderboard: + schema)",
    )
    usage.add_arguments(ev)
    batchrun.add_arguments(ev)
    _bench_options(ev)
    _solver_flags(ev)
    serve_flags.add_arguments(ev)
    dryrun.add_arguments(ev)


def _add_score(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sc = sub.add_parser("score", help="score saved predictions (authors' formats or a run folder) without a model")
    sc.add_argument("benchmark", choices=names())
    sc.add_argument("--predictions", required=True, type=Path, help="the authors' prediction file or folder, or a run folder")
    sc.add_argument("--data", type=Path, help="the release folder, where scoring needs the annotations (mc_bench)")
    sc.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")
    sc.add_argument("--out", type=Path, help="also write the predictions as a run folder (docs/reporting.md)")
    sc.add_argument("--label", help="with --out: the model's name when the file names none (default: the file's name)")
    add_ci_flags(sc)
    add_options(sc, _merged("score_options"), set())


def _add_merge(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mg = sub.add_parser("merge", help="merge the shard runs of one evaluation (--shard I/N) into one run folder")
    mg.add_argument("runs", nargs="+", type=Path, help="the shards' run folders")
    mg.add_argument("--out", required=True, type=Path, help="the merged run folder")
    mg.add_argument(
        "--allow-partial",
        action="store_true",
        help="merge what exists when shards or samples are missing (exit code 3, as for failed samples)",
    )
    mg.add_argument(
        "--data", type=Path, help="the dataset, where this machine sees it elsewhere than the shards did (same content)"
    )
    mg.add_argument("--no-report", action="store_true", help="skip the HTML report")
    mg.add_argument("--json", action="store_true", help="print the metrics as JSON on stdout")


# --- from flags to settings -----------------------------------------------------------------------


def _generation(ns: argparse.Namespace) -> dict[str, Any]:
    """The generation settings given on the command line (--temperature ... --extra-body)."""
    gen: dict[str, Any] = {
        "temperature": ns.temperature,
        "top_p": ns.top_p,
        "max_tokens": ns.max_tokens,
        "seed": ns.seed,
        "timeout_s": ns.timeout,
    }
    if ns.extra_body:
        try:
            extra = json.loads(ns.extra_body, parse_constant=_no_constant, parse_float=_finite_number, parse_int=_finite_number)
        except (ValueError, RecursionError):  # RecursionError: nested thousands deep
            raise DataError(
                "--extra-body must be a JSON object of finite numbers, strings and lists, e.g. '{\"top_k\": 1}'"
            ) from None
        if not isinstance(extra, dict):
            raise DataError("--extra-body must be a JSON object, e.g. '{\"top_k\": 1}'")
        from needlepoint.core.redact import is_credential_name

        secret = next((k for k in extra if is_credential_name(k)), None)
        if secret is not None:  # every request's body is part of run.json's identity and of the records
            raise DataError(
                f"--extra-body holds a credential ({secret!r}), which run.json would keep; pass the key with --api-key "
                "or $OPENAI_API_KEY"
            )
        gen["extra"] = extra
        from needlepoint.models.openai_compat import unknown_body_keys

        unknown = unknown_body_keys(extra)
        if unknown:
            print(
                f"needlepoint: warning: --extra-body key(s) {', '.join(unknown)} are known to neither the OpenAI chat API "
                "nor vLLM, which ignores unknown keys silently; check the spelling",
                file=sys.stderr,
            )
    return {k: v for k, v in gen.items() if v is not None}


def _sample_seed(ns: argparse.Namespace) -> int:
    """The --sample subset's seed: --sample-seed, else --seed, else 0 (--repeats changes only the
    requests' seed, so every repeat answers the same subset)."""
    if ns.sample_seed is not None and ns.sample is None:
        raise DataError("--sample-seed seeds the subset --sample N takes; add --sample N or drop --sample-seed")
    if ns.sample_seed is not None:
        return int(ns.sample_seed)
    return int(ns.seed) if ns.seed is not None else 0


def _solver_options(items: list[str]) -> dict[str, Any]:
    """`--solver-option KEY=VALUE` settings as keywords of the solver (VALUE as JSON when it parses)."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise DataError(f"--solver-option {item!r} is not KEY=VALUE; write e.g. --solver-option threshold=0.05")
        try:
            out[key.strip().replace("-", "_")] = json.loads(value, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # not JSON (or nested thousands deep): the text itself
            out[key.strip().replace("-", "_")] = value
    return out


def _all_solver_options(ns: argparse.Namespace) -> dict[str, Any]:
    """The solver's settings from `--solver-option KEY=VALUE` and its own flags; DataError when
    both set one setting (e.g. --localizer and --solver-option localizer=...): neither silently wins."""
    generic = _solver_options(ns.solver_option)
    flags = _given_solver_flags(ns)
    both = sorted(set(generic) & set(flags))
    if both:
        flag = "--" + both[0].replace("_", "-")
        raise DataError(f"{flag} and --solver-option {both[0]}=... both set the solver's {both[0]}; pass only one of them")
    return {**generic, **flags}


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def _finite_number(text: str) -> float | int:
    """A JSON number of --extra-body, refused (ValueError) unless finite and within float range."""
    from needlepoint.core.numeric import is_finite

    value = int(text) if text.lstrip("-").isdigit() else float(text)
    if not is_finite(value):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def _print_metrics(bench: Any, metrics: dict[str, Any], as_json: bool) -> None:
    """The metrics on stdout: as JSON, or as the benchmark's tables with their intervals."""
    from needlepoint.core.outcome import has_metrics

    if as_json:
        print(json_text(metrics, indent=2))
        return
    if not has_metrics(metrics):  # nothing answered: metrics.json holds only the run block
        run = metrics.get("run", {})
        print(f"no metrics: none of the {run.get('requested')} requested samples was answered", file=sys.stderr)
        return
    from needlepoint.report.terminal import print_tables
    from needlepoint.stats.tables import with_intervals

    print_tables(with_intervals(bench.tables(metrics), metrics))


# --- the handlers ---------------------------------------------------------------------------------


def run_eval(ns: argparse.Namespace) -> int:
    """`needlepoint eval`: evaluate (or resume), print the metrics and where the run is."""
    from needlepoint.core.config import RunConfig
    from needlepoint.run.evaluate import evaluate

    solver_options = _all_solver_options(ns)
    plan = None if ns.dry_run else serve_flags.plan_from_args(ns, solver_options, not ns.no_progress and not ns.json)
    config = RunConfig(
        benchmark=ns.benchmark,
        data=Path(ns.data).expanduser(),
        model=plan.name("model") or ns.model if plan else ns.model,
        api_urls=plan.urls("model") or ns.api_url or [] if plan else ns.api_url or [],
        api_key=ns.api_key or os.environ.get("OPENAI_API_KEY"),
        options=_options(ns),
        generation=_generation(ns),
        limit=ns.limit,
        sample=ns.sample,
        sample_seed=_sample_seed(ns),
        concurrency=ns.concurrency,
        processes=ns.processes,
        out=ns.out,
        fresh=ns.fresh,
        retry_failed=ns.retry_failed,
        max_retries=ns.max_retries,
        reencode_images=ns.reencode_images,
        local_images=ns.local_images,
        max_request_bytes=ns.max_request_bytes,
        max_wait_s=ns.max_wait,
        neutral_sampling=ns.neutral_sampling,
        show_progress=not ns.no_progress and not ns.json,
        report=not ns.no_report,
        solver=ns.solver,
        solver_options=solver_options,
        shard=ns.shard,
        ci=ci_settings(ns),
        serve=plan,
        structured_output=ns.structured_output,
        **usage.config_values(ns),
        **batchrun.config_values(ns),
    )
    if ns.dry_run:
        return dryrun.run_cli(ns, config)
    with plan if plan is not None else contextlib.nullcontext():  # servers stop at the end, on Ctrl-C, SIGTERM, failure
        if ns.repeats is not None:
            from needlepoint.run.repeats import evaluate_repeats, summary_table

            summary, results = evaluate_repeats(config, ns.repeats)
            if ns.json:
                print(json_text(summary, indent=2))
            else:
                from needlepoint.report.terminal import print_tables

                print_tables([summary_table(summary)])
            print(f"repeat run folders: {', '.join(str(r.run_dir) for r in results)}", file=sys.stderr)
            return EXIT_FAILED_SAMPLES if any(r.failed for r in results) else EXIT_OK
        result = evaluate(config, model=detector) if (detector := _detector(ns, config)) else evaluate(config)
    _print_metrics(result.benchmark, result.metrics, ns.json)
    err = sys.stderr
    print(f"run folder: {result.run_dir}", file=err)
    skipped = result.metrics.get("run", {}).get("skipped", [])
    if skipped:
        first = skipped[0]
        print(
            f"{len(skipped)} row(s) skipped as invalid, not sent (e.g. {first['id']}: {first['reason']}); listed in metrics.json under run.skipped",
            file=err,
        )
    if result.usage_line:
        print(result.usage_line, file=err)
    for line in result.notes:  # failures by kind, what --retry-failed would ask again, context overflows
        print(line, file=err)
    return EXIT_FAILED_SAMPLES if result.failed or result.stopped else EXIT_OK


def _detector(ns: argparse.Namespace, config: Any) -> Any:
    """The in-process detector of a detector family (`--model-family grounding-dino`, `owlv2`),
    loaded now so that a bad model folder is one sentence before the run; None for any other run,
    which the detector flags are refused for."""
    from needlepoint.families import family
    from needlepoint.models.detector_model import OPTIONS as DETECTOR_OPTIONS

    fam = family(ns.model_family) if getattr(ns, "model_family", None) else None
    if fam is None or fam.detector is None:
        given_flags = [o.flag for o in DETECTOR_OPTIONS if getattr(ns, o.dest, None) is not None]
        if given_flags:
            raise DataError(f"{', '.join(given_flags)} applies to a detector family (--model-family grounding-dino or owlv2)")
        return None
    if config.api_urls or config.serve is not None or ns.repeats is not None:
        raise DataError(f"--model-family {fam.name} runs the detector in this process; drop --api-url, --serve and --repeats")
    from needlepoint.contract.registry import make
    from needlepoint.models.detector_model import detector_model

    one_box = bool(getattr(make(config.benchmark, **config.options), "scores_first_box", False))
    return detector_model(
        fam.detector, ns.model, ns.score_threshold, top1=one_box, device=ns.detector_device, batch_size=ns.detector_batch
    )


def run_score(ns: argparse.Namespace) -> int:
    """`needlepoint score`: score saved predictions, print the metrics (and write a run folder with --out)."""
    from needlepoint.run.evaluate import score

    if ns.label is not None and ns.out is None:
        raise DataError("--label names the model of the run folder that --out writes; add --out DIR or drop --label")
    if ns.out is not None:
        from needlepoint.run.predictions_run import write_predictions_run

        bench, metrics, out = write_predictions_run(
            ns.benchmark, ns.predictions, ns.data, ns.out, ns.label, ci_settings(ns), **_options(ns, "score_options")
        )
        _print_metrics(bench, metrics, ns.json)
        print(f"run folder: {out}", file=sys.stderr)
        return EXIT_OK
    bench, metrics = score(ns.benchmark, ns.predictions, ns.data, ci=ci_settings(ns), **_options(ns, "score_options"))
    _print_metrics(bench, metrics, ns.json)
    return EXIT_OK


def run_merge(ns: argparse.Namespace) -> int:
    """`needlepoint merge`: merge shard runs into one run folder and print its metrics."""
    from needlepoint.run.merge import merge

    result = merge(
        ns.runs, ns.out, allow_partial=ns.allow_partial, data=ns.data, report=not ns.no_report, show_progress=not ns.json
    )
    _print_metrics(result.benchmark, result.metrics, ns.json)
    run = result.metrics.get("run", {})
    print(
        f"merged run folder: {result.run_dir} ({run.get('answered')} of {run.get('samples')} samples answered)", file=sys.stderr
    )
    for line in result.notes:
        print(line, file=sys.stderr)
    # as `eval` of the whole run would: 3 when samples failed, and (--allow-partial) when some are missing
    return EXIT_FAILED_SAMPLES if result.failed or run.get("not_requested") else EXIT_OK

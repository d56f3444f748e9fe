"""The `needlepoint eval` flags that start servers, and the ServePlan they describe."""

from __future__ import annotations

import argparse
import shlex
from typing import Any

from needlepoint.core.errors import DataError
from needlepoint.serve.command import ENGINES, ServeSpec
from needlepoint.serve.plan import START_TIMEOUT_S, ServePlan


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The serving flags of `needlepoint eval` (docs/serving.md)."""
    g = p.add_argument_group("starting the servers (docs/serving.md)")
    engines = sorted(ENGINES)
    g.add_argument("--serve", choices=engines, help="start the server of --model (a path or hub id) here instead of --api-url")
    g.add_argument("--serve-tp", type=int, default=1, metavar="N", help="GPUs per server (tensor parallelism, default 1)")
    g.add_argument(
        "--serve-replicas", type=int, default=1, metavar="R", help="servers of --model on disjoint GPU groups (default 1)"
    )
    g.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARGS",
        help="more flags for the --model server, e.g. --serve-arg='--max-model-len 32768' (split like a shell; repeatable)",
    )
    g.add_argument("--serve-bin", metavar="PATH", help="the engine's executable, or a Python that has it (default: found here)")
    g.add_argument(
        "--serve-timeout",
        type=float,
        default=START_TIMEOUT_S,
        metavar="S",
        help=f"longest wait for a server to answer /v1/models (default {START_TIMEOUT_S:.0f} s)",
    )
    g.add_argument("--localizer-serve", choices=engines, help="start the server of --localizer vlm:MODEL here")
    g.add_argument("--localizer-serve-arg", action="append", default=[], metavar="ARGS", help="more flags for that server")
    g.add_argument("--embed-serve", choices=engines, help="start the server of --embed-model here (vLLM: --runner pooling)")
    g.add_argument("--embed-serve-arg", action="append", default=[], metavar="ARGS", help="more flags for that server")


def _split(values: list[str]) -> tuple[str, ...]:
    try:
        return tuple(a for v in values for a in shlex.split(v))
    except ValueError as exc:  # an unbalanced quote
        raise DataError(f"a --serve-arg value cannot be split as a shell would ({exc}); check its quotes") from None


def plan_from_args(ns: argparse.Namespace, solver_options: dict[str, Any], show_progress: bool) -> ServePlan | None:
    """The ServePlan the flags ask for (None: none), after filling the solver's URLs in
    `solver_options` (localizer_url, embed_url) with the servers' future addresses."""
    if not (ns.serve or ns.localizer_serve or ns.embed_serve):
        for flag in ("serve_arg", "localizer_serve_arg", "embed_serve_arg"):
            if getattr(ns, flag):
                raise DataError(f"--{flag.replace('_', '-')} applies to a server needlepoint starts; add --serve vllm or drop it")
        return None
    specs: list[ServeSpec] = []
    if ns.serve:
        if ns.api_url:
            raise DataError("--serve starts the server of --model, so --api-url has nothing to add; pass one of them")
        specs.append(ServeSpec("model", ns.serve, ns.model, ns.serve_tp, ns.serve_replicas, _split(ns.serve_arg), ns.serve_bin))
    if ns.localizer_serve:
        kind, _, ref = str(solver_options.get("localizer") or "").partition(":")
        if kind != "vlm" or not ref:
            raise DataError("--localizer-serve starts a served localizer: give --localizer vlm:MODEL (a path or hub id) with it")
        if solver_options.get("localizer_url"):
            raise DataError("--localizer-serve starts the localizer's server, so drop --localizer-url")
        specs.append(ServeSpec("localizer", ns.localizer_serve, ref, 1, 1, _split(ns.localizer_serve_arg), ns.serve_bin))
    if ns.embed_serve:
        model = solver_options.get("embed_model")
        if not model:
            raise DataError("--embed-serve starts the embedding model's server: give --embed-model PATH_OR_HUB_ID with it")
        if solver_options.get("embed_url"):
            raise DataError("--embed-serve starts the embedding server, so drop --embed-url")
        specs.append(ServeSpec("embed", ns.embed_serve, str(model), 1, 1, _split(ns.embed_serve_arg), ns.serve_bin, pooling=True))
    if ns.serve_timeout <= 0:
        raise DataError("--serve-timeout must be a positive number of seconds")
    plan = ServePlan(specs, start_timeout_s=ns.serve_timeout, show_progress=show_progress)
    if ns.localizer_serve:
        solver_options["localizer_url"] = plan.urls("localizer")
    if ns.embed_serve:
        solver_options["embed_url"] = plan.urls("embed")[0]
    return plan

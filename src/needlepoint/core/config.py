"""The configuration of one run, and its identity: the settings that change answers.

Two runs with the same identity may share a run folder (a rerun resumes); any other difference
(model, dataset, box format, prompt, generation settings) is refused rather than mixed.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from needlepoint.core import numeric
from needlepoint.core.conversation import Generation
from needlepoint.core.errors import DataError
from needlepoint.core.intervalsettings import CiSettings
from needlepoint.core.redact import is_credential_name, redact_url
from needlepoint.core.text import has_surrogates, shown

__all__ = ["RunConfig", "dataset_fingerprint", "hash_identity", "identity", "model_slug", "redact_url"]

IDENTITY_VERSION = 1


@dataclass
class RunConfig:
    """Everything `evaluate` needs. The API key is held here and never written anywhere."""

    benchmark: str
    data: Path
    model: str
    api_urls: list[str]
    api_key: str | None = field(default=None, repr=False)
    options: dict[str, Any] = field(default_factory=dict)
    generation: dict[str, Any] = field(default_factory=dict)
    limit: int | None = None
    concurrency: int = 32
    out: Path | None = None
    fresh: bool = False
    retry_failed: bool = False
    max_retries: int = 6
    backoff_base_s: float = 1.0
    reencode_images: bool = False
    max_request_bytes: int | None = None
    max_wait_s: float = 300.0
    neutral_sampling: bool = False
    show_progress: bool = True
    report: bool = True
    solver: str = "default"  # --solver: the registry name (needlepoint.solvers)
    solver_options: dict[str, Any] = field(default_factory=dict)  # the solver's settings (its constructor's keywords)
    shard: str | None = None  # "I/N": answer only shard I of N (see shard.py)
    sample: int | None = None  # --sample N: a stratified seeded subset of N samples (run/strata.py); identity when set
    sample_seed: int = 0  # the subset's seed (--sample-seed, else --seed, else 0); identity with --sample
    ci: CiSettings = field(default_factory=CiSettings)  # the intervals of metrics.json (--resamples, --ci-level, --no-ci)
    serve: Any = field(default=None, repr=False)  # a serve.ServePlan: the servers evaluate starts (--serve), not identity
    price: str | None = None  # --price IN,OUT: per million prompt/completion tokens (usage.py)
    prices: Path | None = None  # --prices FILE: a TOML price entry per model (usage.py)
    max_cost: float | None = None  # --max-cost: stop before the next requests would pass it
    max_tokens_total: int | None = None  # --max-tokens-total: the same for prompt + completion tokens
    structured_output: bool = False  # --structured-output: send the benchmark's answer schema (response_format)
    batch: bool = False  # --batch: the requests go out as OpenAI batches (batchrun.py); recorded, not identity
    batch_poll_s: float = 30.0  # --batch-poll: seconds between batch status requests
    batch_deadline_h: float = 24.0  # --batch-deadline: hours a run waits for an unfinished batch (batchrun.py); not identity
    processes: int = 1  # --processes: client processes answering the run (processes.py); not identity
    local_images: bool = False  # --local-images: image files go as file:// URLs (the same bytes); not identity

    def __post_init__(self) -> None:
        """Check the numbers and URLs a user typed, each in one sentence."""
        if has_surrogates(self.model):  # bytes that are not UTF-8 (argv's surrogateescape): no JSON body or run.json holds them
            raise DataError(
                f"--model {shown(self.model)} is not UTF-8 text; give the model name as the server lists it (GET /v1/models)"
            )
        gen = self.generation
        numeric.flag("--temperature", gen.get("temperature"), 0.0)
        numeric.flag("--top-p", gen.get("top_p"), 0.0, strict=True)
        if gen.get("top_p") is not None and gen["top_p"] > 1:
            raise DataError(f"--top-p must be at most 1, not {gen['top_p']!r}")
        numeric.flag("--timeout", gen.get("timeout_s"), 0.0, strict=True)
        for name, key in (("--max-tokens", "max_tokens"), ("--seed", "seed")):
            if gen.get(key) is not None and not isinstance(gen[key], int):
                raise DataError(f"{name} must be a whole number, not {gen[key]!r}")
        checks = [
            (self.limit is None or self.limit >= 1, "--limit must be a positive number of samples"),
            (self.sample is None or self.sample >= 1, "--sample must be a positive number of samples"),
            (self.concurrency >= 1, "--concurrency must be at least 1"),
            (self.processes >= 1, "--processes must be at least 1"),
            (
                self.processes == 1 or not (self.batch or self.max_cost is not None or self.max_tokens_total is not None),
                "--processes answers in several processes, while --batch, --max-cost and --max-tokens-total need one "
                "that sees every request; pass --processes 1 with them",
            ),
            (
                not (self.local_images and self.batch),
                "--local-images sends file:// URLs that only a server on this machine can read, while --batch sends "
                "the requests to a batch API; pass one of them",
            ),
            (
                not (self.retry_failed and self.fresh),
                "--retry-failed continues a run and --fresh starts a new one; pass one of them",
            ),
            (self.max_retries >= 0, "--max-retries must be 0 or more"),
            (self.max_wait_s >= 0, "--max-wait must be 0 or more seconds"),
            (self.max_request_bytes is None or self.max_request_bytes > 0, "--max-request-bytes must be positive"),
            (
                self.options.get("max_image_side") is None or self.options["max_image_side"] > 0,
                "--max-image-side must be positive",
            ),
            (self.generation.get("timeout_s") is None or self.generation["timeout_s"] > 0, "--timeout must be positive"),
            (self.generation.get("max_tokens") is None or self.generation["max_tokens"] > 0, "--max-tokens must be positive"),
            (self.max_cost is None or self.max_cost > 0, "--max-cost must be a positive amount"),
            (
                self.max_tokens_total is None or self.max_tokens_total > 0,
                "--max-tokens-total must be a positive number of tokens",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise DataError(message)
        if self.shard is not None:
            from needlepoint.core.shard import parse_shard

            self.shard = str(parse_shard(self.shard))
        for url in self.api_urls:
            from needlepoint.core.endpoints import split_weight

            url = split_weight(url)[0]
            try:
                parts = urlsplit(url)
            except ValueError:  # e.g. an IPv6 host without its closing bracket
                raise DataError(f"--api-url {redact_url(url)} is not a URL; use e.g. http://localhost:8000/v1") from None
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise DataError(f"--api-url {redact_url(url)} is not an http(s) URL; use e.g. http://localhost:8000/v1")

    def public(self) -> dict[str, Any]:
        """The configuration as written to the run folder: no API key."""
        return {
            "benchmark": self.benchmark,
            "data": str(self.data),
            "model": self.model,
            "api_urls": [redact_url(u) for u in self.api_urls],
            "options": self.options,
            "generation": self.generation,
            "limit": self.limit,
            "concurrency": self.concurrency,
            "max_retries": self.max_retries,
            "reencode_images": self.reencode_images,
            "max_request_bytes": self.max_request_bytes,
            "max_wait_s": self.max_wait_s,
            "neutral_sampling": self.neutral_sampling,
            **({"shard": self.shard} if self.shard else {}),
            **({"sample": self.sample, "sample_seed": self.sample_seed} if self.sample is not None else {}),
            **({"serve": self.serve.public()} if self.serve is not None else {}),
            **{k: v for k, v in self._usage_settings().items() if v is not None},
            **(
                {"batch": True, "batch_poll_s": self.batch_poll_s, "batch_deadline_h": self.batch_deadline_h}
                if self.batch
                else {}
            ),
            **({"processes": self.processes} if self.processes > 1 else {}),
            **({"local_images": True} if self.local_images else {}),
            **(
                {"solver": self.solver, "solver_options": public_solver_options(self.solver_options)}
                if self.solver != "default"
                else {}
            ),
        }

    def _usage_settings(self) -> dict[str, Any]:
        """The cost, budget and schema settings as run.json keeps them (absent when not given)."""
        return {
            "price": self.price,
            "prices": str(self.prices) if self.prices is not None else None,
            "max_cost": self.max_cost,
            "max_tokens_total": self.max_tokens_total,
            "structured_output": True if self.structured_output else None,
        }


def public_solver_options(options: dict[str, Any]) -> dict[str, Any]:
    """Solver settings as written to run.json: credentials left out (a setting whose name is one of
    redact.CREDENTIAL_NAMES), URLs without user info or query values."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if is_credential_name(name):
            continue
        out[name] = _public_value(value)
    return out


def _public_value(value: Any) -> Any:
    """A setting's value with every URL in it (alone or in a list, e.g. a repeated --localizer-url) redacted."""
    if isinstance(value, str) and "://" in value:
        return redact_url(value)
    if isinstance(value, (list, tuple)):
        return [_public_value(v) for v in value]
    return value


def identity(
    config: RunConfig,
    bench_identity: dict[str, Any],
    generation: Generation,
    fingerprint: str,
    solver_identity: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The settings that make two runs comparable; `hash_identity` of it names the run. The solver
    and its settings (`Solver.identity()`) are part of it, except for the default solver, which is
    absent so that runs from before solvers keep their hash (and resume)."""
    gen = generation.to_dict()
    gen.pop("timeout_s", None)
    noted: dict[str, Any] = (
        {"neutral_sampling": True} if config.neutral_sampling else {}
    )  # absent when off: older runs keep their hash
    if config.sample is not None:  # --sample N: another set of samples; absent without it (older runs keep their hash)
        noted["sample"] = {"size": config.sample, "seed": config.sample_seed}
    if config.structured_output:  # a protocol of its own (the answer schema is sent); absent when off
        noted["structured_output"] = True
    if config.solver != "default":
        noted["solver"] = config.solver
        noted.update({f"solver.{k}": v for k, v in sorted((solver_identity or {}).items())})
    return {
        **noted,
        "version": IDENTITY_VERSION,
        "benchmark": config.benchmark,
        "model": config.model,
        "dataset": fingerprint,
        "generation": gen,
        "reencode_images": config.reencode_images,
        **{f"option.{k}": v for k, v in sorted(bench_identity.items())},
    }


def hash_identity(ident: dict[str, Any]) -> str:
    """A short stable hash of an identity."""
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def dataset_fingerprint(samples: Sequence[Any]) -> str:
    """A hash of the samples' content (each sample's `fingerprint()`), independent of where the
    data lives: the same release moved resumes, another release of the same length does not."""
    digest = hashlib.sha256()
    for s in samples:
        digest.update(s.fingerprint().encode())
        digest.update(b"\n")
    return digest.hexdigest()[:16] + f"/{len(samples)}"


SLUG_MAX = 100  # characters of a model's folder or file name; a longer name ends in a hash of the whole


def model_slug(model: str) -> str:
    """A file- and folder-safe form of a model name: letters, digits, `.`, `_` and `-` only (`/` as
    `__`, anything else as `_`), never starting with a dot (no `..`, no hidden file), so that a
    name joined to a folder stays inside it."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model.replace("/", "__")).strip("_.") or "model"
    if len(slug) > SLUG_MAX:
        slug = slug[: SLUG_MAX - 17].rstrip("_.") + "-" + hashlib.sha256(model.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return slug

"""`needlepoint score BENCH --predictions FILE --out DIR`: saved predictions (the authors' released
files) as a run folder, so that `report`, the leaderboard, `runs` and `compare` treat them as any run.

The folder holds what a model run holds: run.json (model `published:<model>`, the file as its
source, status complete), records.jsonl (one record per sample, with the sample ids a model run on
the same data has, the answer and the benchmark's per-sample `scores`), metrics.json (exactly what
`needlepoint score` prints for the file, plus the `run` block) and the file itself in the
benchmark's own format, so that `needlepoint score BENCH --predictions DIR` gives the same numbers.

A benchmark offers this through the optional verb `predictions_run(predictions, data) ->
PredictionsRun` (contract/predictions.py: the samples and records it reads from its own format),
the same reading `needlepoint score` scores; this module knows no benchmark. The strings on disk
keep their first names: the model `published:<model>`, the source kind "published" and the solver
"published" (MODEL_PREFIX, SOURCE_KIND), so that folders written before read as they did.
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

from needlepoint import __version__
from needlepoint.contract.base import Benchmark
from needlepoint.contract.predictions import PredictionsRun
from needlepoint.contract.registry import make
from needlepoint.core import status
from needlepoint.core.config import dataset_fingerprint, hash_identity
from needlepoint.core.errors import DataError
from needlepoint.core.files import write_atomic, write_json, write_lines
from needlepoint.core.intervalsettings import CiSettings
from needlepoint.core.outcome import run_counts
from needlepoint.core.records import RunHeader
from needlepoint.core.store import HEADER, METRICS, RECORDS
from needlepoint.run.evaluate import read_predictions, score_predictions

__all__ = ["MODEL_PREFIX", "SOURCE_KIND", "PredictionsRun", "is_predictions_run", "write_predictions_run"]

# On disk, a predictions run keeps the names it was first written with (data formats, not words):
MODEL_PREFIX = "published:"  # its model label in run.json, `published:<model>`
SOURCE_KIND = "published"  # run.json's source.kind (and config.solver)


def is_predictions_run(header: dict[str, Any]) -> bool:
    """Whether a run.json describes saved predictions written as a run (not a model run)."""
    source = header.get("source")
    return isinstance(source, dict) and source.get("kind") == SOURCE_KIND


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for p in files:
        with p.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()


def _fingerprint(bench: Benchmark, data: Path | None) -> str | None:
    """The dataset fingerprint a model run on `data` carries, when the data loads here (a release
    without its images, or no --data, leaves it out: the sample ids still pair the runs)."""
    if data is None:
        return None
    try:
        return dataset_fingerprint(bench.load(data))
    except (DataError, OSError):
        return None


def _check_out(out: Path) -> dict[str, Any] | None:
    """Refuse to write over anything but an empty folder or an earlier predictions run, whose
    run.json is returned (None for a new or empty folder): `_check_same` decides about it."""
    if not out.exists():
        return None
    if not out.is_dir():
        raise DataError(f"--out {out} is a file; name a new folder for the run")
    if (out / HEADER).is_file():
        from needlepoint.core.jsonl import read_object

        header = read_object(out / HEADER, "move it aside", 1 << 20)
        if is_predictions_run(header):
            return header
        raise DataError(f"--out {out} holds a model run; name another folder for the predictions run")
    if any(out.iterdir()):
        raise DataError(f"--out {out} is a folder that is not empty; name a new folder for the run")
    return None


def _check_same(out: Path, held: dict[str, Any] | None, run_hash: str) -> None:
    """Rewrite a predictions run only for the same command again (the same identity: benchmark,
    model, the file's bytes, options, data); another model's or file's run there is refused, never
    replaced (issue 42.4: `eval --fresh` moves a run aside, and `score` keeps every run it wrote)."""
    if held is None or held.get("hash") == run_hash:
        return
    config, source = held.get("config"), held.get("source")
    model = str((config.get("model") if isinstance(config, dict) else None) or "another model")[:80]
    file = str((source.get("file") if isinstance(source, dict) else None) or "another file")[:200]
    raise DataError(
        f"--out {out} holds the predictions run of {model} from {file}, "
        "not of this file and model; name another --out folder for this run (or move that one aside yourself)"
    )


def write_predictions_run(
    benchmark: str,
    predictions: Path,
    data: Path | None,
    out: Path,
    label: str | None = None,
    ci: CiSettings | None = None,
    **options: Any,
) -> tuple[Benchmark, dict[str, Any], Path]:
    """Write the run folder `out` for a predictions file; return the benchmark, the metrics (as
    `score` prints them, intervals included, with the `run` block) and the folder."""
    predictions = Path(predictions).expanduser()
    if not predictions.exists():
        raise DataError(f"--predictions {predictions} does not exist")
    if (predictions / HEADER).is_file() or predictions.name == RECORDS:
        raise DataError(f"--predictions {predictions} is a run folder already; give the authors' prediction file to write a run")
    out = Path(out).expanduser()
    held = _check_out(out)
    bench = make(benchmark, **options)
    if data is not None:
        data = Path(data).expanduser()
    found = read_predictions(bench, predictions, data)
    if found.by_model:
        models = sorted(found.by_model)
        raise DataError(
            f"{predictions} holds the files of {len(models)} models ({', '.join(models)}); "
            "a run holds one model's: give a folder or file of one model"
        )
    if not found.records:
        raise DataError(f"{predictions} holds no predictions")
    metrics = score_predictions(bench, found, ci)  # what `needlepoint score` prints for the file
    model = label or found.model or predictions.stem
    name = MODEL_PREFIX + model
    digest = _sha256(predictions)
    counts = run_counts(found.records)
    total = found.samples or len(found.records)
    metrics["run"] = {
        "samples": total,
        "requested": len(found.records),
        **counts,
        "not_requested": max(0, total - len(found.records)),
        "failed_ids": [r["id"] for r in found.records if r.get("status") in status.FAILED][:1000],
        "skipped": [],
    }
    all_options = {**options, **found.options}
    ident: dict[str, Any] = {
        "benchmark": benchmark,
        "model": name,
        "predictions_sha256": digest,
        **{f"option.{k}": v for k, v in sorted(all_options.items())},
    }
    fingerprint = _fingerprint(make(benchmark, **all_options) if found.options else bench, data)
    if fingerprint:
        ident["dataset"] = fingerprint
    _check_same(out, held, hash_identity(ident))  # before anything is written
    now = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    header: RunHeader = {
        "needlepoint": __version__,
        "hash": hash_identity(ident),
        "identity": ident,
        "config": {
            "benchmark": benchmark,
            "model": name,
            "data": str(Path(data).expanduser().resolve()) if data is not None else None,
            "options": all_options,
            "solver": SOURCE_KIND,
            "predictions": str(predictions.resolve()),
        },
        "created": now,
        "finished": now,
        "status": "complete" if not counts["failed"] and total == len(found.records) else "incomplete",
    }
    source = {"kind": SOURCE_KIND, "model": found.model, "file": str(predictions.resolve()), "sha256": digest}
    out.mkdir(parents=True, exist_ok=True)
    for fname, content in found.files.items():
        write_atomic(out / fname, content, fsync=True)
    write_lines(out / RECORDS, found.records)
    write_json(out / METRICS, metrics)
    write_json(out / HEADER, {**header, "source": source})
    return bench, metrics, out

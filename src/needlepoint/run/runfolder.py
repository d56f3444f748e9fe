"""Where a run lives: the run-folder policy of `evaluate` (which folder, what `--fresh` and
`--retry-failed` may do with it, what a failed start leaves behind).

Without `--out` a run's folder is named by its identity, `runs/<benchmark>/<model>/<hash>`
(`<hash>-shard-I-of-N` for a shard): the
same command always finds its own run (to resume it), another configuration never meets it, and
two configurations started in the same second never collide. `--fresh` moves a folder aside
(`<name>.replaced-<timestamp>`) and starts anew in it; nothing answered is ever deleted.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from needlepoint.contract.usage import ESTIMATE
from needlepoint.core.config import RunConfig, model_slug
from needlepoint.core.errors import DataError
from needlepoint.core.store import HEADER, LOCK, RECORDS, RunStore, lock_folder
from needlepoint.serve import SERVE_DIR

__all__ = ["PRE_RUN", "RUNS_ROOT", "default_run_dir", "move_aside", "refusal_advice", "remove_empty_run", "resolve_run_dir"]

RUNS_ROOT = Path("runs")
REPLACED = ".replaced-"  # the mark of a folder `--fresh` moved aside
SHOWN = 5  # folders named in a refusal
PRE_RUN = (ESTIMATE, SERVE_DIR)  # what a run's folder may hold before the run: a dry run's estimate, --serve's logs


def default_run_dir(root: Path, benchmark: str, label: str, run_hash: str, shard: str | None = None) -> Path:
    """`<root>/<benchmark>/<model>/<identity hash>`: the folder of one configuration; a shard's
    (whose hash already differs per shard) ends in `-shard-I-of-N`, for `merge` globs."""
    suffix = "-shard-" + shard.replace("/", "-of-") if shard else ""
    return root / benchmark / model_slug(label) / (run_hash + suffix)


def resolve_run_dir(config: RunConfig, run_hash: str, label: str | None = None, root: Path | None = None) -> Path:
    """The run folder of this configuration: `--out`, else `<root>/<benchmark>/<label>/<hash>`
    (or, for runs started before folders were named by identity, the newest sibling folder that
    holds a run of this identity). `label` is the solver's name of the system (the model itself
    for the default solver). `--fresh` moves the run found there aside; `--retry-failed` is
    refused where no run is found (DataError naming the run folders that exist nearby)."""
    root = RUNS_ROOT if root is None else root
    label = label or config.model
    if config.out is not None:
        run_dir = config.out
        _outside_the_data(run_dir, config.data)
    else:
        run_dir = default_run_dir(root, config.benchmark, label, run_hash, config.shard)
        if RunStore.read_header(run_dir) is None:
            run_dir = _earlier_folder(run_dir.parent, run_hash) or run_dir
    held = RunStore.read_header(run_dir) is not None  # read once: the folder's run, if any
    if config.retry_failed and not held:
        raise DataError(f"--retry-failed: {run_dir} holds no run to retry; {_nearby(run_dir)}")
    if config.fresh and held:
        move_aside(run_dir)  # a new run in the folder named; the old answers are kept beside it
    return run_dir


def _outside_the_data(run_dir: Path, data: Path) -> None:
    """DataError for an --out folder that is the --data folder itself: the run's files
    (records.jsonl, the authors' prediction files) would lie among the release's and be taken
    for its own by the next run (a folder below it is the run's alone)."""
    if data.is_dir() and run_dir.resolve() == data.resolve():
        raise DataError(
            f"--out {run_dir} is the data folder; the run's records and prediction files would lie among the release's "
            "and be read as data by the next run: choose another --out folder (a new one, or one below it)"
        )


def _earlier_folder(parent: Path, run_hash: str) -> Path | None:
    """The newest folder of `parent` (a `<timestamp>` folder of an older needlepoint) that holds a
    run of this identity; None when there is none. Folders `--fresh` moved aside are not resumed."""
    if not parent.is_dir():
        return None
    for folder in sorted((p for p in parent.iterdir() if p.is_dir() and REPLACED not in p.name), reverse=True):
        try:
            header = RunStore.read_header(folder)
        except DataError:
            continue
        if header is not None and header.get("hash") == run_hash:
            return folder
    return None


def run_folders(parent: Path) -> list[Path]:
    """The folders directly in `parent` that hold a run (a run.json), by name."""
    if not parent.is_dir():
        return []
    return sorted(p for p in parent.iterdir() if p.is_dir() and (p / HEADER).is_file())


def _nearby(run_dir: Path) -> str:
    """What to do instead of retrying in `run_dir`: the run folders beside it, or none."""
    found = run_folders(run_dir.parent)
    if not found:
        return f"no run folder exists in {run_dir.parent}; check --out, or drop --retry-failed to start the run"
    names = ", ".join(str(p) for p in found[:SHOWN]) + (f" and {len(found) - SHOWN} more" if len(found) > SHOWN else "")
    return f"run folders beside it: {names}; pass the run's folder with --out, or drop --retry-failed to start the run"


def refusal_advice(config: RunConfig) -> str:
    """How to start anew where a folder holds another configuration's run (ends RunStore.open's refusal)."""
    if config.out is not None:
        return (
            f"choose another --out folder, or pass --fresh with the same --out {config.out} to move that run aside and start anew"
        )
    return "pass --fresh to move that run aside and start anew"


def move_aside(run_dir: Path) -> Path:
    """Rename a run folder to `<name>.replaced-<timestamp>[-N]` (nothing answered is ever deleted),
    under its lock: a run still answering there is refused (DataError), for it would go on writing
    by its paths into the folder the new run starts in."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = run_dir.with_name(f"{run_dir.name}{REPLACED}{stamp}")
    n = 1
    while aside.exists():
        n += 1
        aside = run_dir.with_name(f"{run_dir.name}{REPLACED}{stamp}-{n}")
    lock = lock_folder(run_dir)
    try:
        run_dir.rename(aside)
    finally:
        os.close(lock)
    print(f"needlepoint: --fresh: moved the run that was in {run_dir} to {aside}", file=sys.stderr)
    return aside


def remove_empty_run(run_dir: Path, keep_folder: bool) -> None:
    """Delete the files of a run this process started that holds no record, and its folder
    unless it was there before (or holds anything else): a failed start must not leave a run
    that blocks the next."""
    for name in (HEADER, RECORDS, LOCK):
        (run_dir / name).unlink(missing_ok=True)
    if not keep_folder:
        try:
            run_dir.rmdir()
        except OSError:
            pass  # something else is in it: leave it

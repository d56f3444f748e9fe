"""The runs of a comparison: each run folder read (header, benchmark, dataset, answered records),
checked to be of one benchmark and one dataset, and paired on the samples every run answered.

"The same data" is the run identity's data fingerprint (run.json `identity.dataset`, a hash of the
samples' content): each run's dataset is loaded from where the run read it (or `--data`) and must
still have that fingerprint, and every run's fingerprint must be the first run's. A run may be a
model run, a human run or the authors' predictions written as a run: any folder with a run.json and records.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from needlepoint.contract.base import Benchmark, Dataset, ReportItem
from needlepoint.contract.boards import Run
from needlepoint.contract.readable import read_or_name
from needlepoint.contract.registry import make
from needlepoint.core import status
from needlepoint.core.config import dataset_fingerprint
from needlepoint.core.errors import DataError
from needlepoint.core.records import Record
from needlepoint.core.store import RECORDS, RunStore, read_records

__all__ = ["LoadedRun", "Pairing", "load_runs", "pair_runs", "refuse_run_page"]

T = TypeVar("T")


@dataclass
class LoadedRun:
    """One run folder as a comparison reads it: `records` holds its answered samples only (a
    failed request is no answer), by id; `name` is how tables and the page call it."""

    dir: Path
    header: dict[str, Any]
    bench: Benchmark
    dataset: Dataset[Any]
    records: dict[str, Record]
    failed: int
    name: str

    @property
    def benchmark(self) -> str:
        return Run(self.dir, self.header, {}).benchmark


@dataclass
class Pairing:
    """The samples every run answered (`ids`, in the dataset's order), and per run how many of its
    answered samples were left out because another run did not answer them."""

    runs: list[LoadedRun]
    ids: list[str]
    left_out: list[int]
    _items: dict[int, dict[str, ReportItem]] = field(default_factory=dict, repr=False)

    def items(self, k: int) -> dict[str, ReportItem]:
        """Run `k`'s paired samples as its run report shows them (`report_items`), by id; made once."""
        if k not in self._items:
            run = self.runs[k]
            made = self.read(run, "show", lambda d, r: list(run.bench.report_items(d, r)))
            self._items[k] = {it.id: it for it in made}
        return self._items[k]

    def read(self, run: LoadedRun, what: str, fn: Callable[[Dataset[Any], list[Record]], T]) -> T:
        """`fn(dataset, records)` of the run's paired samples (its benchmark scoring, resampling or
        showing them); a record the benchmark cannot read is a DataError naming the run's records
        file and the sample (`contract.readable`)."""
        return read_or_name(fn, self.dataset(run), self.records(run), run.dir / RECORDS, run.benchmark, what)

    def records(self, run: LoadedRun) -> list[Record]:
        """The run's records of the paired samples, in pairing order."""
        return [run.records[i] for i in self.ids]

    def dataset(self, run: LoadedRun) -> Dataset[Any]:
        """The run's dataset cut to the paired samples, in pairing order (the dataset's own)."""
        return run.dataset.subset(self.ids)


def refuse_run_page(out: Path, run_dirs: Sequence[Path]) -> None:
    """DataError when the page folder `out` is a run folder, lies inside one (its `report/` page
    would be replaced) or is one of the compared runs' folders."""
    target = Path(out).expanduser().resolve()
    for folder in (target, *target.parents):
        if (folder / "run.json").is_file() or any(folder == Path(d).expanduser().resolve() for d in run_dirs):
            raise DataError(
                f"--out {out} lies in the run folder {folder}, whose own report page it would replace; "
                "pass a folder outside every run, e.g. --out compare"
            )


def _data_path(run_dir: Path, stored: str) -> Path:
    """Where a run's stored data path is on this machine: as stored when absolute; a relative one
    (the demo stores them relative to where it ran) as seen from here, else from the run folder or
    the first of its parent folders that holds it."""
    where = Path(stored).expanduser()
    if where.is_absolute() or where.exists():
        return where
    base = run_dir.expanduser().resolve()
    for folder in (base, *base.parents):
        if (folder / where).exists():
            return folder / where
    return where


def _header(run_dir: Path) -> dict[str, Any]:
    if not run_dir.is_dir():
        raise DataError(f"{run_dir} is not a run folder; pass the folders `needlepoint eval` (or score, or the human page) wrote")
    header = RunStore.read_header(run_dir)
    if header is None:
        raise DataError(
            f"{run_dir} holds no run (no run.json); pass the folders `needlepoint eval` (or score, or the human page) wrote"
        )
    return dict(header)


def _bench(run: Run) -> Benchmark:
    """The run's benchmark with its options (the defaults where an option no longer applies,
    e.g. a prompt file that has moved: scoring and the page do not need it)."""
    if not run.benchmark:
        raise DataError(f"{run.dir / 'run.json'} names no benchmark; pass run folders written by needlepoint")
    try:
        return make(run.benchmark, **run.options)
    except (DataError, TypeError, ValueError):  # TypeError: an option of another type in a hand-edited run.json
        return make(run.benchmark)


def load_runs(run_dirs: Sequence[Path], data: Path | None = None) -> list[LoadedRun]:
    """Read the run folders, each dataset loaded once (per data path and options); DataError, in
    one sentence, for anything but two or more runs of one benchmark on one dataset."""
    dirs = [Path(d).expanduser() for d in run_dirs]
    if len(dirs) < 2:
        raise DataError("compare needs two or more run folders, e.g. needlepoint compare runs/a runs/b")
    probes = [Run(d, _header(d), {}) for d in dirs]
    first = probes[0]
    for probe in probes[1:]:
        if probe.benchmark != first.benchmark:
            raise DataError(
                f"{probe.dir} is a run of {probe.benchmark or 'no known benchmark'} but {first.dir} of {first.benchmark}; "
                "compare runs of one benchmark only"
            )
    prints = [str(p.identity.get("dataset") or "") for p in probes]
    for probe, fp in zip(probes[1:], prints[1:]):
        if prints[0] and fp and fp != prints[0]:
            raise DataError(
                f"{probe.dir} answered other data than {first.dir} (data fingerprint {fp} against {prints[0]} in run.json); "
                "compare runs of the same dataset only"
            )
    loaded: dict[str, Dataset[Any]] = {}
    runs = []
    for probe, fp in zip(probes, prints):
        bench = _bench(probe)
        stored_data = str(probe.config.get("data") or "")
        if data is None and (not stored_data or stored_data == "."):
            raise DataError(f"{probe.dir / 'run.json'} names no data folder; pass --data with the dataset the runs answered")
        where = data if data is not None else _data_path(probe.dir, stored_data)
        source = "given by --data" if data is not None else f"from {probe.dir / 'run.json'}"
        key = json.dumps([str(where), json.dumps(bench.identity(), sort_keys=True, default=str)])
        if key not in loaded:
            try:
                loaded[key] = bench.load(Path(where).expanduser())
            except DataError as e:
                raise DataError(f"cannot read the data of {probe.dir} at {where} ({source}): {e}") from None
        dataset = loaded[key]
        found = dataset_fingerprint(dataset)
        if fp and found != fp:
            raise DataError(
                f"the data at {where} ({source}) is not the dataset {probe.dir} answered (fingerprint {found}, the run's {fp}); "
                + ("pass --data with that dataset" if data is None else "pass the dataset that run answered as --data")
            )
        if not fp and prints[0] and found != prints[0]:
            raise DataError(
                f"{probe.dir} answered other data than {first.dir} (its data at {where}, {source}, differs); "
                "compare runs of the same dataset only"
            )
        ids = {s.id for s in dataset}
        stored = read_records(probe.dir / RECORDS)  # each record's fields of the types needlepoint writes
        answered = {i: r for i, r in stored.items() if i in ids and r.get("status") not in status.FAILED}
        failed = sum(1 for i, r in stored.items() if i in ids and r.get("status") in status.FAILED)
        runs.append(LoadedRun(probe.dir, probe.header, bench, dataset, answered, failed, str(probe.dir)))
    names = _distinct_names(runs)
    for run, name in zip(runs, names):
        run.name = name
    return runs


def _distinct_names(runs: Sequence[LoadedRun]) -> list[str]:
    """The model (solver label) of each run; the folder name added where two runs share a model."""
    models = [Run(r.dir, r.header, {}).model for r in runs]
    out = []
    for r, m in zip(runs, models):
        out.append(m if models.count(m) == 1 else f"{m} ({r.dir.name})")
    if len(set(out)) < len(out):  # the same folder twice, or folders of one name: the paths tell them apart
        out = [f"{m} ({r.dir})" for r, m in zip(runs, models)]
    if len(set(out)) < len(out):
        out = [f"{name} #{n}" for n, name in enumerate(out, 1)]
    return out


def pair_runs(runs: Sequence[LoadedRun]) -> Pairing:
    """The samples every run answered, in the first run's dataset order; DataError when none."""
    order = [s.id for s in runs[0].dataset]
    ids = [i for i in order if all(i in r.records for r in runs)]
    if not ids:
        counts = ", ".join(f"{r.name} {len(r.records)}" for r in runs)
        raise DataError(f"the runs have no answered sample in common (answered: {counts}); nothing to compare")
    common = set(ids)
    return Pairing(list(runs), ids, [sum(1 for i in r.records if i not in common) for r in runs])

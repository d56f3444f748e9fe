"""`needlepoint merge`: the shard runs of one evaluation put back together into one run folder.

The shards must share the unsharded identity (their identities differ only in `shard`) and cover
every sample exactly once. The merged folder is an ordinary run folder of the unsharded identity:
its records (in the data's order), metrics, the authors' formats and the report are computed by the
same code as an unsharded run's, from the same data, so they are the same numbers; `score`,
`report` and even a rerun of the unsharded command (which then finds nothing left to do) accept it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from needlepoint import __version__
from needlepoint.contract.registry import make
from needlepoint.core.config import dataset_fingerprint, hash_identity
from needlepoint.core.endpoints import add_stats
from needlepoint.core.errors import DataError
from needlepoint.core.files import write_lines
from needlepoint.core.records import Record, RunHeader
from needlepoint.core.shard import Shard, assign, parse_shard, sample_cost
from needlepoint.core.store import RECORDS, RunStore, read_records
from needlepoint.run.strata import sample_subset


def _shard_header(run_dir: Path) -> tuple[RunHeader, Shard]:
    header = RunStore.read_header(run_dir)
    if header is None:
        raise DataError(f"{run_dir} holds no run (no run.json); pass the run folders the shards wrote")
    shard = header.get("identity", {}).get("shard")
    if not shard:
        raise DataError(f"{run_dir} is not a shard run (it was not started with --shard I/N); merge only the shards of one run")
    return header, parse_shard(shard)


def _base_identity(header: RunHeader) -> dict[str, Any]:
    return {k: v for k, v in header["identity"].items() if k != "shard"}


def _names(items: Sequence[str]) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def check_shards(run_dirs: Sequence[Path], allow_partial: bool) -> tuple[dict[str, Any], dict[int, Path], RunHeader]:
    """The shared unsharded identity, the folder of each shard number, and the first shard's
    header; refuses mixed identities, duplicated shards and (unless `allow_partial`) missing ones."""
    if not run_dirs:
        raise DataError("name the shard run folders to merge, e.g. needlepoint merge runs/shard-* --out runs/merged")
    headers = [(d, *_shard_header(d)) for d in run_dirs]
    first_dir, first, first_shard = headers[0]
    base = _base_identity(first)
    for d, h, s in headers[1:]:
        other = _base_identity(h)
        if other != base:
            diff = sorted(k for k in set(base) | set(other) if base.get(k) != other.get(k))
            raise DataError(
                f"{d} and {first_dir} are shards of different runs ({', '.join(diff)} differ); merge only the shards of one run"
            )
        if s.count != first_shard.count:
            raise DataError(
                f"{d} is shard {s} but {first_dir} is shard {first_shard}; all shards must split the run the same way (one N)"
            )
    by_index: dict[int, list[Path]] = {}
    for d, _h, s in headers:
        by_index.setdefault(s.index, []).append(d)
    count = first_shard.count
    missing = [f"{i}/{count}" for i in range(1, count + 1) if i not in by_index]
    dupes = [f"{i}/{count} ({' and '.join(map(str, ds))})" for i, ds in sorted(by_index.items()) if len(ds) > 1]
    problems = []
    if missing and not allow_partial:
        problems.append(f"shard{'s' if len(missing) > 1 else ''} {_names(missing)} {'are' if len(missing) > 1 else 'is'} missing")
    if dupes:
        problems.append(f"shard{'s' if len(dupes) > 1 else ''} {_names(dupes)} {'are' if len(dupes) > 1 else 'is'} given twice")
    if problems:
        advice = "pass each shard's run folder once" + ("" if dupes else ", or --allow-partial to merge what exists")
        raise DataError(f"cannot merge: {' and '.join(problems)}; {advice}")
    return base, {i: ds[0] for i, ds in by_index.items()}, first


def _say(show: bool, line: str) -> None:
    """One progress line of the merge on stderr (its phases take seconds each on a large run)."""
    if show:
        print(f"merge: {line}", file=sys.stderr, flush=True)


def merge(
    run_dirs: Sequence[Path],
    out: Path,
    allow_partial: bool = False,
    data: Path | None = None,
    report: bool = True,
    show_progress: bool = False,
) -> Any:
    """Merge shard run folders into one run folder at `out`; returns the api.RunResult.

    `data` replaces the dataset path the shards recorded (when the merge job sees it elsewhere);
    its content must be the same. `show_progress` prints a line per phase on stderr.
    """
    from needlepoint.core.outcome import summary_lines
    from needlepoint.run.evaluate import finish, write_report

    run_dirs = [Path(d) for d in run_dirs]
    base, shard_dirs, first = check_shards(run_dirs, allow_partial)
    config = dict(first.get("config") or {})
    data_path = Path(data).expanduser() if data is not None else Path(config.get("data", ""))
    bench = make(config["benchmark"], **(config.get("options") or {}))
    _say(show_progress, f"reading the dataset at {data_path} to check it is the shards' ({len(shard_dirs)} shard folders)")
    samples = bench.load(data_path)
    if dataset_fingerprint(samples) != base.get("dataset"):
        raise DataError(
            f"the data at {data_path} is not the dataset the shards answered (its content differs); pass --data with the shards' dataset"
        )
    if base.get("sample"):  # --sample N: the shards split the stratified subset
        samples = sample_subset(bench, samples, base["sample"]["size"], base["sample"]["seed"])
    count = parse_shard(first["identity"]["shard"]).count
    owner = assign([(s.id, sample_cost(bench)(s)) for s in samples], count)
    records: dict[str, Record] = {}
    unanswered: list[str] = []
    _say(show_progress, f"reading the records of {len(shard_dirs)} shard folders")
    for index, d in sorted(shard_dirs.items()):
        got = read_records(d / RECORDS)
        stray = [i for i in got if owner.get(i) != index]
        if stray:
            raise DataError(
                f"{d} holds answers for {len(stray)} sample(s) outside shard {index}/{count} (e.g. {stray[0]}), "
                "so its records were not written by that shard; rerun the shard into a new folder"
            )
        todo = sum(1 for s in samples if owner[s.id] == index and s.id not in got)
        if todo:
            unanswered.append(f"{index}/{count} ({d}: {todo} left)")
        records.update(got)
    if unanswered and not allow_partial:
        raise DataError(
            f"cannot merge: shard{'s' if len(unanswered) > 1 else ''} {_names(unanswered)} "
            f"{'have' if len(unanswered) > 1 else 'has'} unanswered samples; rerun the shard's command to resume it, or pass --allow-partial"
        )
    headers = [RunStore.read_header(d) or {} for _, d in sorted(shard_dirs.items())]
    header = _merged_header(first, base, config, shard_dirs, headers)
    store = _open_out(out, header)
    try:
        ordered = [records[s.id] for s in samples if s.id in records]
        write_lines(out / RECORDS, ordered)
        _say(show_progress, f"scoring {len(ordered)} records and writing the authors' formats")
        result = finish(
            bench, samples, records, out, str(first.get("model_label") or config["model"])
        )  # a solver's name of the system
        result.notes = summary_lines(ordered)
        complete = len(ordered) == len(samples) and not result.failed
        store.update_header(status="complete" if complete else "incomplete", finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        if report:
            _say(show_progress, f"writing the report in {out}")
            answered = samples.subset(records)
            result.exports.extend(
                write_report(out, bench, answered, [records[s.id] for s in answered], result.metrics, store.header)
            )
        return result
    finally:
        store.close()


def _merged_header(
    first: RunHeader,
    base: dict[str, Any],
    config: dict[str, Any],
    shard_dirs: dict[int, Path],
    headers: Sequence[RunHeader],
) -> RunHeader:
    urls: list[str] = []
    for h in headers:
        urls.extend(u for u in (h.get("config") or {}).get("api_urls", []) if u not in urls)
    public = {k: v for k, v in config.items() if k != "shard"}
    public["api_urls"] = urls
    count = parse_shard(first["identity"]["shard"]).count
    header: RunHeader = {
        "needlepoint": __version__,
        "hash": hash_identity(base),
        "identity": base,
        "config": public,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "status": "merging",
        "merged_from": [
            {"shard": f"{i}/{count}", "run": str(d), "hash": h.get("hash")}
            for (i, d), h in zip(sorted(shard_dirs.items()), headers)
        ],
        "endpoints": add_stats(*(h.get("endpoints") for h in headers)),
    }
    if first.get("model_label"):
        header["model_label"] = first["model_label"]
    return header


def _shard_folders(header: RunHeader) -> dict[str, Path]:
    """Shard ("I/N") -> its run folder (resolved), as a merged header's `merged_from` lists them."""
    listed = header.get("merged_from")
    entries = [e for e in listed if isinstance(e, dict)] if isinstance(listed, list) else []
    return {str(e.get("shard")): Path(str(e.get("run"))).resolve() for e in entries}


def _open_out(out: Path, header: RunHeader) -> RunStore:
    """The merge's run folder: new, or an earlier merge of the same shard folders (rewritten; a
    merge may add shards an earlier --allow-partial merge lacked). A merge of other shard folders
    is refused, as `eval` refuses another configuration: answers are never mixed."""
    existing = RunStore.read_header(out)
    if existing is not None and "merged_from" not in existing:
        raise DataError(f"{out} already holds a run that is not a merge; choose a new folder with --out")
    if existing is not None:
        before, now = _shard_folders(existing), _shard_folders(header)
        other = [f"{k} ({before[k]})" for k in sorted(before) if now.get(k) != before[k]]
        if other:
            raise DataError(
                f"{out} holds a merge of other shard folders (shard{'s' if len(other) > 1 else ''} {_names(other)}); "
                "answers will not be mixed: choose another --out folder, or move that one aside"
            )
    store = RunStore.open(out, header, "choose another --out folder")  # refuses a merge of another run
    if existing is not None:
        store.update_header(**header)  # a merge again (e.g. after a shard was resumed): the new shard list
    return store

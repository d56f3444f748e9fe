"""`load` returns a Dataset carrying all it learned (ground truth, skipped rows, split); the
dataset verbs take it, so no verb depends on what an earlier call left in the benchmark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release as write_mc
from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
from needlepoint.benchmarks.mm_niah.demo import write_release as write_niah
from needlepoint.contract.base import Dataset, Parsed
from needlepoint.core.errors import DataError
from needlepoint.core.records import Record


def _records(bench: McBench | MmNiah, dataset: Dataset[Any]) -> list[Record]:
    """A record per sample whose answer is empty (MC-Bench: no box; MM-NIAH: no text)."""
    empty = Parsed(answer=[]) if isinstance(bench, McBench) else Parsed(answer="")
    return [
        {"id": s.id, "status": "done", "answer": empty.answer, "parse_error": None, "scores": bench.judge(s, empty)}
        for s in dataset
    ]


def test_mm_niah_split_is_the_datasets_not_the_benchmarks(tmp_path: Path) -> None:
    val = write_niah(tmp_path / "val", per_task=2, split="val")
    test = write_niah(tmp_path / "test", per_task=2, split="test")
    bench = MmNiah(tasks="retrieval-text")
    first = bench.load(val)
    second = bench.load(
        test / "mm_niah_test"
    )  # learned from the folder name; a later load leaves the first dataset (and the benchmark) as they were
    assert (first.split, second.split, bench.split) == ("val", "test", None)
    assert first.identity == {"split": "val"} and bench.identity()["split"] is None
    assert bench.score(first, _records(bench, first))["split"] == "val"
    metrics = bench.score(second, _records(bench, second))
    assert metrics["split"] == "test" and "carries no answers" in metrics["note"]


def test_mc_bench_scores_with_the_ground_truth_its_dataset_carries(tmp_path: Path) -> None:
    a, _ = write_mc(tmp_path / "a", pairs=6, seed=3)
    b, _ = write_mc(tmp_path / "b", pairs=9, seed=4)
    bench = McBench(box_format="norm_1000_xyxy")
    first, second = bench.load(a), bench.load(b)
    assert first.truth is not second.truth and len(first.truth.boxes) != len(second.truth.boxes)
    counts = bench.score(first, _records(bench, first))["counts"]
    again = McBench(box_format="norm_1000_xyxy").score(first, _records(bench, first))["counts"]  # a fresh object: same numbers
    assert counts == again and counts["predictions"] == 0
    # a part of the dataset keeps its ground truth (the core scores the answered samples this way)
    part = first.subset([first[0].id, first[2].id])
    assert [s.id for s in part] == [first[0].id, first[2].id] and part.truth is first.truth
    assert first[1:].truth is first.truth and len(first[1:]) == len(first) - 1
    assert len(bench.report_items(part, _records(bench, part))) == 2
    with pytest.raises(DataError, match="Dataset that McBench.load returned"):
        bench.score(Dataset(list(first)), _records(bench, first))  # samples without their ground truth

"""MM-NIAH response files as a run (contract/predictions.py): one record per row, its id
`task/question_id` as a model run on the release names it, its answer the response, its score the
official judge's verdict; one sample per row with the fields `score` reads (task, context length,
depth), as the file gives them. A folder of several models' files reads as one run per model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mm_niah.data import NiahSample
from needlepoint.benchmarks.mm_niah.judge import judge, official_answer
from needlepoint.benchmarks.mm_niah.response_files import parse_file_name, read_response_files
from needlepoint.contract.base import Dataset
from needlepoint.contract.predictions import PredictionsRun
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.core.records import Record

__all__ = ["predictions_run"]


def predictions_run(predictions: Path, split: str | None) -> PredictionsRun:
    """The samples and records of response files (a folder, a run folder's leaderboard/, or one
    file); a folder of several models' files gives one run per model under `by_model`. Files are
    read in directory order, as the authors' script reads them (it fixes the order of the overall
    mean). The files are kept under leaderboard/, where a run folder's are read."""
    folder = predictions / "leaderboard" if (predictions / "leaderboard").is_dir() else predictions
    by_model = read_response_files(folder, split=split)
    listed = [folder] if folder.is_file() else [folder / n for n in sorted(os.listdir(folder)) if n.endswith(".jsonl")]
    named = [(f, *parse_file_name(f)) for f in listed if f.is_file()]
    found_split = next(s for _, _, _, s in named if split is None or s == split)  # read_response_files: one split
    runs: dict[str, PredictionsRun] = {}
    for model, by_task in by_model.items():
        samples, records = _read(predictions, by_task)
        files: dict[str, str | bytes] = {
            f"leaderboard/{f.name}": f.read_bytes()
            for f, m, task, s in named
            if (m, s) == (model, found_split) and task in by_task
        }
        runs[model] = PredictionsRun(model=model, records=records, dataset=Dataset(samples, split=found_split), files=files)
    if len(runs) == 1:
        return next(iter(runs.values()))
    return PredictionsRun(model=None, records=[], by_model=runs)


def _read(predictions: Path, by_task: dict[str, list[dict[str, Any]]]) -> tuple[list[NiahSample], list[Record]]:
    """One model's rows as samples and judged records, task by task in the files' order."""
    samples: list[NiahSample] = []
    records: list[Record] = []
    for task, rows in by_task.items():
        unanswered = sum(1 for row in rows if row.get("answer") is None)
        if unanswered:
            raise DataError(
                f"{unanswered} of the {len(rows)} {task} rows of {predictions} have no answer (the test split's answers are "
                "not public), so they cannot be scored here; submit them to the leaderboard or score the val split"
            )
        for i, row in enumerate(rows):
            answer = official_answer(task, row["answer"])
            verdict = judge(row.get("response"), answer)
            judged: dict[str, Any] = {"score": verdict.score}
            if verdict.crash:
                judged["crash"] = verdict.crash
            qid = row["question_id"] if row.get("question_id") is not None else i  # the row's place without an id
            sid = f"{task}/{qid}"
            records.append(
                {"id": sid, "status": status.DONE, "answer": row.get("response"), "parse_error": None, "scores": judged}
            )
            samples.append(
                NiahSample(
                    id=sid,
                    task=task,
                    row_id=qid,
                    question=str(row.get("question") or ""),
                    images=[],
                    answer=answer,
                    context_length=float(row["context_length"]),
                    placed_depth=row["placed_depth"],
                    source=predictions,  # a response row holds no document to read back: no prompt from here
                    offset=0,
                    length=0,
                    crc=0,
                    digest="",
                )
            )
    ids = {s.id for s in samples}
    if len(ids) < len(samples):
        raise DataError(
            f"{predictions} names a row twice: a row without `question_id` takes its place in the file as its id, "
            "which another row of the task gives as its `question_id`; give every row its `question_id`"
        )
    return samples, records

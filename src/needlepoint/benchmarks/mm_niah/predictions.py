"""MM-NIAH response files of one model as the records of a run (predictions_run.py): one record
per row, its id `task/question_id` as a model run on the release names it, its answer the
response, its score the official judge's verdict, as `score` gives it."""

from __future__ import annotations

import os
from pathlib import Path

from needlepoint.benchmarks.mm_niah.judge import judge, official_answer
from needlepoint.benchmarks.mm_niah.response_files import parse_file_name, read_response_files
from needlepoint.contract.predictions import PublishedRun
from needlepoint.core import status
from needlepoint.core.errors import DataError
from needlepoint.core.records import Record


def published_run(predictions: Path, split: str | None) -> PublishedRun:
    """The records of one model's response files (a folder, or one file); the files are kept
    under leaderboard/, where `score` of a run folder reads them."""
    folder = predictions / "leaderboard" if (predictions / "leaderboard").is_dir() else predictions
    by_model = read_response_files(folder, split=split)
    if len(by_model) != 1:
        raise DataError(
            f"{predictions} holds the files of {len(by_model)} models ({', '.join(sorted(by_model))}); "
            "a run holds one model's: give a folder or file of one model"
        )
    model, by_task = next(iter(by_model.items()))
    records: list[Record] = []
    for task, rows in by_task.items():
        for i, row in enumerate(rows):
            if row.get("answer") is None:
                raise DataError(f"{task} row {i} of {predictions} has no answer (test split); only val files become runs")
            verdict = judge(row.get("response"), official_answer(task, row["answer"]))
            judged: dict[str, object] = {"score": verdict.score}
            if verdict.crash:
                judged["crash"] = verdict.crash
            qid = row.get("question_id", i)
            records.append(
                {
                    "id": f"{task}/{qid}",
                    "status": status.DONE,
                    "answer": row.get("response"),
                    "parse_error": None,
                    "scores": judged,
                }
            )
    listed = [folder] if folder.is_file() else [folder / n for n in sorted(os.listdir(folder)) if n.endswith(".jsonl")]
    files = [f for f in listed if f.is_file() and parse_file_name(f)[0] == model and parse_file_name(f)[1] in by_task]
    return PublishedRun(model=model, records=records, files={f"leaderboard/{f.name}": f.read_bytes() for f in files})

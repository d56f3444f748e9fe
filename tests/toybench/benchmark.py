"""The toy benchmark's verbs: a JSONL of {id, word, letter, count}; the model says how often the
letter occurs in the word. Rows without a count are skipped (and say so through the Dataset)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.base import Dataset, Parsed, ReportItem, Table, replies_text, report_parse_error
from needlepoint.conversation import Conversation, Generation, Message
from needlepoint.errors import DataError
from needlepoint.jsonl import read_jsonl
from needlepoint.records import scores

NO_NUMBER = "no_number"
EXPORT = "toy_predictions.jsonl"


@dataclass
class Word:
    id: str
    word: str
    letter: str
    count: int

    def fingerprint(self) -> str:
        return f"{self.id}|{self.word}|{self.letter}|{self.count}"


def accuracy(correct: Sequence[bool]) -> dict[str, Any]:
    return {"n": len(correct), "accuracy": sum(correct) / len(correct) if correct else 0.0}


class ToyLetters:
    name = "toy_letters"
    generation_defaults: dict[str, Any] = {"temperature": 0.0}

    def __init__(self, instruction: str = "Answer with a number.") -> None:
        self.instruction = instruction

    def identity(self) -> dict[str, Any]:
        return {"instruction": self.instruction}

    def load(self, data: Path) -> Dataset[Word]:
        if not data.is_file():
            raise DataError(f"--data {data} is not a file; point it at the toy JSONL")
        samples, skipped = [], []
        for _, row in read_jsonl(data):
            if not isinstance(row.get("count"), int):
                skipped.append((str(row.get("id")), "no count"))
                continue
            samples.append(Word(str(row["id"]), str(row["word"]), str(row["letter"]), row["count"]))
        return Dataset(samples, skipped=skipped, split=data.stem)

    def generation(self, sample: Word, base: Generation) -> Generation:
        return base

    def prompt(self, sample: Word) -> Conversation:
        return Conversation([Message("user", [f"How often does the letter {sample.letter} occur in {sample.word}? {self.instruction}"])])

    def parse(self, sample: Word, text: str) -> Parsed:
        found = re.search(r"-?\d+", text or "")
        return Parsed(answer=int(found.group())) if found else Parsed(error=NO_NUMBER)

    def followup(self, sample: Word, parsed: Parsed, finish_reason: str | None) -> str | None:
        return "Reply with the number only."

    def judge(self, sample: Word, parsed: Parsed) -> dict[str, Any]:
        error = None if parsed.answer is None else abs(parsed.answer - sample.count)
        return {"correct": error == 0, "error": error}

    def score(self, dataset: Dataset[Word], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return {**accuracy([bool(scores(r).get("correct")) for r in records]), "split": dataset.split}

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        return [Table("Toy letters", ["n", "Acc %"], [[metrics["n"], round(100 * metrics["accuracy"], 1)]])]

    def running(self, records: Sequence[dict[str, Any]]) -> str:
        return ""

    def export(self, run_dir: Path, dataset: Dataset[Word], records: Sequence[dict[str, Any]], model: str, metrics: dict[str, Any]) -> list[Path]:
        by_id = {r["id"]: r for r in records}
        path = run_dir / EXPORT
        lines = [json.dumps({"id": s.id, "word": s.word, "answer": by_id[s.id].get("answer"), "count": s.count})
                 for s in dataset if s.id in by_id]  # fmt: skip
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        return [path]

    def score_file(self, predictions: Path, data: Path | None = None) -> dict[str, Any]:
        path = predictions / EXPORT if predictions.is_dir() else predictions
        return accuracy([row.get("answer") == row["count"] for _, row in read_jsonl(path)])

    def report_items(self, dataset: Dataset[Word], records: Sequence[dict[str, Any]]) -> list[ReportItem]:
        by_id = {s.id: s for s in dataset}
        return [
            ReportItem(id=r["id"], prompt=by_id[r["id"]].word, answer=replies_text(r), fields={"letter": by_id[r["id"]].letter},
                       filters={"letter": by_id[r["id"]].letter}, correct=bool(scores(r).get("correct")),
                       parse_error=report_parse_error(r), sort_value=scores(r).get("error"))
            for r in records
        ]  # fmt: skip

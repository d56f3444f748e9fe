"""The toy benchmark's verbs: a JSONL of {id, image, width, height, colour, box} (the image a file
beside the JSONL); the model answers with the box of the square of that colour, read as absolute
xyxy pixels, and is right at IoU >= 0.5. Rows without a box are skipped (and say so through the
Dataset). Its own prediction format (what `export` writes, `predictions_run` reads) is a JSONL of
{id, image, box, gt}."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.contract import (
    Conversation,
    DataError,
    Dataset,
    Generation,
    ImageRef,
    Message,
    Parsed,
    PredictionsRun,
    Record,
    ReportBox,
    ReportImage,
    ReportItem,
    Table,
    iou,
    is_box,
    parse_boxes,
    read_jsonl,
    replies_text,
    report_parse_error,
    safe_path,
    scores,
    status,
    write_lines,
)

EXPORT = "toy_predictions.jsonl"
HIT = 0.5


@dataclass
class Shape:
    id: str
    image: ImageRef
    width: int
    height: int
    colour: str
    box: list[float]

    def fingerprint(self) -> str:
        return f"{self.id}|{self.image.key}|{self.width}x{self.height}|{self.colour}|{self.box}"


def accuracy(correct: Sequence[bool]) -> dict[str, Any]:
    return {"n": len(correct), "accuracy": sum(correct) / len(correct) if correct else 0.0}


def first_iou(answer: Any, box: Sequence[float]) -> float | None:
    """IoU of the first answered box with the true one; None without an answer."""
    return iou(answer[0], box) if answer else None


class ToyShapes:
    name = "toy_shapes"
    generation_defaults: dict[str, Any] = {"temperature": 0.0}

    def __init__(self, instruction: str = "Answer with a JSON box.") -> None:
        self.instruction = instruction

    def identity(self) -> dict[str, Any]:
        return {"instruction": self.instruction}

    def load(self, data: Path) -> Dataset[Shape]:
        if not data.is_file():
            raise DataError(f"--data {data} is not a file; point it at the toy JSONL")
        samples, skipped = [], []
        for _, row in read_jsonl(data):
            if not is_box(row.get("box")):
                skipped.append((str(row.get("id")), "no box"))
                continue
            path = safe_path(data.parent, str(row["image"]), f"{data}: image of {row['id']}")
            image = ImageRef(key=str(row["image"]), path=path)
            samples.append(
                Shape(
                    str(row["id"]),
                    image,
                    int(row["width"]),
                    int(row["height"]),
                    str(row["colour"]),
                    [float(v) for v in row["box"]],
                )
            )
        return Dataset(samples, skipped=skipped, split=data.stem)

    def generation(self, sample: Shape, base: Generation) -> Generation:
        return base

    def question(self, sample: Shape) -> str:
        return f"Where is the {sample.colour} square? {self.instruction}"

    def prompt(self, sample: Shape) -> Conversation:
        return Conversation([Message("user", [sample.image, self.question(sample)])])

    def parse(self, sample: Shape, text: str) -> Parsed:
        return parse_boxes(text, "abs_xyxy", sample.width, sample.height)

    def followup(self, sample: Shape, parsed: Parsed, finish_reason: str | None) -> str | None:
        return "Reply with the box [x1, y1, x2, y2] only."

    def judge(self, sample: Shape, parsed: Parsed) -> dict[str, Any]:
        overlap = first_iou(parsed.answer, sample.box)
        return {"correct": overlap is not None and overlap >= HIT, "iou": overlap}

    def score(self, dataset: Dataset[Shape], records: Sequence[Record]) -> dict[str, Any]:
        split = {"split": dataset.split} if dataset.split is not None else {}  # a prediction file names none
        return {**accuracy([bool(scores(r).get("correct")) for r in records]), **split}

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        return [Table("Toy shapes", ["n", "Acc %"], [[metrics["n"], round(100 * metrics["accuracy"], 1)]])]

    def running(self, records: Sequence[Record]) -> str:
        return ""

    def export(
        self, run_dir: Path, dataset: Dataset[Shape], records: Sequence[Record], model: str, metrics: dict[str, Any]
    ) -> list[Path]:
        by_id = {r["id"]: r for r in records}
        rows = [
            {"id": s.id, "image": s.image.key, "box": (by_id[s.id].get("answer") or [None])[0], "gt": s.box}
            for s in dataset
            if s.id in by_id
        ]
        return [write_lines(run_dir / EXPORT, rows)]

    def predictions_run(self, predictions: Path, data: Path | None = None) -> PredictionsRun:
        """The export (a run folder's, or the file) read back as a run: one record a row, judged
        as `judge` judges (the optional verb that `needlepoint score` reads)."""
        path = predictions / EXPORT if predictions.is_dir() else predictions
        samples: list[Shape] = []
        records: list[Record] = []
        for _, row in read_jsonl(path):
            box, gt = row.get("box"), [float(v) for v in row["gt"]]
            overlap = iou(box, gt) if box else None
            samples.append(Shape(str(row["id"]), ImageRef(key=str(row["image"])), 0, 0, "", gt))
            records.append(
                {
                    "id": str(row["id"]),
                    "status": status.DONE,
                    "answer": [box] if box else None,
                    "parse_error": None,
                    "scores": {"correct": overlap is not None and overlap >= HIT, "iou": overlap},
                }
            )
        return PredictionsRun(model=None, records=records, dataset=Dataset(samples))

    def report_items(self, dataset: Dataset[Shape], records: Sequence[Record]) -> list[ReportItem]:
        by_id = {s.id: s for s in dataset}
        items = []
        for r in records:
            sample = by_id[r["id"]]
            boxes = [ReportBox(sample.box, "gt")] + [ReportBox(list(b), "pred") for b in (r.get("answer") or [])[:1]]
            items.append(
                ReportItem(
                    id=r["id"],
                    prompt=self.question(sample),
                    answer=replies_text(r),
                    images=[ReportImage(sample.image, boxes)],
                    fields={"colour": sample.colour},
                    filters={"colour": sample.colour},
                    correct=bool(scores(r).get("correct")),
                    parse_error=report_parse_error(r),
                    sort_value=scores(r).get("iou"),
                )
            )
        return items

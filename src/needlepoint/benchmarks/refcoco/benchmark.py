"""RefCOCO, RefCOCO+ and RefCOCOg: one referring expression, one box (docs/protocols/refcoco.md).

The class over its package: `data` (the eight splits in three layouts), `parse` (the family's
prompt, the corrected reading), `official` (InternVL's evaluator, rule for rule), `scoring`,
`tables`, `board`, `resample`, `demo`. Every reply is read twice: the `corrected` answer is the
record's `answer`, and the `official` box rides along to `judge`, which scores both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.refcoco.data import SPLITS, RefCocoSample, check_splits
from needlepoint.benchmarks.refcoco.layouts import load_samples
from needlepoint.benchmarks.refcoco.official import OfficialBox, official_box, official_iou
from needlepoint.benchmarks.refcoco.parse import prompt_text, read_corrected
from needlepoint.benchmarks.refcoco.scoring import sample_rows, score_rows
from needlepoint.contract import (
    BaseBenchmark,
    BoxOptions,
    Conversation,
    DataError,
    Dataset,
    Parsed,
    PredictionsRun,
    Record,
    ReportBox,
    ReportImage,
    ReportItem,
    Table,
    iou,
    replies_text,
    report_parse_error,
    scores,
    status,
    write_json,
)
from needlepoint.stats.resampler import Resampler

__all__ = ["SPLITS", "ReadBoth", "RefCoco", "RefCocoSample"]


@dataclass
class ReadBoth(Parsed):
    """A reply read both ways: `answer`/`error` the corrected reading, `official` the box
    InternVL's evaluator takes from the same text."""

    official: OfficialBox | None = None


def _finite_box(box: Sequence[float]) -> list[float] | None:
    return [float(v) for v in box] if all(math.isfinite(v) for v in box) else None


class RefCoco(BaseBenchmark):
    """The RefCOCO family's eight evaluation splits."""

    name = "refcoco"
    scores_first_box = True  # one box per expression: a detector family answers its best

    def __init__(
        self,
        box_format: str | None = None,
        answer_format: str | None = None,
        model_family: str | None = None,
        splits: str | Sequence[str] | None = None,
        images: str | Path | None = None,
        max_image_side: int | None = None,
        abs_frame: str | None = None,
        abs_frame_factor: int | None = None,
        abs_frame_min_pixels: int | None = None,
        abs_frame_max_pixels: int | None = None,
    ) -> None:
        self.boxes = BoxOptions.from_flags(
            box_format,
            answer_format,
            abs_frame,
            abs_frame_factor,
            abs_frame_min_pixels,
            abs_frame_max_pixels,
            max_image_side,
            model_family,
        )
        self.splits = check_splits(splits)
        self.images_dir = Path(images).expanduser() if images else None
        # the family's evaluation code's decoding (InternVL's: greedy, 100 new tokens), under the user's flags
        self.generation_defaults = self.boxes.generation_defaults(type(self).generation_defaults)

    def image_limit(self) -> tuple[int, str] | None:
        """The model family's most images a request (the dry run checks it)."""
        return self.boxes.image_limit()

    def identity(self) -> dict[str, Any]:
        return {"splits": list(self.splits) if self.splits else None, **self.boxes.identity()}

    def load(self, data: Path) -> Dataset[RefCocoSample]:
        self.boxes.require(self.name)
        samples, layout = load_samples(data, self.images_dir, self.splits)
        if not samples:
            raise DataError(f"{data} holds no expression of the asked splits; check --data and --splits")
        if self.boxes.max_image_side:
            for s in samples:
                s.image = replace(s.image, max_side=self.boxes.max_image_side)
        found = [s for s in SPLITS if any(x.split == s for x in samples)]
        return Dataset(samples, split=",".join(found), identity={"layout": layout, "splits_read": found})

    def prompt(self, sample: RefCocoSample) -> Conversation:
        text, text_first = prompt_text(sample, self.boxes)
        return self.boxes.conversation([text, sample.image] if text_first else [sample.image, text])

    def parse(self, sample: RefCocoSample, text: str) -> Parsed:
        corrected = read_corrected(sample, text, self.boxes)
        return ReadBoth(corrected.answer, corrected.error, official_box(text, sample.width, sample.height))

    def answer_schema(self) -> dict[str, Any] | None:
        """`--structured-output`: one list of boxes in the run's box format (JSON answers only)."""
        from needlepoint.contract.boxschema import ref_adv_schema

        return None if self.boxes.syntax is not None else ref_adv_schema(self.boxes.box_format)

    def judge(self, sample: RefCocoSample, parsed: Parsed) -> dict[str, Any]:
        """Both readings' IoU with the target: the corrected one of the first box (a parse error
        scores 0), the official one of the evaluator's box. An answer that arrives as a box rather
        than a reply (a person's, another solver's) is that box under both readings."""
        corrected = iou(parsed.answer[0], sample.gt) if parsed.answer else 0.0
        if isinstance(parsed, ReadBoth) and parsed.official is not None:
            read = parsed.official
        elif parsed.answer:
            x1, y1, x2, y2 = (float(v) for v in parsed.answer[0])
            read = OfficialBox((x1, y1, x2, y2), True, False)
        else:
            read = OfficialBox((0.0, 0.0, 0.0, 0.0), False, False)
        value = official_iou(read.box, sample.gt)
        value = value if math.isfinite(value) else 0.0  # an empty union: NaN there, no hit
        return {
            "iou": corrected,
            "hit": corrected >= 0.5,
            "official_iou": value,
            "official_hit": value >= 0.5,
            "official_box": _finite_box(read.box),
            "official_zero_box": not read.found,
            "official_unit_scale": read.found and read.unit_scale,
        }

    def score(self, dataset: Dataset[RefCocoSample], records: Sequence[Record]) -> dict[str, Any]:
        return score_rows(sample_rows(dataset, records))

    def stratum(self, dataset: Dataset[RefCocoSample], sample: RefCocoSample) -> str:
        """The sample's split: `--sample N` and human plans draw each split's share."""
        return sample.split

    def resampler(self, dataset: Dataset[RefCocoSample], records: Sequence[Record]) -> Resampler:
        from needlepoint.benchmarks.refcoco.resample import RefCocoResampler

        return RefCocoResampler.from_rows([str(r["id"]) for r in records], sample_rows(dataset, records))

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        from needlepoint.benchmarks.refcoco.tables import refcoco_tables

        return refcoco_tables(metrics)

    def running(self, records: Sequence[Record]) -> str:
        if not records:
            return ""
        n = len(records)
        official = sum(bool(scores(r).get("official_hit")) for r in records)
        corrected = sum(bool(scores(r).get("hit")) for r in records)
        fails = sum(bool(r.get("parse_error")) and r.get("status") not in status.FAILED for r in records)
        return f"Acc@0.5 official {100 * official / n:.1f} corrected {100 * corrected / n:.1f}  parse fail {fails}"

    def export(
        self, run_dir: Path, dataset: Dataset[RefCocoSample], records: Sequence[Record], model: str, metrics: dict[str, Any]
    ) -> list[Path]:
        """Each split's answers as InternVL's evaluator saves them (`{split}.json`: a list of
        {"answer", "gt_bbox", "hw"}), so that its scoring loop can be run on them unchanged."""
        by_id = {r["id"]: r for r in records}
        out: dict[str, list[dict[str, Any]]] = {}
        for s in dataset:
            rec = by_id.get(s.id)
            if rec is None or rec.get("status") in status.FAILED:
                continue
            turns = rec.get("turns") or []
            answer = str(turns[-1].get("reply") or "") if turns else ""
            out.setdefault(s.split, []).append({"answer": answer, "gt_bbox": list(s.gt), "hw": [s.height, s.width]})
        return [write_json(run_dir / f"internvl_{split}.json", rows, indent=None) for split, rows in out.items()]

    def predictions_run(self, predictions: Path, data: Path | None = None) -> PredictionsRun:
        """InternVL's saved answers (`{split}_<time>.json`) or a run folder's export of them, read
        as this run's replies (predictions.py); `data` is not needed: the files carry the targets."""
        from needlepoint.benchmarks.refcoco.predictions import predictions_run

        self.boxes.require(self.name)
        return predictions_run(predictions, self.parse, self.judge)

    def report_items(self, dataset: Dataset[RefCocoSample], records: Sequence[Record]) -> list[ReportItem]:
        by_id = {s.id: s for s in dataset}
        items = []
        for rec in records:
            s = by_id[rec["id"]]
            got = scores(rec)
            boxes = [ReportBox(list(s.gt), "gt", label="target")]
            if rec.get("answer"):
                boxes.append(ReportBox(list(rec["answer"][0]), "pred", label="corrected: first box"))
            if isinstance(got.get("official_box"), list) and got.get("official_box") != (rec.get("answer") or [None])[0]:
                boxes.append(ReportBox(list(got["official_box"]), "pred", group=2, label="official reading"))
            official, corrected = bool(got.get("official_hit")), bool(got.get("hit"))
            items.append(
                ReportItem(
                    id=s.id,
                    prompt=s.caption,
                    answer=replies_text(rec),
                    images=[ReportImage(s.image, boxes)],
                    fields={
                        "split": s.split,
                        "IoU corrected": round(float(got.get("iou", 0.0)), 4),
                        "IoU official": round(float(got.get("official_iou", 0.0)), 4),
                        "official zero box": bool(got.get("official_zero_box")),
                        "official read as 0-1": bool(got.get("official_unit_scale")),
                    },
                    filters={"split": s.split, "readings": "agree" if official == corrected else "differ"},
                    correct=corrected,
                    parse_error=report_parse_error(rec),
                    sort_value=float(got.get("iou", 0.0)),
                )
            )
        return items

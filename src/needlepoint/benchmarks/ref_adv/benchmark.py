"""Ref-Adv-s: one referent among look-alike distractors (docs/protocols/ref-adv-s.md).

The benchmark class over its package: `data` (load the release), `parse` (prompts, repair turn,
reply parsing), `scoring` (metrics, the authors' prediction files), `export` (predictions in the
authors' schema). The names of those modules stay importable from here and from the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.ref_adv.data import REQUIRED, RefAdvSample, distractor_count, load_jsonl, load_parquet, load_samples
from needlepoint.benchmarks.ref_adv.export import AUTHORS_FIELDS, write_predictions
from needlepoint.benchmarks.ref_adv.parse import PROMPTS, REPAIR_TEXT, parse_reply, prompt_text, repair_text
from needlepoint.benchmarks.ref_adv.scoring import (
    BINS,
    THRESHOLDS,
    bin_label,
    read_authors_predictions,
    sample_rows,
    score_rows,
)
from needlepoint.contract.base import (
    BaseBenchmark,
    DataError,
    Dataset,
    Parsed,
    ReportBox,
    ReportImage,
    ReportItem,
    Table,
    replies_text,
    report_parse_error,
)
from needlepoint.contract.boxes import parse_boxes
from needlepoint.contract.boxoptions import BoxOptions
from needlepoint.contract.predictions import PredictionsRun
from needlepoint.core import status
from needlepoint.core.conversation import Conversation
from needlepoint.core.geometry import iou
from needlepoint.core.records import Record, scores
from needlepoint.stats.resampler import Resampler

__all__ = [
    "AUTHORS_FIELDS",
    "BINS",
    "PROMPTS",
    "REPAIR_TEXT",
    "REQUIRED",
    "THRESHOLDS",
    "RefAdv",
    "RefAdvSample",
    "distractor_count",
    "load_jsonl",
    "load_parquet",
    "parse_boxes",
    "read_authors_predictions",
    "score_rows",
]


class RefAdv(BaseBenchmark):
    """The Ref-Adv-s benchmark."""

    name = "ref_adv_s"
    scores_first_box = True

    def __init__(
        self,
        box_format: str | None = None,
        prompt_mode: str = "direct",
        repair_on_length_only: bool = False,
        images: str | Path | None = None,
        max_image_side: int | None = None,
        abs_frame: str | None = None,
        abs_frame_factor: int | None = None,
        abs_frame_min_pixels: int | None = None,
        abs_frame_max_pixels: int | None = None,
        answer_format: str | None = None,
        model_family: str | None = None,
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
        self.generation_defaults = self.boxes.generation_defaults(type(self).generation_defaults)
        if prompt_mode not in PROMPTS:
            raise DataError(f"--prompt-mode must be one of {', '.join(PROMPTS)}, not {prompt_mode!r}")
        self.prompt_mode = prompt_mode
        self.repair_on_length_only = repair_on_length_only
        self.images_dir = Path(images).expanduser() if images else None

    def image_limit(self) -> tuple[int, str] | None:
        """The model family's most images a request (the dry run checks it)."""
        return self.boxes.image_limit()

    def identity(self) -> dict[str, Any]:
        return {
            "prompt_mode": self.prompt_mode,
            "repair_on_length_only": self.repair_on_length_only,
            **self.boxes.identity(),  # box_format, max_image_side, and the frame and answer format off their defaults
        }

    def load(self, data: Path) -> Dataset[RefAdvSample]:
        self.boxes.require(self.name)
        samples = load_samples(data, self.images_dir)
        if self.boxes.max_image_side:
            for s in samples:
                s.image = replace(s.image, max_side=self.boxes.max_image_side)
        return Dataset(samples)

    def prompt(self, sample: RefAdvSample) -> Conversation:
        text, text_first = prompt_text(sample, self.prompt_mode, self.boxes)
        return self.boxes.conversation([text, sample.image] if text_first else [sample.image, text])

    def parse(self, sample: RefAdvSample, text: str) -> Parsed:
        return parse_reply(sample, text, self.boxes)

    def answer_schema(self) -> dict[str, Any] | None:
        """The JSON schema of the answer (`--structured-output`): the boxes of the repair turn's shape,
        in the run's box format; None for grounding answers (special tokens, not JSON)."""
        from needlepoint.contract.boxschema import ref_adv_schema

        return None if self.boxes.syntax is not None else ref_adv_schema(self.boxes.box_format)

    def followup(self, sample: RefAdvSample, parsed: Parsed, finish_reason: str | None) -> str | None:
        if self.repair_on_length_only and finish_reason != "length":
            return None
        return repair_text(self.boxes)

    def judge(self, sample: RefAdvSample, parsed: Parsed) -> dict[str, Any]:
        value = iou(parsed.answer[0], sample.gt) if parsed.answer else 0.0
        return {"iou": value, "hit": value >= 0.5}

    def score(self, dataset: Dataset[RefAdvSample], records: Sequence[Record]) -> dict[str, Any]:
        return score_rows(sample_rows(dataset, records))

    def stratum(self, dataset: Dataset[RefAdvSample], sample: RefAdvSample) -> str:
        """The sample's distractor bin ("4-6")."""
        return bin_label(sample.distractors)

    def resampler(self, dataset: Dataset[RefAdvSample], records: Sequence[Record]) -> Resampler:
        """The bootstrap units of the records (stats.Resampler): one case each."""
        from needlepoint.benchmarks.ref_adv.resample import RefAdvResampler

        return RefAdvResampler.from_rows([str(r["id"]) for r in records], sample_rows(dataset, records))

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        from needlepoint.benchmarks.ref_adv.tables import ref_tables

        return ref_tables(metrics)

    def running(self, records: Sequence[Record]) -> str:
        if not records:
            return ""
        hits = sum(bool(scores(r).get("hit")) for r in records)
        failed = sum(r.get("status") in status.FAILED for r in records)
        fails = sum(bool(r.get("parse_error")) and r.get("status") not in status.FAILED for r in records)
        return f"Acc@0.5 {100 * hits / len(records):.1f}  parse fail {fails}" + (f"  failed {failed}" if failed else "")

    def export(
        self,
        run_dir: Path,
        dataset: Dataset[RefAdvSample],
        records: Sequence[Record],
        model: str,
        metrics: dict[str, Any],
    ) -> list[Path]:
        return [write_predictions(run_dir, dataset, records, model, self.prompt_mode, self.boxes.box_format)]

    def report_items(self, dataset: Dataset[RefAdvSample], records: Sequence[Record]) -> list[ReportItem]:
        by_id = {s.id: s for s in dataset}
        items = []
        for rec in records:
            s = by_id[rec["id"]]
            boxes = [ReportBox(list(s.gt), "gt", label="target")]
            if rec.get("answer"):
                boxes.append(ReportBox(list(rec["answer"][0]), "pred", label="first box"))
            items.append(
                ReportItem(
                    id=s.id,
                    prompt=s.caption,
                    answer=replies_text(rec),
                    images=[ReportImage(s.image, boxes)],
                    fields={
                        "IoU": round(scores(rec).get("iou", 0.0), 4),
                        "distractors": s.distractors,
                        "negation": s.use_negation,
                        "human authored": s.human_authored,
                        "source": s.image_source,
                        "repair turn": rec.get("repair_used", False),
                    },
                    filters={"bin": bin_label(s.distractors), "negation": str(s.use_negation).lower(), "source": s.image_source},
                    correct=bool(scores(rec).get("hit")),
                    parse_error=report_parse_error(rec),
                    sort_value=scores(rec).get("iou", 0.0),
                )
            )
        return items

    def predictions_run(self, predictions: Path, data: Path | None = None) -> PredictionsRun:
        """The authors' prediction file (or a run folder's copy of its answers in that schema) as a
        run's cases and records (predictions.py); `data` is not needed."""
        from needlepoint.benchmarks.ref_adv.predictions import predictions_run

        return predictions_run(predictions)

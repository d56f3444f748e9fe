"""MM-NIAH: needles in long interleaved image-text documents (docs/protocols/mm-niah.md)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mm_niah.aggregate import aggregate, context_bin, depth_bin
from needlepoint.benchmarks.mm_niah.cards import add_document
from needlepoint.benchmarks.mm_niah.data import NiahSample, image_pieces, load_release
from needlepoint.benchmarks.mm_niah.judge import judge
from needlepoint.benchmarks.mm_niah.rag_results import add_rag, needle_shares, rag_note
from needlepoint.benchmarks.mm_niah.ranges import EXTENDED_EDGES, EXTENDED_RANGES, TASKS
from needlepoint.benchmarks.mm_niah.tables import niah_tables
from needlepoint.contract.base import (
    BaseBenchmark,
    DataError,
    Dataset,
    Parsed,
    ReportItem,
    Table,
    replies_text,
    report_parse_error,
)
from needlepoint.contract.predictions import PredictionsRun
from needlepoint.core import status
from needlepoint.core.conversation import Conversation, Generation, ImageRef, Message, Part
from needlepoint.core.records import Record, scores
from needlepoint.families import family
from needlepoint.stats.resampler import Resampler


def _parts(text: str, images: list[ImageRef]) -> list[Part]:
    pieces = image_pieces(text)
    parts: list[Part] = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append(piece)
        if i < len(images):
            parts.append(images[i])
    return parts


def response_rows(samples: Sequence[NiahSample], records: dict[str, Record]) -> dict[str, list[dict[str, Any]]]:
    """Rows of the response files, per task, in the run's sample order."""
    out: dict[str, list[dict[str, Any]]] = {}
    for s in samples:
        rec = records.get(s.id)
        if rec is None:
            continue
        out.setdefault(s.task, []).append(
            {
                "question_id": s.row_id,
                "question": s.question,
                "answer": s.answer,
                # an empty reply (parse error `empty_response`) is the empty response the model gave
                "response": "" if rec.get("parse_error") == status.EMPTY_RESPONSE else rec.get("answer"),
                "context_length": s.context_length,
                "placed_depth": s.placed_depth,
            }
        )
    return out


def shown_answer(answer: Any) -> str:
    """The expected answer as a reader compares it with the reply: an option index (int) as the
    letter the prompt asked for (0 -> "A"), anything else as JSON."""
    if isinstance(answer, int) and not isinstance(answer, bool) and 0 <= answer < 26:
        return chr(ord("A") + answer)
    return json.dumps(answer, ensure_ascii=False)


class MmNiah(BaseBenchmark):
    """The MM-NIAH benchmark."""

    name = "mm_niah"
    # The authors decode greedily with 32 new tokens for counting tasks and 16 otherwise
    # (`generation` fills max_tokens per task unless the user set it).
    generation_defaults: dict[str, Any] = {"temperature": 0.0, "top_p": None, "max_tokens": None, "seed": None}

    def __init__(
        self,
        split: str | None = None,
        tasks: str | Sequence[str] | None = None,
        max_image_side: int | None = None,
        model_family: str | None = None,
    ) -> None:
        self.split = split
        if isinstance(tasks, str):
            tasks = [t.strip() for t in tasks.split(",") if t.strip()]
        self.tasks = list(tasks) if tasks else list(TASKS)
        # A family's limits only (the images a request, the side its API accepts): MM-NIAH's answers
        # are the authors' options and numbers, not boxes, so its prompts and decoding stay theirs.
        self.family = family(model_family) if model_family else None
        self.max_image_side = max_image_side or (self.family.max_side if self.family else None)

    def identity(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "tasks": sorted(self.tasks),
            "max_image_side": self.max_image_side,
            **({"model_family": self.family.name} if self.family else {}),
        }

    def image_limit(self) -> tuple[int, str] | None:
        """The model family's most images a request (the dry run names the documents over it)."""
        if self.family is None or self.family.max_images is None:
            return None
        return self.family.max_images, f"--model-family {self.family.name}"

    def load(self, data: Path) -> Dataset[NiahSample]:
        if not data.exists():
            raise DataError(f"--data {data} does not exist; download MM-NIAH and point --data at it")
        samples, skipped, split = load_release(data, self.split, self.tasks)
        if self.max_image_side:
            for s in samples:
                s.images = [replace(im, max_side=self.max_image_side) for im in s.images]
        return Dataset(samples, skipped=skipped, split=split, identity={"split": split})

    def cost(self, sample: NiahSample) -> float:
        """What a sample costs to answer, for balancing shards: its context length in tokens."""
        return max(sample.context_length, 1.0)

    def generation(self, sample: NiahSample, base: Generation) -> Generation:
        if base.max_tokens is None:
            return replace(base, max_tokens=32 if sample.task.startswith("counting") else 16)
        return base

    def prompt(self, sample: NiahSample) -> Conversation:
        return Conversation([Message("user", _parts(sample.text(), sample.images))])

    def parse(self, sample: NiahSample, text: str) -> Parsed:
        """The reply's text as the answer; a reply without text (`content` null, empty or white
        space) is `empty_response`, as in every benchmark (core/status.py), scored 0."""
        if not text.strip():
            return Parsed(error=status.EMPTY_RESPONSE)
        return Parsed(answer=text)

    def judge(self, sample: NiahSample, parsed: Parsed) -> dict[str, Any]:
        if sample.answer is None or parsed.error:
            return {"score": None if sample.answer is None else 0.0}
        verdict = judge(parsed.answer, sample.answer)
        out: dict[str, Any] = {"score": verdict.score}
        if verdict.crash:
            out["crash"] = verdict.crash
        return out

    def score(self, dataset: Dataset[NiahSample], records: Sequence[Record]) -> dict[str, Any]:
        by_id = {s.id: s for s in dataset}
        rows = []
        for rec in records:
            s = by_id[rec["id"]]
            judged = scores(rec)
            if judged.get("score") is None:
                continue
            rows.append(
                {
                    "task": s.task,
                    "context_length": s.context_length,
                    "placed_depth": s.placed_depth,
                    "score": judged["score"],
                    "crash": judged.get("crash"),
                }
            )
        if not rows:
            metrics: dict[str, Any] = {
                "note": f"the {dataset.split} split carries no answers: responses exported for the leaderboard only"
            }
        else:
            metrics = aggregate(rows)
        metrics["split"] = dataset.split
        shares = needle_shares(dataset, records)  # RAG runs: did the needles survive retrieval?
        if shares is not None:
            metrics["rag"] = shares
        return metrics

    def stratum(self, dataset: Dataset[NiahSample], sample: NiahSample) -> str:
        """Task x context range x needle depth bin: "counting-text/8k/depth2"."""
        b = context_bin(sample.context_length, EXTENDED_EDGES)
        rng = EXTENDED_RANGES[b - 1] if b > 0 else "<1k"
        return f"{sample.task}/{rng}/depth{depth_bin(sample.placed_depth)}"

    def resampler(self, dataset: Dataset[NiahSample], records: Sequence[Record]) -> Resampler | None:
        """The scored samples as bootstrap units (stats.Resampler): groups of a task's context
        ranges of at least 20 samples, each cell keeping its count (resample.py, the collapsed-cell
        bootstrap); None when no record carries a score (a split without answers)."""
        from needlepoint.benchmarks.mm_niah.resample import NiahResampler

        by_id = {s.id: s for s in dataset}
        ids, rows = [], []
        for rec in records:
            s, value = by_id[rec["id"]], scores(rec).get("score")
            if value is not None:
                ids.append(str(rec["id"]))
                rows.append({"task": s.task, "context_length": s.context_length, "placed_depth": s.placed_depth, "score": value})
        return NiahResampler(ids, rows) if rows else None

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        return niah_tables(metrics)

    def running(self, records: Sequence[Record]) -> str:
        scored = [v for r in records if (v := scores(r).get("score")) is not None]
        return f"micro acc {100 * sum(scored) / len(scored):.1f}" if scored else ""

    def export(
        self, run_dir: Path, dataset: Dataset[NiahSample], records: Sequence[Record], model: str, metrics: dict[str, Any]
    ) -> list[Path]:
        from needlepoint.benchmarks.mm_niah.response_files import write_response_files
        from needlepoint.core.config import model_slug

        rows = response_rows(dataset, {r["id"]: r for r in records})
        assert dataset.split is not None, "load() finds the split of every dataset it returns"
        return write_response_files(run_dir / "leaderboard", model_slug(model), dataset.split, rows)

    def figures(self, run_dir: Path, metrics: dict[str, Any]) -> list[Path]:
        """The heatmaps (depth by context range) of every task and the overall, for the report."""
        from needlepoint.benchmarks.mm_niah.heatmap import draw_all

        return draw_all(metrics, run_dir / "heatmaps") if metrics.get("tasks") else []

    def report_items(self, dataset: Dataset[NiahSample], records: Sequence[Record]) -> list[ReportItem]:
        by_id = {s.id: s for s in dataset}
        items = []
        for rec in records:
            s = by_id[rec["id"]]
            b = context_bin(s.context_length, EXTENDED_EDGES)
            label = EXTENDED_RANGES[b - 1] if b > 0 else "<1k"
            score = scores(rec).get("score")
            items.append(
                ReportItem(
                    id=s.id,
                    prompt=s.question,
                    answer=replies_text(rec),
                    fields={
                        "expected": shown_answer(s.answer),
                        "score": score,
                        "context length": int(s.context_length),
                        "depth": s.placed_depth,
                        "images": len(s.images),
                        "task": s.task,
                    },
                    filters={"task": s.task, "range": label},
                    correct=None if score is None else score >= 1.0,
                    parse_error=report_parse_error(rec),
                    sort_value=score,
                )
            )
            if rag_note(rec) is not None:  # the RAG solver's record: what retrieval kept
                add_rag(items[-1], s, rec)
            else:  # the document as sent, its needles marked, and its images
                add_document(items[-1], s)
        return items

    def predictions_run(self, predictions: Path, data: Path | None = None) -> PredictionsRun:
        """Response files (a folder, a run folder, or one file; of one model, or one run per model
        under `by_model`) as a run's samples and records (predictions.py); `data` is not needed."""
        from needlepoint.benchmarks.mm_niah.predictions import predictions_run

        return predictions_run(predictions, self.split)

"""Ref-Adv-s: one referent among look-alike distractors (docs/protocols/ref-adv-s.md).

Load the Hugging Face parquet release (or a JSONL with an images folder), ask for JSON boxes,
parse them as the authors' runner does, score the first box, and read and write the authors'
prediction schema.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from needlepoint import status
from needlepoint.benchmarks.base import (
    DataError,
    Dataset,
    Parsed,
    ReportBox,
    ReportImage,
    ReportItem,
    Table,
    count_parse_errors,
    replies_text,
    report_parse_error,
)
from needlepoint.benchmarks.boxes import parse_boxes  # re-exported
from needlepoint.conversation import Conversation, Generation, ImageRef, Message
from needlepoint.files import AtomicFile, json_text
from needlepoint.geometry import (
    Box,
    check_abs_frame,
    check_box_format,
    iou,
    model_frame,
    require_box_format,
)
from needlepoint.jsonl import parse, read_jsonl
from needlepoint.numeric import boolean, finite, integer, is_box, size
from needlepoint.records import scores
from needlepoint.text import writable

PROMPTS = {
    "direct": '<image>\nLocate every object that matches the description "{ref_sentence}" in the image. '
    "Report bbox coordinates in JSON format.",
    "cot": '<image>\nLocate every object that matches the description "{ref_sentence}" in the image.\n'
    "Think first, then answer.\nFinally report bbox coordinates in JSON format.",
}
# The authors' configuration delivers "\n" here as two characters, not a newline.
REPAIR_TEXT = (
    r"Your previous answer did not end with a valid JSON bbox output.\nNow output ONLY one complete JSON "
    r'code block.\nUse this exact schema:\n```json\n{"bboxes": [[x1, y1, x2, y2]]}\n```\nDo not output any '
    r"extra text."
)
THRESHOLDS = (0.5, 0.75, 0.9)
BINS = (("2-3", 2, 3), ("4-6", 4, 6), (">=7", 7, None))
AUTHORS_FIELDS = (
    "row_idx",
    "file_name",
    "normal_caption",
    "image_source",
    "human_authored",
    "use_negation",
    "distractor_count",
    "gt_bbox_xyxy",
    "pred_box_xyxy_first",
    "first_iou",
    "first_hit",
    "parse_error",
    "retry_followup_used",
    "model_full_name",
    "prompt_id",
    "pred_box_expected_format",
)
REQUIRED = ("normal_caption", "solution", "width", "height")


def distractor_count(value: Any, where: str = "distractor count") -> int:
    """The protocol's rule: int as is (negatives 0), list length, JSON string, else digit runs. A number
    that is not finite or beyond float range is refused (DataError naming `where`)."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return max(int(finite(value, where, "the distractor count", "fix the file")), 0)
    if isinstance(value, (list, tuple)):
        return len(value)
    if isinstance(value, str):
        if not value.strip():
            return 0
        try:
            parsed = json.loads(value)
        except ValueError:
            return len(re.findall(r"\d+", value))
        if isinstance(parsed, list):
            return len(parsed)
        if isinstance(parsed, (int, float)) and not isinstance(parsed, bool):
            return max(int(finite(parsed, where, "the distractor count", "fix the file")), 0)
        return len(re.findall(r"\d+", value))
    return 0


@dataclass
class RefAdvSample:
    """One Ref-Adv-s case."""

    id: str
    row_idx: int
    caption: str
    gt: Box
    width: float
    height: float
    distractors: int
    image: ImageRef
    file_name: str = ""
    image_source: str = ""
    human_authored: bool = False
    use_negation: bool = False

    def fingerprint(self) -> str:
        return f"{self.id}|{self.caption}|{list(self.gt)}|{self.width}x{self.height}|{self.file_name}|{self.distractors}"


def _box(value: Any, where: str, column: str = "solution") -> Box:
    got = value
    if isinstance(value, str):  # the release stores some boxes as JSON text
        try:
            value = parse(value.encode("utf-8", "replace"), where, "fix the file")
        except DataError:
            value = None
    if not is_box(value):
        raise DataError(
            f"{where}: `{column}` must be a box [x1, y1, x2, y2] of four finite numbers, got {_got(got)}; fix the file"
        )
    x1, y1, x2, y2 = (float(v) for v in value)
    return x1, y1, x2, y2


def _got(value: Any) -> str:
    """A refused value as a message shows it: its type, and the value shortened."""
    text = writable(repr(value))
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"the string {text}" if isinstance(value, str) else text


def _dimension(value: Any, where: str, column: str) -> float:
    """A positive finite image side; a numeric string ("640") counts, as the release stores some."""
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    side = size(value, where, f"`{column}`", "fix the data file")
    if side == 0:
        raise DataError(f"{where}: `{column}` is 0; image sides must be positive; fix the data file")
    return side


def _flag(value: Any) -> bool:
    """A boolean column that may arrive as a bool, a number or a string ("true", "False", "1")."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _sample(row: dict[str, Any], idx: int, image: ImageRef, where: str) -> RefAdvSample:
    width, height = (_dimension(row[k], where, k) for k in ("width", "height"))
    return RefAdvSample(
        id=str(idx),
        row_idx=idx,
        caption=str(row["normal_caption"]),
        gt=_box(row["solution"], where),
        width=width,
        height=height,
        distractors=distractor_count(row.get("distractors"), where),
        image=image,
        file_name=str(row.get("file_name") or ""),
        image_source=str(row.get("image_source") or ""),
        human_authored=_flag(row.get("human_authored")),
        use_negation=_flag(row.get("use_negation")),
    )


def _check_columns(columns: Sequence[str], where: str, needed: Sequence[str]) -> None:
    missing = [c for c in needed if c not in columns]
    if missing:
        raise DataError(f"{where} lacks the column(s) {', '.join(missing)}; point --data at the Ref-Adv-s release")


def load_parquet(root: Path, files: list[Path]) -> list[RefAdvSample]:
    """Samples from the parquet release; images stay in the files until requested. Image keys
    name the file relative to `root`, so shards of the same name in two folders stay apart."""
    from needlepoint.parquet import ParquetImage, ParquetTable

    samples: list[RefAdvSample] = []
    wanted = [*REQUIRED, "file_name", "distractors", "image_source", "human_authored", "use_negation"]
    for path in files:
        table = ParquetTable(path)
        _check_columns(table.columns, str(path), [*REQUIRED, "image"])
        for local, row in enumerate(table.rows(wanted)):
            idx = len(samples)
            image = ImageRef(key=f"{path.relative_to(root).as_posix()}#{local}", loader=ParquetImage(table, local))
            samples.append(_sample(row, idx, image, f"{path} row {local}"))
    return samples


def load_jsonl(path: Path, images_dir: Path | None) -> list[RefAdvSample]:
    """Samples from a JSONL with the release's fields; `image` (or `file_name`) names the file."""
    from needlepoint.images import safe_path

    images_root = images_dir or path.parent / "images"
    if not images_root.is_dir():
        raise DataError(f"images folder {images_root} does not exist; pass --images DIR")
    samples: list[RefAdvSample] = []
    for where, row in read_jsonl(path, "check --data"):
        _check_columns(list(row), where, REQUIRED)
        name = row.get("image") if isinstance(row.get("image"), str) else row.get("file_name")
        if not name:
            raise DataError(f"{where} names no image (`image` or `file_name`); fix the data file")
        image_path = safe_path(images_root, name, where)
        if not image_path.is_file():
            raise DataError(f"{where}: image {image_path} does not exist; check --images")
        samples.append(_sample(row, len(samples), ImageRef(key=name, path=image_path), where))
    return samples


def _rate(rows: Sequence[dict[str, Any]], threshold: float = 0.5) -> float:
    return sum(r["iou"] >= threshold for r in rows) / len(rows) if rows else 0.0


def _breakdown(rows: Sequence[dict[str, Any]], field: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(str(r[field]).lower(), []).append(r)
    return {k: {"n": len(v), "acc@0.5": _rate(v)} for k, v in sorted(groups.items())}


def score_rows(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Metrics from neutral rows: iou, distractors, parse_error, repair_used, status, and the
    breakdown fields use_negation, human_authored, image_source."""
    n = len(rows)
    metrics: dict[str, Any] = {"n": n}
    for t in THRESHOLDS:
        metrics[f"acc@{t}"] = _rate(rows, t)
        metrics[f"hits@{t}"] = sum(r["iou"] >= t for r in rows)
    metrics["bins"] = {}
    for label, lo, hi in BINS:
        in_bin = [r for r in rows if r["distractors"] >= lo and (hi is None or r["distractors"] <= hi)]
        metrics["bins"][label] = {"n": len(in_bin), "acc@0.5": _rate(in_bin)}
    # A request that failed (status.FAILED: backend errors, a prompt too long, ...) scores 0 but is
    # no parse failure: the model never answered. The two are counted apart.
    errors = count_parse_errors(r["parse_error"] for r in rows if r["parse_error"] not in status.FAILED)
    failures = count_parse_errors(r["parse_error"] for r in rows if r["parse_error"] in status.FAILED)
    metrics["parse_fail"] = sum(errors.values())
    metrics["parse_errors"] = errors
    metrics["failed"] = sum(failures.values())
    metrics["failures"] = failures
    metrics["backend_errors"] = failures.get(status.BACKEND_ERROR, 0)
    metrics["repair_used"] = sum(bool(r["repair_used"]) for r in rows)
    metrics["repair_share"] = metrics["repair_used"] / n if n else 0.0
    metrics["by_negation"] = _breakdown(rows, "use_negation")
    metrics["by_human_authored"] = _breakdown(rows, "human_authored")
    metrics["by_image_source"] = _breakdown(rows, "image_source")
    return metrics


def _text_field(rec: dict[str, Any], key: str, where: str) -> str:
    """A string field of a prediction row ("" when absent or null); DataError for another type."""
    value = rec.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise DataError(f"{where}: `{key}` is {value!r}, not a string; fix the file")
    return value


def _one_kind(path: Path, values: Sequence[str], key: str) -> None:
    """Refuse a file whose rows name more than one value of `key` (another model, another prompt
    mode): their numbers averaged together describe no run. Rows that leave `key` out count apart."""
    counts: dict[str, int] = {}
    for value in values:
        if value:
            counts[value] = counts.get(value, 0) + 1
    if len(counts) > 1:
        listed = ", ".join(f"{v!r}: {n} rows" for v, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        raise DataError(f"{path} mixes rows of {len(counts)} values of `{key}` ({listed}); score one run's file at a time")


def read_authors_predictions(path: Path) -> list[dict[str, Any]]:
    """Rows of a prediction JSONL in the authors' schema, as neutral scoring rows.

    `first_iou` is recomputed from `gt_bbox_xyxy` and `pred_box_xyxy_first`. Every field has one
    rule (numeric.py): `distractor_count` a whole number from 0, the flags true or false (or
    absent), the labels strings. A file that mixes models or prompt modes, or repeats a `row_idx`,
    is refused with the counts: its numbers would describe no single run.
    """
    rows: list[dict[str, Any]] = []
    kinds: dict[str, list[str]] = {"model_full_name": [], "prompt_id": []}
    first_line: dict[int, str] = {}
    repeated: list[str] = []
    fix = "fix the file"
    for where, rec in read_jsonl(path):
        missing = [k for k in ("gt_bbox_xyxy", "pred_box_xyxy_first", "distractor_count", "parse_error") if k not in rec]
        if missing:
            raise DataError(f"{where} lacks {', '.join(missing)}; is this a Ref-Adv prediction file?")
        pred = _box(rec["pred_box_xyxy_first"], where, "pred_box_xyxy_first") if rec["pred_box_xyxy_first"] else None
        gt = _box(rec["gt_bbox_xyxy"], where, "gt_bbox_xyxy")
        if "row_idx" in rec:
            idx = integer(rec["row_idx"], where, "`row_idx`", fix)
            line = where.rpartition(" ")[2]
            if idx in first_line:
                repeated.append(f"line {line} repeats row_idx {idx} of line {first_line[idx]}")
            first_line.setdefault(idx, line)
        for key, seen in kinds.items():
            seen.append(_text_field(rec, key, where))
        error = rec["parse_error"]
        if error is not None and not isinstance(error, str):
            raise DataError(f"{where}: `parse_error` is {error!r}, not a string (empty when none); {fix}")
        rows.append(
            {
                "iou": iou(pred, gt) if pred else 0.0,
                "distractors": integer(rec["distractor_count"], where, "`distractor_count`", fix),
                "parse_error": error or None,
                "repair_used": boolean(rec.get("retry_followup_used"), where, "`retry_followup_used`", fix),
                "use_negation": boolean(rec.get("use_negation"), where, "`use_negation`", fix),
                "human_authored": boolean(rec.get("human_authored"), where, "`human_authored`", fix),
                "image_source": _text_field(rec, "image_source", where),
            }
        )
    if not rows:
        raise DataError(f"{path} holds no predictions")
    if repeated:
        raise DataError(
            f"{path} holds {len(repeated)} duplicate row(s) ({repeated[0]}); remove them: each would count again in every number"
        )
    for key, seen in kinds.items():
        _one_kind(path, seen, key)
    return rows


def _final_error(record: dict[str, Any]) -> str | None:
    """What stands in for a record's answer: the kind of request failure (status.FAILED) when the
    request failed, else the parse error (None when the answer parsed)."""
    if record.get("status") in status.FAILED:
        return str(record["status"])
    return record.get("parse_error")


class RefAdv:
    """The Ref-Adv-s benchmark."""

    name = "ref_adv_s"
    generation_defaults: dict[str, Any] = {}

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
    ) -> None:
        self.box_format = check_box_format(box_format)
        self.frame = check_abs_frame(abs_frame, self.box_format, abs_frame_factor, abs_frame_min_pixels, abs_frame_max_pixels)
        if prompt_mode not in PROMPTS:
            raise DataError(f"--prompt-mode must be one of {', '.join(PROMPTS)}, not {prompt_mode!r}")
        self.prompt_mode = prompt_mode
        self.repair_on_length_only = repair_on_length_only
        self.images_dir = Path(images).expanduser() if images else None
        self.max_image_side = max_image_side

    def identity(self) -> dict[str, Any]:
        return {
            "box_format": self.box_format,
            "prompt_mode": self.prompt_mode,
            "repair_on_length_only": self.repair_on_length_only,
            "max_image_side": self.max_image_side,
            **self.frame.identity(),
        }

    def load(self, data: Path) -> Dataset[RefAdvSample]:
        require_box_format(self.box_format, self.name)
        if data.is_file() and data.suffix == ".jsonl":
            samples = load_jsonl(data, self.images_dir)
        elif data.is_file() and data.suffix == ".parquet":
            samples = load_parquet(data.parent, [data])
        elif data.is_dir():
            from needlepoint.parquet import parquet_files

            files = parquet_files(data)
            jsonl = sorted(data.glob("*.jsonl"))
            if files:
                samples = load_parquet(data, files)
            elif jsonl:
                samples = load_jsonl(jsonl[0], self.images_dir or data / "images")
            else:
                raise DataError(f"{data} holds no parquet files and no JSONL; point --data at the Ref-Adv-s release")
        elif data.exists():
            raise DataError(
                f"--data {data} is neither a parquet file, a JSONL file nor a folder of them; point --data at the Ref-Adv-s release"
            )
        else:
            raise DataError(f"--data {data} does not exist; download the Ref-Adv-s release and point --data at it")
        if self.max_image_side:
            for s in samples:
                s.image = replace(s.image, max_side=self.max_image_side)
        return Dataset(samples)

    def generation(self, sample: RefAdvSample, base: Generation) -> Generation:
        return base

    def prompt(self, sample: RefAdvSample) -> Conversation:
        text = PROMPTS[self.prompt_mode].format(ref_sentence=sample.caption)
        return Conversation([Message("user", [text, sample.image])])

    def parse(self, sample: RefAdvSample, text: str) -> Parsed:
        seen = model_frame(sample.width, sample.height, self.max_image_side, self.frame)
        return parse_boxes(text, require_box_format(self.box_format, self.name), sample.width, sample.height, seen)

    def followup(self, sample: RefAdvSample, parsed: Parsed, finish_reason: str | None) -> str | None:
        if self.repair_on_length_only and finish_reason != "length":
            return None
        return REPAIR_TEXT

    def judge(self, sample: RefAdvSample, parsed: Parsed) -> dict[str, Any]:
        value = iou(parsed.answer[0], sample.gt) if parsed.answer else 0.0
        return {"iou": value, "hit": value >= 0.5}

    def _rows(self, samples: Sequence[RefAdvSample], records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        by_id = {s.id: s for s in samples}
        rows = []
        for rec in records:
            s = by_id[rec["id"]]
            rows.append(
                {
                    "iou": scores(rec).get("iou", 0.0),
                    "distractors": s.distractors,
                    "parse_error": _final_error(rec),
                    "repair_used": rec.get("repair_used", False),
                    "use_negation": s.use_negation,
                    "human_authored": s.human_authored,
                    "image_source": s.image_source,
                }
            )
        return rows

    def score(self, dataset: Dataset[RefAdvSample], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        return score_rows(self._rows(dataset, records))

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        from needlepoint.benchmarks.ref_adv.tables import ref_tables

        return ref_tables(metrics)

    def running(self, records: Sequence[dict[str, Any]]) -> str:
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
        records: Sequence[dict[str, Any]],
        model: str,
        metrics: dict[str, Any],
    ) -> list[Path]:
        by_id = {r["id"]: r for r in records}
        path = run_dir / "predictions_ref_adv.jsonl"
        with AtomicFile(path) as fh:
            for s in dataset:
                rec = by_id.get(s.id)
                if rec is None:
                    continue
                boxes = rec.get("answer") or []
                row = {
                    "row_idx": s.row_idx,
                    "file_name": s.file_name,
                    "normal_caption": s.caption,
                    "image_source": s.image_source,
                    "human_authored": s.human_authored,
                    "use_negation": s.use_negation,
                    "distractor_count": s.distractors,
                    "gt_bbox_xyxy": list(s.gt),
                    "pred_box_xyxy_first": list(boxes[0]) if boxes else [],
                    "first_iou": scores(rec).get("iou", 0.0),
                    "first_hit": bool(scores(rec).get("hit")),
                    "parse_error": _final_error(rec) or "",
                    "retry_followup_used": bool(rec.get("repair_used")),
                    "model_full_name": model,
                    "prompt_id": self.prompt_mode,
                    "pred_box_expected_format": self.box_format,
                }
                fh.write(json_text(row) + "\n")
        return [path]

    def report_items(self, dataset: Dataset[RefAdvSample], records: Sequence[dict[str, Any]]) -> list[ReportItem]:
        by_id = {s.id: s for s in dataset}
        items = []
        for rec in records:
            s = by_id[rec["id"]]
            boxes = [ReportBox(list(s.gt), "gt", label="target")]
            if rec.get("answer"):
                boxes.append(ReportBox(list(rec["answer"][0]), "pred", label="first box"))
            label = next((b for b, lo, hi in BINS if s.distractors >= lo and (hi is None or s.distractors <= hi)), "<2")
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
                    filters={"bin": label, "negation": str(s.use_negation).lower(), "source": s.image_source},
                    correct=bool(scores(rec).get("hit")),
                    parse_error=report_parse_error(rec),
                    sort_value=scores(rec).get("iou", 0.0),
                )
            )
        return items

    def score_file(self, predictions: Path, data: Path | None = None) -> dict[str, Any]:
        """Metrics of a prediction file: the authors' schema, or a run's records.jsonl."""
        if predictions.is_dir() or predictions.name == "records.jsonl":
            folder = predictions if predictions.is_dir() else predictions.parent
            predictions = folder / "predictions_ref_adv.jsonl"
        return score_rows(read_authors_predictions(predictions))

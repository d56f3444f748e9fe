"""MC-Bench: box every instance a prompt refers to across an image pair (docs/protocols/mc-bench.md).

This module is the runner-facing side: samples from the release layout, prompts in both input
modes, parsing into COCO results. Scoring lives in `scoring` (official and corrected protocols).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.benchmarks.mc_bench.groundtruth import STYLES, GroundTruth, load_groundtruth
from needlepoint.benchmarks.mc_bench.parse import PairGeometry, parse_answer, parse_grounding_answer
from needlepoint.contract.base import (
    BaseBenchmark,
    DataError,
    Dataset,
    Parsed,
    ReportBox,
    ReportImage,
    ReportItem,
    Table,
    parse_errors,
    replies_text,
    report_parse_error,
    request_failures,
)
from needlepoint.contract.boxoptions import BoxOptions
from needlepoint.contract.predictions import PredictionsRun
from needlepoint.core.conversation import Conversation, ImageRef, Part
from needlepoint.core.files import json_text, write_atomic
from needlepoint.core.geometry import (
    BoxFormat,
    box_shape,
    coordinate_range,
    coordinate_words,
    iou_matrix,
    xywh_to_xyxy,
    xyxy_to_xywh,
)
from needlepoint.core.records import Record, scores
from needlepoint.families import Syntax
from needlepoint.stats.resampler import Resampler

RELEASE_FILE = "mc-bench_v0.2_val.json"
IMAGES_DIR = "mc-bench_images"
RESULTS_FILE = "results_coco.json"
BAND = 20

SEQUENCE_PROMPT = """Description: "{text}"
Find every object in Image 1 and Image 2 that the description refers to. It may refer to objects in one image, in both, or in neither. When it asks for several kinds of object (for example pairs of the same colour), number the kinds as groups 1, 2, 3, ...; otherwise put every box in group 1.
Give each box as [x1, y1, x2, y2] {coordinates}.
Answer with JSON only, one list per image and an empty list for an image with no match:
{"image_1": [{"group": 1, "bbox_2d": [x1, y1, x2, y2]}], "image_2": []}"""
MERGED_PROMPT = """The picture shows two images side by side with a white band between them: Image 1 on the left, Image 2 on the right.
Description: "{text}"
Find every object in the two images that the description refers to. It may refer to objects in one image, in both, or in neither. When it asks for several kinds of object (for example pairs of the same colour), number the kinds as groups 1, 2, 3, ...; otherwise put every box in group 1.
Give each box as [x1, y1, x2, y2] {coordinates}.
Answer with JSON only, and an empty list when nothing matches:
{"boxes": [{"group": 1, "bbox_2d": [x1, y1, x2, y2]}]}"""
REPAIR_TEXT = (
    "Your previous answer did not contain a valid JSON answer. Reply with ONLY one JSON code block in the schema "
    "asked for, with an empty list for an image with no match, and no other text."
)
# A family's token syntax (contract/grounding.py), asked for in MC-Bench's words: {box} is one box
# in the syntax, {labelled} one box with the label of group 1, {coordinates_image} / {coordinates_picture} what the
# numbers are (filled in by `_grounding_template`).
GROUNDING_SEQUENCE_PROMPT = """Description: "{text}"
Find every object in Image 1 and Image 2 that the description refers to. It may refer to objects in one image, in both, or in neither. When it asks for several kinds of object (for example pairs of the same colour), number the kinds as groups 1, 2, 3, ...; otherwise put every box in group 1.
Answer with one line per image: each group's label, then its boxes as {box} {coordinates_image}, and none for an image with no match:
Image 1: {labelled}
Image 2: none"""
GROUNDING_MERGED_PROMPT = """The picture shows two images side by side with a white band between them: Image 1 on the left, Image 2 on the right.
Description: "{text}"
Find every object in the two images that the description refers to. It may refer to objects in one image, in both, or in neither. When it asks for several kinds of object (for example pairs of the same colour), number the kinds as groups 1, 2, 3, ...; otherwise put every box in group 1.
Answer with each group's label, then its boxes as {box} {coordinates_picture}, or none when nothing matches:
{labelled}"""
GROUNDING_REPAIR_TEXT = (
    "Your previous answer did not give the boxes in the asked-for form. Reply with ONLY one line per image, "
    "each group's label and then its boxes as {box} with coordinates {range}, "
    "and none for an image with no match, for example:\n"
    "Image 1: {labelled}\nImage 2: none"
)
# A family's own prompt (merged picture): the repair asks for its syntax only.
FAMILY_REPAIR_TEXT = (
    "Your previous answer did not give the boxes in the asked-for form. Reply with ONLY the boxes, each as {box} "
    "with coordinates {range}, or none when nothing matches."
)


def _grounding_template(template: str, syntax: Syntax, box_format: BoxFormat) -> str:
    """A grounding template in `syntax`, its numbers described for `box_format`; the description's
    `{text}` stays to be filled per sample."""
    return (
        template.replace("{box}", syntax.example)
        .replace("{labelled}", syntax.labelled_example("group 1"))
        .replace("{range}", coordinate_range(box_format))
        .replace("{coordinates_image}", coordinate_words(box_format, "its own image"))
        .replace("{coordinates_picture}", coordinate_words(box_format, "the whole picture"))
    )


# --prompt-wording finetuned-baseline: the instruction MC-Bench's finetuned baseline (Qwen2-VL-7B +
# LoRA) was prompted with (the paper's appendix): no format is stated; the model learnt it.
FINETUNED_PROMPT = "Output the bounding boxes of {text}"
PROMPT_WORDINGS = ("needlepoint", "finetuned-baseline")


@dataclass
class McSample:
    """One description with its image pair."""

    id: str
    text: str
    style: str | None
    image_ids: tuple[int, int]
    images: tuple[ImageRef, ImageRef]
    geometry: PairGeometry

    def fingerprint(self) -> str:
        return (
            f"{self.id}|{self.text}|{self.style}|{self.image_ids}|{self.images[0].key}|{self.images[1].key}|{self.geometry.sizes}"
        )


def _merged_loader(left: ImageRef, right: ImageRef, band: int) -> bytes:
    from needlepoint.core.images import merge_pair

    return merge_pair(left.read_bytes(), right.read_bytes(), band)[0]


def results_from_records(samples: Sequence[McSample], records: Sequence[Record]) -> list[dict[str, Any]]:
    """COCO results `{image_id, category_id, bbox: [x, y, w, h], score}` of every parsed box."""
    by_id = {s.id: s for s in samples}
    out = []
    for rec in records:
        sample = by_id[rec["id"]]
        for box in rec.get("answer") or []:
            out.append(
                {
                    "image_id": sample.image_ids[box["image"]],
                    "category_id": box["group"],
                    # a box read from a results file keeps the file's numbers (predictions.py)
                    "bbox": list(box["bbox_xywh"]) if "bbox_xywh" in box else xyxy_to_xywh(box["bbox"]),
                    "score": box.get("score", 1.0),
                }
            )
    return out


def _split_styles(styles: str | Sequence[str] | None) -> list[str] | None:
    if styles is None:
        return None
    names = [s.strip() for s in styles.split(",")] if isinstance(styles, str) else list(styles)
    by_lower = {s.lower(): s for s in STYLES}
    wrong = [s for s in names if s.lower() not in by_lower]
    if wrong:
        raise DataError(f"--styles: unknown style {wrong[0]!r}; use {', '.join(STYLES)}")
    return [by_lower[s.lower()] for s in names if s]


def annotation_path(data: Path) -> Path:
    """The annotation file of a release folder (or the file itself)."""
    if data.is_file():
        return data
    for name in (RELEASE_FILE, "MC-Bench_coco_format.json"):
        if (data / name).is_file():
            return data / name
    raise DataError(f"{data} holds no {RELEASE_FILE}; point --data at the MC-Bench release folder")


class McBench(BaseBenchmark):
    """The MC-Bench benchmark."""

    name = "mc_bench"

    def __init__(
        self,
        box_format: str | None = None,
        input_mode: str | None = None,
        prompt_file: str | Path | None = None,
        styles: str | Sequence[str] | None = None,
        max_image_side: int | None = None,
        abs_frame: str | None = None,
        abs_frame_factor: int | None = None,
        abs_frame_min_pixels: int | None = None,
        abs_frame_max_pixels: int | None = None,
        answer_format: str | None = None,
        prompt_wording: str | None = None,
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
        fam = self.boxes.family
        input_mode = input_mode or (fam.input_mode if fam else "sequence")
        if input_mode not in ("sequence", "merged"):
            raise DataError(f"--input-mode must be sequence or merged, not {input_mode!r}")
        self.input_mode = input_mode
        self.template = self._default_template()
        self.prompt_wording = prompt_wording or "needlepoint"
        if self.prompt_wording not in PROMPT_WORDINGS:
            raise DataError(f"--prompt-wording {prompt_wording!r} is unknown; use needlepoint or finetuned-baseline")
        if self.prompt_wording == "finetuned-baseline":
            if prompt_file is not None:
                raise DataError("--prompt-wording finetuned-baseline and --prompt-file both set the prompt; give one")
            self.template = FINETUNED_PROMPT
        if prompt_file is not None:
            try:
                self.template = Path(prompt_file).expanduser().read_text(encoding="utf-8")
            except OSError as exc:
                raise DataError(f"--prompt-file {prompt_file} cannot be read ({exc.strerror})") from None
            except UnicodeDecodeError:
                raise DataError(f"--prompt-file {prompt_file} is not UTF-8 text; save it as UTF-8") from None
            if "{text}" not in self.template:
                raise DataError(f"--prompt-file {prompt_file} has no {{text}} placeholder for the description")
        self.styles = _split_styles(styles)

    @property
    def own_prompt(self) -> bool:
        """Whether the family's own grounding prompt is asked (a family that has one, on the merged
        picture as MC-Bench's authors ran such models, or a detector on each image)."""
        fam = self.boxes.family
        return bool(fam and fam.prompt and (self.input_mode == "merged" or fam.detector))

    def _default_template(self) -> str:
        """The prompt template of the run's family, input mode and answer syntax."""
        fam, syntax, box_format = self.boxes.family, self.boxes.syntax, self.boxes.box_format
        if fam is not None and fam.prompt and self.own_prompt:
            return fam.prompt.replace("{ref}", "{text}")
        if syntax is None:
            template = MERGED_PROMPT if self.input_mode == "merged" else SEQUENCE_PROMPT
            return template.replace("[x1, y1, x2, y2]", box_shape(box_format))
        if box_format is None:  # refused when the data is loaded
            return ""
        base = GROUNDING_MERGED_PROMPT if self.input_mode == "merged" else GROUNDING_SEQUENCE_PROMPT
        return _grounding_template(base, syntax, box_format)

    def image_limit(self) -> tuple[int, str] | None:
        """The model family's most images a request (the dry run checks it)."""
        return self.boxes.image_limit()

    def identity(self) -> dict[str, Any]:
        return {
            "input_mode": self.input_mode,
            "template": self.template,
            "styles": self.styles,
            **self.boxes.identity(),  # box_format, max_image_side, and the frame and answer format off their defaults
        }

    def _ground_truth(self, data: Path) -> tuple[GroundTruth, list[str] | None]:
        """The whole annotation file, and the ids of the samples of the chosen styles (None: all)."""
        gt = load_groundtruth(annotation_path(data))
        if not self.styles:
            return gt, None
        if any(s.style is None for s in gt.samples):
            raise DataError("--styles needs the release file (mc-bench_v0.2_val.json), which names each style")
        ids = [s.id for s in gt.samples if s.style in self.styles]
        if not ids:
            raise DataError(f"no sample has the style(s) {', '.join(self.styles)}")
        return gt, ids

    def load(self, data: Path) -> Dataset[McSample]:
        self.boxes.require(self.name)
        if not data.exists():
            raise DataError(f"--data {data} does not exist; download MC-Bench and point --data at the release folder")
        gt, ids = self._ground_truth(data)
        folder = data if data.is_dir() else data.parent
        images_root = folder / IMAGES_DIR
        if not images_root.is_dir():
            raise DataError(f"{images_root} does not exist; the release layout is {RELEASE_FILE} beside {IMAGES_DIR}/")
        return Dataset(self._samples(gt, ids, images_root), truth=gt)

    def _samples(self, gt: GroundTruth, ids: list[str] | None, images_root: Path | None) -> list[McSample]:
        """The samples of `gt` (those of `ids` only, when given), their images under `images_root`
        (None: images named by their key only, for scoring without them)."""
        from needlepoint.core.images import safe_path

        wanted = set(ids) if ids is not None else None
        samples = []
        for s in gt.samples:
            if wanted is not None and s.id not in wanted:
                continue
            refs = []
            for image_id in s.image_ids:
                im = gt.image_by_id[image_id]
                # A missing file is found when its request is built: that sample is recorded as an
                # input error and not sent, and the rest of the run goes on.
                path = safe_path(images_root, im.file_name, f"image {image_id}") if images_root is not None else None
                refs.append(ImageRef(key=im.file_name, path=path, max_side=self.boxes.max_image_side))
            sizes = tuple((float(gt.image_by_id[i].width), float(gt.image_by_id[i].height)) for i in s.image_ids)
            geometry = PairGeometry(sizes, BAND, self.boxes.max_image_side, self.boxes.frame)  # type: ignore[arg-type]  # a pair: the ground truth holds two images per sample
            samples.append(McSample(s.id, s.text, s.style, s.image_ids, (refs[0], refs[1]), geometry))
        return samples

    def _instruction(self, sample: McSample) -> str:
        of = "the whole picture" if self.input_mode == "merged" else "its own image"
        coords = coordinate_words(self.boxes.require(self.name), of)
        return self.template.replace("{text}", sample.text).replace("{coordinates}", coords)

    def prompt(self, sample: McSample) -> Conversation:
        text = self._instruction(sample)
        fam = self.boxes.family
        text_first = bool(fam and fam.text_first and self.own_prompt)
        if self.input_mode == "merged":
            left, right = sample.images
            canvas = ImageRef(
                key=f"merged:{left.key}+{right.key}",
                loader=functools.partial(_merged_loader, left, right, BAND),
                max_side=self.boxes.max_image_side,
            )
            parts: list[Part] = [text, canvas] if text_first else [canvas, "\n" + text]
        elif self.own_prompt:  # a detector: each image with the description
            parts = [sample.images[0], sample.images[1], text]
        else:
            parts = ["Image 1:", sample.images[0], "\nImage 2:", sample.images[1], "\n" + text]
        return self.boxes.conversation(parts)

    def parse(self, sample: McSample, text: str) -> Parsed:
        box_format = self.boxes.require(self.name)
        merged = self.input_mode == "merged"
        syntax = self.boxes.syntax
        if syntax is not None:
            return parse_grounding_answer(text, sample.geometry, merged, syntax, box_format)
        return parse_answer(text, sample.geometry, box_format, merged, family=self.boxes.family is not None)

    def answer_schema(self) -> dict[str, Any] | None:
        """The JSON schema of the answer (`--structured-output`): the input mode's prompt's shape;
        None with a --prompt-file (its answer's shape is the file's to say)."""
        from needlepoint.contract.boxschema import boxes_object, image_lists, mc_box_item

        if self.template not in (MERGED_PROMPT, SEQUENCE_PROMPT):
            return None
        item = mc_box_item(self.boxes.box_format)
        return boxes_object(item) if self.input_mode == "merged" else image_lists(item)

    def followup(self, sample: McSample, parsed: Parsed, finish_reason: str | None) -> str | None:
        syntax, box_format = self.boxes.syntax, self.boxes.box_format
        if syntax is None or box_format is None:
            return REPAIR_TEXT
        return _grounding_template(FAMILY_REPAIR_TEXT if self.own_prompt else GROUNDING_REPAIR_TEXT, syntax, box_format)

    def judge(self, sample: McSample, parsed: Parsed) -> dict[str, Any]:
        boxes = parsed.answer or []
        return {"boxes": len(boxes), "groups": len({b["group"] for b in boxes})}

    def score(self, dataset: Dataset[McSample], records: Sequence[Record]) -> dict[str, Any]:
        from needlepoint.benchmarks.mc_bench.scoring import score_results

        results = results_from_records(dataset, records)
        metrics = score_results(_truth(dataset), results, [s.id for s in dataset])
        metrics["parse_errors"] = parse_errors(records)
        metrics["failures"] = request_failures(records)
        if not results:
            metrics["notes"] = [
                "no boxes were predicted: results_coco.json is an empty list (the authors' evaluator crashes on it)"
            ]
        return metrics

    def stratum(self, dataset: Dataset[McSample], sample: McSample) -> str:
        """Prompt style x positive/negative (does the pair hold a target): "Reasoning/positive"."""
        truth = getattr(dataset, "truth", None)
        gt = truth.sample_by_id.get(sample.id) if truth is not None else None
        positive = getattr(gt, "positive", None)
        if positive is None and truth is not None:  # the COCO layout has no flag: a box in the pair
            positive = any(b.image_id in sample.image_ids for b in truth.boxes)
        sign = "?" if positive is None else "positive" if positive else "negative"
        return f"{sample.style or 'unknown'}/{sign}"

    def resampler(self, dataset: Dataset[McSample], records: Sequence[Record]) -> Resampler:
        """The samples as bootstrap units (stats.Resampler), matched once for both protocols."""
        from needlepoint.benchmarks.mc_bench.resample import McResampler

        return McResampler(_truth(dataset), results_from_records(dataset, records), [s.id for s in dataset])

    def tables(self, metrics: dict[str, Any]) -> list[Table]:
        from needlepoint.benchmarks.mc_bench.tables import mc_tables

        return mc_tables(metrics)

    def running(self, records: Sequence[Record]) -> str:
        if not records:
            return ""
        fails = sum(parse_errors(records).values())
        boxes = sum(scores(r).get("boxes", 0) for r in records)
        return f"boxes/sample {boxes / len(records):.2f}  parse fail {fails}"

    def report_items(self, dataset: Dataset[McSample], records: Sequence[Record]) -> list[ReportItem]:
        gt_boxes: dict[int, list[ReportBox]] = {}
        for b in _truth(dataset).boxes:
            gt_boxes.setdefault(b.image_id, []).append(
                ReportBox(xywh_to_xyxy(b.bbox), "gt", b.category_id, f"GT group {b.category_id}")
            )
        by_id = {s.id: s for s in dataset}
        items = []
        for rec in records:
            s = by_id[rec["id"]]
            images = []
            for position, image_id in enumerate(s.image_ids):
                preds = [
                    ReportBox(b["bbox"], "pred", b["group"], _pred_label(b))
                    for b in rec.get("answer") or []
                    if b["image"] == position
                ]
                images.append(ReportImage(s.images[position], gt_boxes.get(image_id, []) + preds))
            items.append(
                ReportItem(
                    id=s.id,
                    prompt=s.text,
                    answer=replies_text(rec),
                    images=images,
                    fields={
                        "style": s.style,
                        "GT boxes": sum(len(gt_boxes.get(i, [])) for i in s.image_ids),
                        "predicted boxes": scores(rec).get("boxes", 0),
                        "predicted groups": scores(rec).get("groups", 0),
                    },
                    filters={"style": s.style or "unknown"},
                    correct=sample_correct(images),
                    parse_error=report_parse_error(rec),
                )
            )
        return items

    def export(
        self, run_dir: Path, dataset: Dataset[McSample], records: Sequence[Record], model: str, metrics: dict[str, Any]
    ) -> list[Path]:
        from needlepoint.benchmarks.mc_bench.scoring import write_results

        results = results_from_records(dataset, records)
        path = run_dir / RESULTS_FILE
        if not results:  # no box at all: the file still exists, an empty list (the authors' script cannot read it)
            write_atomic(path, "[]\n")
            return [path]
        write_results(path, results)
        return [path]

    def predictions_run(self, predictions: Path, data: Path | None = None) -> PredictionsRun:
        """A COCO results file (the authors' format), or a run folder's, as a run's samples and
        records (predictions.py); needs `data`, the annotation file or the release folder (not
        the images). A run folder gives the samples it answered, as its metrics.json scores them."""
        from needlepoint.benchmarks.mc_bench.predictions import read_predictions, records_of

        if data is None:
            raise DataError("scoring mc_bench needs --data: the release folder or its annotation file (images not needed)")
        gt, ids = self._ground_truth(data)
        results, ids = read_predictions(predictions, gt, ids, RESULTS_FILE)
        return PredictionsRun(
            model=None,
            records=records_of(results, gt, ids),
            dataset=Dataset(self._samples(gt, ids, None), truth=gt),
            files={RESULTS_FILE: json_text(results) + "\n"},
        )


def _pred_label(box: dict[str, Any]) -> str:
    """A predicted box's label in the report: its group, and the phrase it was found by (agentic solver)."""
    phrase = box.get("phrase")
    return f"group {box['group']}" + (f": {phrase}" if phrase else "")


def _truth(dataset: Dataset[McSample]) -> GroundTruth:
    """The annotation file `load` read (the scorer needs all of it, not only the samples')."""
    if not isinstance(dataset.truth, GroundTruth):
        raise DataError("mc_bench: score and report a Dataset that McBench.load returned (it carries the ground truth)")
    return dataset.truth


def sample_correct(images: Sequence[ReportImage]) -> bool:
    """A per-sample verdict for the report's "wrong only" filter: in each image, as many predicted as
    GT boxes, and every GT box covered by a prediction at IoU >= 0.5 (groups ignored)."""
    for image in images:
        gt = [b.box for b in image.boxes if b.kind == "gt"]
        pred = [b.box for b in image.boxes if b.kind == "pred"]
        if len(gt) != len(pred):
            return False
        if gt and not (iou_matrix(gt, pred) >= 0.5).any(axis=1).all():
            return False
    return True

"""A zero-shot object detector run in this process through `transformers`: the localizer of MC-Bench's
agentic baseline (Grounding DINO, as in the paper; OWLv2 and OWL-ViT).

Each phrase is its own text query, and the detector keeps, per phrase, the one box it scores
highest; the box counts when its score reaches the threshold (0.05 in the paper). Grounding DINO
reads one caption per forward row, so each (image, phrase) is a row of the batch (the phrase alone,
as the paper boxes each phrase); OWL models take several queries per image, so an image is a row
with its phrases as queries. Either way the phrases of an image and the images of several samples
share one forward pass, up to `batch_size` rows. Boxes come back in absolute xyxy pixels of the
image given, clipped to it.

`detect` keeps a phrase's best box (the localizer's reading); `rank` keeps every box the model
proposed, highest score first (`Ranked`), for the detector model families (`detector_model.py`),
which answer with every box above a threshold and its real score.

torch and transformers come with the optional extra `models` and are imported only when a
Detector is made. The model runs in one worker thread, one batch at a time, so the event loop keeps
serving chat requests meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from needlepoint.core import numeric
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import Box
from needlepoint.models.extra import require_models, rgb_image

__all__ = ["DEFAULT_THRESHOLD", "Detection", "Detector", "KINDS", "Ranked"]

FEATURE = "--localizer detector:"
EXTRA = "agentic"  # the install the agentic baseline's docs name (the same packages as `models`)
DEFAULT_THRESHOLD = 0.05  # MC-Bench's agentic baseline keeps Grounding DINO's top-1 box above 0.05
KINDS = {"grounding-dino": "Grounding DINO", "owlv2": "OWLv2", "owlvit": "OWL-ViT"}
"""The model types (config.json `model_type`) a detector may be, with their names."""

ImageInput = Any  # an ImageRef, or a PIL image already decoded


@dataclass(frozen=True)
class Detection:
    """A phrase's best box on its image: absolute xyxy pixels (clipped to the image), the
    detector's score for it, and whether that score reaches the threshold (`kept`)."""

    box: Box
    score: float
    kept: bool

    def to_json(self) -> dict[str, Any]:
        return {"box": list(self.box), "score": self.score, "kept": self.kept}


@dataclass(frozen=True)
class Ranked:
    """Every box the detector proposed for one phrase on one image, highest score first (ties in
    the model's order): absolute xyxy pixels clipped to the image, and each box's score (for
    Grounding DINO its best text token's probability, for OWL its query's)."""

    boxes: tuple[Box, ...]
    scores: tuple[float, ...]

    def best(self, threshold: float) -> Detection:
        """The top box, kept when its score reaches `threshold` (the agentic baseline's rule)."""
        return Detection(self.boxes[0], self.scores[0], self.scores[0] >= threshold)

    def above(self, threshold: float) -> list[Detection]:
        """The boxes whose score is strictly above `threshold`, as transformers' post-processing
        keeps them (`scores > threshold`), highest first."""
        return [Detection(b, s, True) for b, s in zip(self.boxes, self.scores) if s > threshold]


def _device(torch: Any, asked: str | None) -> str:
    """The device to run on: `asked`, or the GPU when there is one; DataError for a GPU that is not there."""
    if asked is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if asked.startswith("cuda") and not torch.cuda.is_available():
        raise DataError(f"--localizer-device {asked}: torch sees no CUDA GPU on this machine; use --localizer-device cpu")
    return asked


def _caption(phrase: str) -> str:
    """A phrase as Grounding DINO's own demo prepares a caption: lower case, ending with a period."""
    text = phrase.strip().lower()
    return text if text.endswith(".") else text + "."


class Detector:
    """A Grounding DINO, OWLv2 or OWL-ViT model with its processor, run on `device`.

    Grounding DINO pads the images of a pass to the largest, and the padding changes what the model
    sees (its backbone convolves it), so an image's boxes depend on the images sharing its pass.
    `unpadded` lets only images of one processed size share a pass: each image's boxes are then
    those of the image alone (the detector families, whose answers must not depend on timing).
    OWL models resize every image to one square, so their passes never pad."""

    def __init__(
        self,
        name: str,
        model: Any,
        processor: Any,
        device: str | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        batch_size: int = 8,
        unpadded: bool = False,
    ) -> None:
        torch, _ = require_models(FEATURE, EXTRA)
        kind = str(getattr(model.config, "model_type", ""))
        if kind not in KINDS:
            raise DataError(f"{name} is a {kind or 'unknown'} model; the detector localizer runs {', '.join(KINDS.values())}")
        numeric.flag("--detector-threshold", threshold, 0.0, maximum=1.0)
        if batch_size < 1:
            raise DataError(f"the detector's batch size must be at least 1, not {batch_size}")
        self._torch = torch
        self.name = name
        self.kind = kind
        self.threshold = float(threshold)
        self.batch_size = batch_size
        self.unpadded = unpadded
        self.device = _device(torch, device)
        self.model = model.to(self.device).eval()
        self.processor = processor
        self._lock = threading.Lock()

    @classmethod
    def load(
        cls,
        path_or_id: str,
        device: str | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        batch_size: int = 8,
        unpadded: bool = False,
    ) -> Detector:
        """Load a model folder (or a Hugging Face id already in the local cache; nothing is
        downloaded at run time): the model and its processor (image processor and tokenizer)."""
        _, transformers = require_models(FEATURE, EXTRA)
        try:
            model = transformers.AutoModelForZeroShotObjectDetection.from_pretrained(path_or_id, local_files_only=True)
            processor = transformers.AutoProcessor.from_pretrained(path_or_id, local_files_only=True)
        except (OSError, ValueError, KeyError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
            raise DataError(
                f"cannot load the detector {path_or_id!r} ({first}); pass a local folder with the config, weights, "
                f"tokenizer and preprocessor files of a {', '.join(KINDS.values())} model"
            ) from None
        try:
            return cls(path_or_id, model, processor, device, threshold, batch_size, unpadded)
        except (RuntimeError, AssertionError) as exc:  # an unusable device
            raise DataError(f"cannot put {path_or_id!r} on --localizer-device {device} ({exc})") from None

    def identity(self) -> dict[str, Any]:
        """What a run's identity records of this localizer."""
        return {"detector": self.name, "model_type": self.kind, "threshold": self.threshold}

    def detect(self, queries: Sequence[tuple[ImageInput, Sequence[str]]]) -> list[list[Detection]]:
        """Per (image, phrases) pair, the best box of each phrase, in the order given."""
        return [[r.best(self.threshold) for r in per_image] for per_image in self.rank(queries)]

    def rank(self, queries: Sequence[tuple[ImageInput, Sequence[str]]]) -> list[list[Ranked]]:
        """Per (image, phrases) pair, every box of each phrase ranked by score, in the order given."""
        images = [rgb_image(im) if isinstance(im, ImageRef) else im.convert("RGB") for im, _ in queries]
        phrases = [list(p) for _, p in queries]
        with self._lock, self._torch.inference_mode():
            if self.kind == "grounding-dino":
                return self._grounding_dino(images, phrases)
            return self._owl(images, phrases)

    async def adetect(self, queries: Sequence[tuple[ImageInput, Sequence[str]]]) -> list[list[Detection]]:
        """`detect` in a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(None, self.detect, list(queries))

    def _ranked(self, probs: Any, boxes: Any, size: tuple[int, int], scale: tuple[float, float]) -> Ranked:
        """A query's candidate boxes (`probs` (N,), `boxes` (N, 4) normalised cx, cy, w, h over a
        frame of `scale` pixels) by score, highest first, in pixels of an image of `size`, clipped
        (in float64, as Python floats would be computed)."""
        torch = self._torch
        order = torch.sort(probs, descending=True, stable=True).indices
        cx, cy, w, h = boxes[order].double().unbind(-1)
        sx, sy = scale
        corners = torch.stack(((cx - w / 2) * sx, (cy - h / 2) * sy, (cx + w / 2) * sx, (cy + h / 2) * sy), dim=-1)
        limit = torch.tensor([size[0], size[1], size[0], size[1]], dtype=torch.float64)
        clipped = torch.minimum(corners.clamp(min=0.0), limit)
        return Ranked(tuple((a, b, c, d) for a, b, c, d in clipped.tolist()), tuple(probs[order].double().tolist()))

    def _image_passes(self, images: list[Any], rows: list[tuple[int, str]]) -> Iterator[tuple[list[tuple[int, str]], Any, Any]]:
        """Grounding DINO's passes over (image index, phrase) rows: the rows, pixel values and
        pixel mask of at most `batch_size` rows each; with `unpadded`, of one processed size each
        (the rows of an image stay in their order)."""
        torch = self._torch
        if not self.unpadded:
            for start in range(0, len(rows), self.batch_size):
                chunk = rows[start : start + self.batch_size]
                used = sorted({i for i, _ in chunk})
                pixels = self.processor.image_processor(images=[images[i] for i in used], return_tensors="pt")
                take = torch.tensor([used.index(i) for i, _ in chunk])
                yield chunk, pixels["pixel_values"][take], pixels["pixel_mask"][take]
            return
        alone = {i: self.processor.image_processor(images=[images[i]], return_tensors="pt") for i in sorted({i for i, _ in rows})}
        sized: dict[tuple[int, ...], list[tuple[int, str]]] = {}
        for row in rows:
            sized.setdefault(tuple(alone[row[0]]["pixel_values"].shape), []).append(row)
        for group in sized.values():
            for start in range(0, len(group), self.batch_size):
                chunk = group[start : start + self.batch_size]
                yield (
                    chunk,
                    torch.cat([alone[i]["pixel_values"] for i, _ in chunk]),
                    torch.cat([alone[i]["pixel_mask"] for i, _ in chunk]),
                )

    def _grounding_dino(self, images: list[Any], phrases: list[list[str]]) -> list[list[Ranked]]:
        rows = [(i, p) for i, ps in enumerate(phrases) for p in ps]
        out: list[list[Ranked]] = [[] for _ in images]
        max_len = int(getattr(self.model.config, "max_text_len", 256))
        for chunk, pixel_values, pixel_mask in self._image_passes(images, rows):
            text = self.processor.tokenizer(
                [_caption(p) for _, p in chunk], padding=True, truncation=True, max_length=max_len, return_tensors="pt"
            )
            result = self.model(
                pixel_values=pixel_values.to(self.device),
                pixel_mask=pixel_mask.to(self.device),
                **{k: v.to(self.device) for k, v in text.items()},
            )
            # A box's score is its best token's probability (Grounding DINO's own reading);
            # boxes are relative to the image itself (the padding is masked).
            probs = result.logits.sigmoid().max(dim=-1).values.float().cpu()
            boxes = result.pred_boxes.float().cpu()
            for r, (i, _) in enumerate(chunk):
                size = images[i].size
                out[i].append(self._ranked(probs[r], boxes[r], size, (float(size[0]), float(size[1]))))
        return out

    def _owl(self, images: list[Any], phrases: list[list[str]]) -> list[list[Ranked]]:
        out: list[list[Ranked]] = [[] for _ in images]
        todo = [i for i, ps in enumerate(phrases) if ps]
        config = self.model.config.text_config
        max_len = int(getattr(config, "max_position_embeddings", 16))
        for start in range(0, len(todo), self.batch_size):
            chunk = todo[start : start + self.batch_size]
            queries = max(len(phrases[i]) for i in chunk)
            # every image gets as many queries as the longest list; the filler queries' scores are not read
            texts = [q for i in chunk for q in phrases[i] + [" "] * (queries - len(phrases[i]))]
            text = self.processor.tokenizer(texts, padding="max_length", truncation=True, max_length=max_len, return_tensors="pt")
            pixels = self.processor.image_processor(images=[images[i] for i in chunk], return_tensors="pt")["pixel_values"]
            result = self.model(
                input_ids=text["input_ids"].to(self.device),
                attention_mask=text["attention_mask"].to(self.device),
                pixel_values=pixels.to(self.device),
            )
            probs = result.logits.sigmoid().float().cpu()  # (images, boxes, queries)
            boxes = result.pred_boxes.float().cpu()
            for r, i in enumerate(chunk):
                width, height = images[i].size
                # OWLv2 pads an image to a square (right and bottom) before resizing; OWL-ViT resizes it.
                side = float(max(width, height))
                scale = (side, side) if self.kind == "owlv2" else (float(width), float(height))
                out[i] = [self._ranked(probs[r, :, q], boxes[r], (width, height), scale) for q in range(len(phrases[i]))]
        return out

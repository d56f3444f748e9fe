"""A zero-shot detector as the model of a run: the detector families (`--model-family grounding-dino`,
`owlv2`), MC-Bench's "foundation models without LLMs" rows (G-DINO-B) run in this process.

`DetectorModel.complete` reads a request as a chat model would receive it, the sample's text and its
images, and runs the detector (models/detector.py, batched across samples by
models/detector_batch.py) once per image with that text as its one query. It answers in JSON, in
pixels of each image as it would be sent (its `max_side` honoured), clipped to it:
`{"boxes": [{"bbox_2d": [x1, y1, x2, y2], "score": s}, ...]}` for one image, `{"image_1": [...],
"image_2": [...]}` for several (MC-Bench's sequence mode), highest score first. Every box whose score
is strictly above the threshold is kept, with its real score, so MC-Bench's AP50 ranks detections by
the detector's own confidence; with `top1` (Ref-Adv-s, where one box is scored) each image gets its
best box whatever its score. The default threshold is the family's own in transformers'
post-processing; the threshold MC-Bench's authors used is not published (docs/model-families.md).

The text is the request's first user message's text without image labels (`Image 1:`) and `<image>`
placeholders. Grounding DINO reads it lower-cased and ending with a period (as its own demo prepares
a caption) and cut at its text length (256 BERT tokens in the released checkpoints); OWL models read it
as one query, cut at their text length (16 CLIP tokens in transformers' OWLv2 config default). A reply
costs no tokens: usage is zero.
"""

from __future__ import annotations

import asyncio
import io
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from needlepoint.core import numeric
from needlepoint.core.conversation import Conversation, Generation, ImageRef, Reply
from needlepoint.core.errors import DataError
from needlepoint.core.files import json_text
from needlepoint.core.options import Option

if TYPE_CHECKING:  # the detector modules (numpy, and torch when loaded) are imported when a model is made:
    # the CLI reads OPTIONS and DETECTOR_FAMILIES while it builds its parser
    from needlepoint.models.detector import Detection, Ranked
    from needlepoint.models.detector_batch import BatchedDetector

__all__ = [
    "DETECTOR_FAMILIES",
    "OPTIONS",
    "DetectorFamily",
    "DetectorModel",
    "caption",
    "detector_identity",
    "detector_model",
    "sent_image",
]


@dataclass(frozen=True)
class DetectorFamily:
    """A detector family: the transformers model types (config.json `model_type`) it runs, its
    default score threshold and where that default comes from."""

    name: str
    kinds: tuple[str, ...]
    threshold: float
    source: str


DETECTOR_FAMILIES: dict[str, DetectorFamily] = {
    f.name: f
    for f in (
        DetectorFamily(
            "grounding-dino",
            ("grounding-dino",),
            0.25,
            "transformers GroundingDinoProcessor.post_process_grounded_object_detection: threshold=0.25 "
            "(its text_threshold=0.25 only picks the words of a box's label, which the reply does not carry)",
        ),
        DetectorFamily(
            "owlv2",
            ("owlv2",),
            0.1,
            "transformers Owlv2Processor.post_process_grounded_object_detection: threshold=0.1",
        ),
        DetectorFamily(
            "owlvit",
            ("owlvit",),
            0.1,
            "transformers OwlViTProcessor.post_process_grounded_object_detection: threshold=0.1",
        ),
    )
}

DEFAULT_BATCH = 8  # images per forward pass (each image with its one query)

OPTIONS: tuple[Option, ...] = (
    Option(
        "--score-threshold",
        "detector families (grounding-dino, owlv2): keep every box whose score is above this (default: the family's "
        "own in transformers' post-processing, grounding-dino 0.25, owlv2 0.1; Grounding DINO's text threshold, 0.25, "
        "only names a box's words and changes no box). MC-Bench's paper does not state the threshold of its detector rows",
        type=float,
        metavar="SCORE",
    ),
    Option(
        "--detector-device",
        "detector families: where the detector runs (default: the GPU when there is one)",
        choices=("cuda", "cpu"),
        metavar="cuda|cpu",
    ),
    Option(
        "--detector-batch",
        f"detector families: images per forward pass, across samples (default {DEFAULT_BATCH})",
        type=int,
        metavar="N",
    ),
)
"""The flags of the detector families, by keyword: score_threshold, detector_device, detector_batch."""

_LABEL = re.compile(r"\s*(?:image|img|picture)\s*\d+\s*:\s*", re.IGNORECASE)
_PLACEHOLDER = "<image>"


def sent_image(ref: ImageRef) -> Any:
    """An image as a request would carry it (`core/images.encode_jpeg`: the stored JPEG, or a JPEG of
    it within `ref.max_side`), decoded to an RGB PIL image."""
    from PIL import Image

    from needlepoint.core.images import encode_jpeg

    data = encode_jpeg(ref)
    try:
        return Image.open(io.BytesIO(data)).convert("RGB")
    except Exception as exc:  # Pillow raises many types for bad files
        raise DataError(f"image {ref.key} cannot be decoded ({exc}); replace or remove it") from None


def caption(conversation: Conversation) -> tuple[str, list[ImageRef]]:
    """The text and the images of a request's first user message: its text parts without image
    labels (`Image 1:` alone in a part) and `<image>` placeholders, joined and stripped."""
    message = next((m for m in conversation.messages if m.role == "user"), None)
    if message is None:
        return "", []
    texts = [p.replace(_PLACEHOLDER, " ") for p in message.parts if isinstance(p, str) and not _LABEL.fullmatch(p)]
    return " ".join(" ".join(texts).split()), message.images


def detector_identity(family: str, threshold: float | None, top1: bool = False) -> dict[str, Any]:
    """What a run's identity records of a detector family's settings, each of which changes the
    answers (another threshold is another run); computed without loading the model (a dry run)."""
    if top1:
        return {"family": family, "boxes": "top1"}
    spec = DETECTOR_FAMILIES.get(family)
    default = spec.threshold if spec is not None else None
    return {"family": family, "boxes": "above_threshold", "threshold": default if threshold is None else float(threshold)}


def _items(found: list[Detection]) -> list[dict[str, Any]]:
    return [{"bbox_2d": list(d.box), "score": d.score} for d in found]


class DetectorModel:
    """A detector family's model: answers each request with the detector's scored boxes (module
    docstring). `threshold`: boxes scoring above it are kept; `top1`: each image's best box only."""

    def __init__(self, detector: BatchedDetector, family: DetectorFamily, threshold: float, top1: bool = False) -> None:
        numeric.flag("--score-threshold", threshold, 0.0, maximum=1.0)
        self.detector = detector
        self.name = detector.name
        self.family = family
        self.threshold = float(threshold)
        self.top1 = top1

    def identity(self) -> dict[str, Any]:
        """What a run's identity must record of this model (`detector_identity`)."""
        return detector_identity(self.family.name, self.threshold, self.top1)

    def _kept(self, ranked: Ranked) -> list[Detection]:
        if self.top1:
            return [ranked.best(0.0)] if ranked.boxes else []
        return ranked.above(self.threshold)

    async def complete(self, conversation: Conversation, generation: Generation) -> Reply:
        """The detector's boxes for the request's text on each of its images, as JSON text.
        DataError (the run's input error) for a request without images or text, or an image that
        cannot be read, as a served model's client raises it."""
        started = time.perf_counter()
        text, images = caption(conversation)
        if not images:
            raise DataError(f"the {self.family.name} detector boxes what a request's images show; this request has no image")
        if not text:
            raise DataError(f"the {self.family.name} detector needs a text to look for; this request's message has none")
        located = await asyncio.gather(*(self.detector.locate(im, text) for im in images))
        per_image = [_items(self._kept(found.ranked)) for found in located]
        answer = {"boxes": per_image[0]} if len(per_image) == 1 else {f"image_{k + 1}": b for k, b in enumerate(per_image)}
        return Reply(
            text=json_text(answer),
            finish_reason="stop",
            usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
            latency_s=round(time.perf_counter() - started, 4),
        )

    async def check(self) -> None:
        """Nothing to reach: the detector is loaded."""

    async def aclose(self) -> None:
        """Nothing to close (the model stays loaded for the next run of this process)."""


def detector_model(
    family: str,
    model: str,
    threshold: float | None = None,
    *,
    top1: bool = False,
    device: str | None = None,
    batch_size: int | None = None,
) -> DetectorModel:
    """The model of a detector family run (`--model-family FAMILY --model PATH_OR_HF_ID`), loaded
    now so that a bad folder, device or setting is one sentence before the run: `threshold` None is
    the family's default; `top1` answers each image's best box whatever its score (Ref-Adv-s, which
    scores one box; no threshold then); `device` cuda or cpu (None: the GPU when there is one);
    `batch_size` images per forward pass."""
    spec = DETECTOR_FAMILIES.get(family)
    if spec is None:
        raise DataError(f"{family!r} is no detector family; the detector families are {', '.join(DETECTOR_FAMILIES)}")
    if top1 and threshold is not None:
        raise DataError("--score-threshold does not apply where each image's top box is the answer (Ref-Adv-s); drop it")
    chosen = spec.threshold if threshold is None else threshold
    numeric.flag("--score-threshold", chosen, 0.0, maximum=1.0)
    batch = DEFAULT_BATCH if batch_size is None else batch_size
    if batch < 1:
        raise DataError(f"--detector-batch must be at least 1, not {batch}")
    from needlepoint.models.detector import Detector
    from needlepoint.models.detector_batch import BatchedDetector
    from needlepoint.models.extra import EXTRA, require_models

    torch, _ = require_models(f"--model-family {family}", EXTRA)
    if device is not None and device.startswith("cuda") and not torch.cuda.is_available():
        raise DataError(f"--detector-device {device}: torch sees no CUDA GPU on this machine; use --detector-device cpu")
    detector = Detector.load(model, device, batch_size=batch, unpadded=True)
    if detector.kind not in spec.kinds:
        raise DataError(
            f"{model} is a {detector.kind} model, not a {family} one; pass --model-family "
            f"{next((f.name for f in DETECTOR_FAMILIES.values() if detector.kind in f.kinds), detector.kind)} or a {family} model"
        )
    batched = BatchedDetector(lambda: detector, model, max_rows=2 * batch, decode=sent_image)
    return DetectorModel(batched, spec, chosen, top1)

"""MC-Bench's agentic baseline, the pure part: what the reasoner is asked and how its reply is read,
what a served localizer is asked and how its box is read, and how the located targets become an
ordinary MC-Bench answer.

The paper's best system (MC-Bench, Table 2) lets a reasoning model read both images and the
description and write one short referring phrase per target instance, with its group; a grounding
model then boxes each phrase in its own image. The paper's prompt (its Table 8) is an image we do
not have, so the reasoner's prompt here is ours; it reuses the wording of the end-to-end prompt
where the task is the same. Nothing here talks to a model: a solver sends these conversations and
passes the replies back. The answer `assemble_answer` builds is the one `McBench.parse` produces
(`[{"image", "group", "bbox", "score"}]` in each image's pixels), so `judge`, both scorers,
`results_coco.json` and the report take it unchanged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypedDict

from needlepoint.benchmarks.mc_bench.benchmark import REPAIR_TEXT, SEQUENCE_PROMPT, McSample

# The end-to-end parser's readers of image keys ("image_1", "Image 1", "img1") and group numbers
# ("2", 2.0, "group 2"): one reading of both for the two prompts.
from needlepoint.benchmarks.mc_bench.parse import OutOfRange, group_number, image_index
from needlepoint.contract.base import Parsed
from needlepoint.contract.boxes import parse_boxes
from needlepoint.core.conversation import Conversation, ImageRef, Message
from needlepoint.core.geometry import BoxFormat, coordinate_words
from needlepoint.core.jsonfind import find_json

if TYPE_CHECKING:
    from needlepoint.models.detector import Detection

__all__ = [
    "LOCALIZER_PROMPT",
    "REASONER_PROMPT",
    "REASONER_REPAIR_TEXT",
    "Target",
    "answer_from_detections",
    "assemble_answer",
    "detector_queries",
    "localizer_prompt",
    "localizer_request",
    "parse_localizer_reply",
    "parse_localizer_target",
    "parse_targets",
    "reasoner_prompt",
]


class Target(TypedDict):
    """One target instance the reasoner names: its image (0 or 1, pair order), group and phrase."""

    image: int
    group: int
    phrase: str


# The first two lines of the end-to-end sequence prompt (the description, and what to find with its
# group rule) are the task itself; only the answer asked for differs.
_DESCRIPTION, _FIND = SEQUENCE_PROMPT.splitlines()[:2]
REASONER_PROMPT = (
    _DESCRIPTION
    + "\n"
    + _FIND.replace("put every box in group 1", "put every object in group 1")
    + "\nDo not give coordinates. Name each object with a short referring phrase that picks out that one object"
    " in its own image, for a detector that sees only that image and the phrase: its kind, and what tells it apart"
    ' from similar objects there (colour, size, position), for example "the red car on the left". Give one entry'
    " per object, even when several objects match the description alike."
    "\nAnswer with JSON only, one list per image and an empty list for an image with no match:"
    '\n{"image_1": [{"group": 1, "phrase": "the red car on the left"}], "image_2": []}'
)
REASONER_REPAIR_TEXT = REPAIR_TEXT
"""The repair turn after a reply that is not a valid answer: the end-to-end prompt's, which names
the schema only by reference, so it fits both."""

LOCALIZER_PROMPT = (
    'Locate the single object described as "{phrase}" in the image.\n'
    "Give its box as [x1, y1, x2, y2] {coordinates}.\n"
    'Answer with JSON only: {"bbox_2d": [x1, y1, x2, y2]}'
)

PHRASE_KEYS = (
    "phrase",
    "referring_phrase",
    "referring_expression",
    "expression",
    "description",
    "text",
    "label",
    "name",
    "object",
    "caption",
)
LIST_KEYS = ("targets", "instances", "objects", "items", "phrases", "answer", "results", "predictions")
_NOTHING = re.compile(
    r"(none|nothing|n/?a|null|-|no( matching)?( match(es)?| targets?| objects?| instances?)?)\.?", re.IGNORECASE
)


_OTHER_IMAGE = re.compile(r"(?:image|img|picture)\d+")


def reasoner_prompt(sample: McSample) -> Conversation:
    """The reasoner's request: both images in pair order, labelled as in `sequence` mode, then the
    description and the answer asked for."""
    text = REASONER_PROMPT.replace("{text}", sample.text)
    return Conversation([Message("user", ["Image 1:", sample.images[0], "\nImage 2:", sample.images[1], "\n" + text])])


def parse_targets(text: str) -> Parsed:
    """A reasoner reply into `[Target]` (pair order, then reply order), or a parse error
    (`empty_response`, `no_json_found`, `bad_schema`, `image_not_given`, as the end-to-end parser
    names them). A JSON answer that names no instance (`{"image_1": [], "image_2": []}`, `[]`,
    `{}`, "none" for an image) is the valid answer "no targets"."""
    if not text or not text.strip():
        return Parsed(error="empty_response")
    try:
        value = find_json(text)
    except LookupError:
        return Parsed(error="no_json_found")
    try:
        targets = _targets(value)
    except _Invalid as exc:
        return Parsed(error=str(exc))
    targets.sort(key=lambda t: t["image"])  # stable: reply order within an image
    return Parsed(answer=targets)


class _Invalid(Exception):
    """A reply's JSON is not a targets answer; the message is the parse error."""


def _targets(value: Any) -> list[Target]:
    if isinstance(value, list):
        return _items(value, None)
    if not isinstance(value, dict):
        raise _Invalid("bad_schema")
    per_image: dict[int, Any] = {}
    for key, v in value.items():
        index = image_index(key)
        if index is not None:
            per_image[index] = v
        elif _OTHER_IMAGE.fullmatch(re.sub(r"[^a-z0-9]", "", str(key).lower())):
            raise _Invalid("image_not_given")  # "image_3": no image of the pair, as {"image": 3} in an entry
    if per_image:
        out: list[Target] = []
        for image, v in sorted(per_image.items()):
            out += _image_value(v, image)
        return out
    for key in LIST_KEYS:
        if key in value:
            return _targets(value[key])
    if not value:
        return []
    return _items([value], None)


def _image_value(v: Any, image: int) -> list[Target]:
    """The targets listed under one image's key."""
    if v is None or (isinstance(v, str) and (not v.strip() or _NOTHING.fullmatch(v.strip()))):
        return []
    if isinstance(v, dict):
        inner = next((v[k] for k in LIST_KEYS if k in v), None)
        if inner is not None and not isinstance(inner, str):
            return _image_value(inner, image)
        return _items([v], image) if v else []
    if isinstance(v, list):
        return _items(v, image)
    return _items([v], image)


def _items(values: list[Any], image: int | None) -> list[Target]:
    out: list[Target] = []
    for v in values:
        out += _item(v, image)
    return out


def _item(v: Any, image: int | None) -> list[Target]:
    """The targets of one list entry: a phrase, or an object with a phrase (or a list of phrases
    under `phrases`), an optional group (1 when absent) and an optional image number."""
    if isinstance(v, str):
        phrases, group = [v], 1
    elif isinstance(v, dict):
        phrase = next((v[k] for k in PHRASE_KEYS if isinstance(v.get(k), str) and v[k].strip()), None)
        many = v.get("phrases")
        if phrase is not None:
            phrases = [phrase]
        elif isinstance(many, list) and many and all(isinstance(p, str) for p in many):
            phrases = many
        else:
            raise _Invalid("bad_schema")
        try:
            number = group_number(v.get("group", v.get("group_id", 1)))
            group = number if number is not None and number >= 1 else 1
            if "image" in v:
                number = group_number(v["image"])
                image = number - 1 if number in (1, 2) else None
        except OutOfRange:
            raise _Invalid("bad_schema") from None
    else:
        raise _Invalid("bad_schema")
    if image is None:
        raise _Invalid("image_not_given")
    phrases = [p.strip() for p in phrases]
    if not all(phrases):
        raise _Invalid("bad_schema")
    return [Target(image=image, group=group, phrase=p) for p in phrases]


def localizer_prompt(phrase: str, image: ImageRef, box_format: BoxFormat) -> Conversation:
    """A served grounding model's request: that phrase's image alone, and the box of the single
    object the phrase describes, in the localizer's own box convention."""
    coordinates = coordinate_words(box_format, "the image")
    text = LOCALIZER_PROMPT.replace("{coordinates}", coordinates).replace("{phrase}", phrase)
    return Conversation([Message("user", [image, "\n" + text])])


def parse_localizer_reply(
    text: str, box_format: BoxFormat, size: tuple[float, float], seen: tuple[float, float] | None = None
) -> Parsed:
    """The first box of a localizer's reply as `[x1, y1, x2, y2]` in pixels of the image of `size`
    (width, height), or `empty_response` / `no_bbox_found`. `seen` is the size pixel boxes refer
    to when it is not `size` (`geometry.model_frame`: a downscaled image, Qwen's resize)."""
    parsed = parse_boxes(text, box_format, size[0], size[1], seen)
    if parsed.error is not None:
        return parsed
    return Parsed(answer=list(parsed.answer[0]))


def assemble_answer(
    targets: Sequence[Target], boxes: Sequence[Sequence[float] | None], scores: Sequence[float] | None = None
) -> Parsed:
    """The MC-Bench answer of located targets: per target its box (absolute xyxy pixels of its
    image; None when the localizer found none) with the reasoner's group, and its score (the
    detector's confidence, which orders boxes for AP; 1.0 without one). Unlocated targets are left
    out; each box keeps its phrase for the report."""
    if len(boxes) != len(targets) or (scores is not None and len(scores) != len(targets)):
        raise ValueError("assemble_answer needs one box (and one score, if any) per target")
    out = []
    for i, (target, box) in enumerate(zip(targets, boxes)):
        if box is None:
            continue
        score = 1.0 if scores is None else float(scores[i])
        out.append(
            {
                "image": target["image"],
                "group": target["group"],
                "bbox": [float(v) for v in box],
                "score": score,
                "phrase": target["phrase"],
            }
        )
    return Parsed(answer=out)


def localizer_request(sample: McSample, target: Target, box_format: BoxFormat) -> Conversation:
    """The served localizer's request for one target: its phrase and its image of the pair."""
    return localizer_prompt(target["phrase"], sample.images[target["image"]], box_format)


def parse_localizer_target(sample: McSample, target: Target, text: str, box_format: BoxFormat) -> Parsed:
    """`parse_localizer_reply` for one target, in pixels of its image as annotated (the sample's
    geometry knows the size a downscaled image was sent at, and the abs frame)."""
    size = sample.geometry.sizes[target["image"]]
    return parse_localizer_reply(text, box_format, size, sample.geometry.seen(size))


def detector_queries(sample: McSample, targets: Sequence[Target]) -> list[tuple[ImageRef, list[str]]]:
    """The detector's input for a sample: both images in pair order, each with the phrases of its
    targets in target order (an image without targets has none and costs no query)."""
    return [(image, [t["phrase"] for t in targets if t["image"] == i]) for i, image in enumerate(sample.images)]


def answer_from_detections(targets: Sequence[Target], detections: Sequence[Sequence[Detection]]) -> Parsed:
    """The MC-Bench answer from the detector's reply to `detector_queries`: each target gets its
    phrase's best box when the detector kept it (score at or above the threshold), scored by the
    detector's confidence."""
    seen = [0, 0]
    boxes: list[Sequence[float] | None] = []
    scores: list[float] = []
    for t in targets:
        found = detections[t["image"]][seen[t["image"]]]
        seen[t["image"]] += 1
        boxes.append(list(found.box) if found.kept else None)
        scores.append(found.score)
    return assemble_answer(targets, boxes, scores)

"""What the page shows of a sample, as JSON for the page's script (which puts every text in with
`textContent`, never as HTML): the instructions, written from the benchmark's own prompt so that
people and models are asked the same thing; one sample's texts and image addresses; and, for a
gold sample once answered, the benchmark's answer. Each follows the benchmark's kind of page
(its declaration's `human`, kinds.py), never its name.
"""

from __future__ import annotations

from typing import Any

from needlepoint.human.answers import MAX_GROUPS, niah_kind, niah_options
from needlepoint.human.kinds import DOCUMENT, IMAGE_PAIR, ONE_BOX, human_kind

__all__ = ["gold_answer", "instructions", "sample_view"]

INSTRUCTIONS: dict[str, list[str]] = {  # by kind of page
    IMAGE_PAIR: [
        "Each sample is a description and two images, Image 1 on the left and Image 2 on the right.",
        "Find every object in Image 1 and Image 2 that the description refers to. It may refer to objects in one image, "
        "in both, or in neither. When it asks for several kinds of object (for example pairs of the same colour), number "
        "the kinds as groups 1, 2, 3, ...; otherwise put every box in group 1.",
        "Choose the group first, then draw: keys 1-9 set the group of the next box you draw (every sample starts at "
        "group 1). Draw a box with the mouse: press on one corner and drag to the opposite corner. Drag a box to move it, "
        "drag a corner handle to resize it, Delete removes the selected box. To change a box's group, click it, then press "
        "the key: the group bar says when it edits the clicked box. No box in an image means: no target there.",
        "Zoom each image with its + and - buttons (or + and - keys over it); 0 fits it to its pane.",
    ],
    ONE_BOX: [
        "Each sample is an image and a referring expression.",
        "Locate the one object that matches the description in the image, and draw one box around it with the mouse: "
        "press on one corner and drag to the opposite corner. Drawing again replaces the box; drag it to move it, drag a "
        "corner handle to resize it.",
        "Zoom with the + and - buttons (or keys); 0 fits the image to its pane.",
    ],
    DOCUMENT: [
        "Each sample is a long document of text and images, then a question about it.",
        "Read the document (the browser's Find, Ctrl+F, works on it), then answer the question in the box below it: "
        "a single word or phrase; a list of counts (one whole number per image or passage asked about, e.g. 2, 0, 1); or "
        "the letter of one of the options.",
    ],
}
COMMON = [
    "Submit with Enter (Ctrl+Enter in the note). Shift+S skips a sample (it then counts as wrong); Shift+U marks "
    "it unsure; Shift+N writes a note. The clock runs only while this tab is visible. Your answers are saved the moment "
    "you submit them: you can close the page and come back.",
    "Samples marked 'training' show the expected answer after you submit; they are not scored.",
]


def instructions(bench_name: str, confidence: bool = False) -> list[str]:
    """The paragraphs shown before the first sample (and behind the Help button)."""
    kind = human_kind(bench_name)
    out = list(INSTRUCTIONS[kind])
    if kind == IMAGE_PAIR and confidence:
        out.append(
            "Give each box a confidence with the slider beside the box list (or the [ and ] keys): boxes are ranked by it."
        )
    return out + COMMON


def sample_view(bench_name: str, sample: Any, image_url: Any) -> dict[str, Any]:
    """The sample as the page draws it; `image_url(index)` is the address of the sample's image `index`."""
    kind = human_kind(bench_name)
    if kind == IMAGE_PAIR:
        return {
            "text": sample.text,
            "style": sample.style,
            "groups": MAX_GROUPS,
            "images": [
                {"url": image_url(i), "width": w, "height": h, "label": f"Image {i + 1}"}
                for i, (w, h) in enumerate(sample.geometry.sizes)
            ],
        }
    if kind == ONE_BOX:
        return {
            "text": sample.caption,
            "images": [{"url": image_url(0), "width": sample.width, "height": sample.height, "label": "Image"}],
        }
    from needlepoint.benchmarks.mm_niah.data import haystack, image_pieces

    row = sample.row()  # DataError when the file changed since the plan's samples were loaded
    texts, images = niah_options(row)
    pieces = image_pieces(haystack(row))
    parts: list[dict[str, Any]] = []
    for i, piece in enumerate(pieces):
        if piece:
            parts.append({"text": piece})
        if i < len(pieces) - 1:
            parts.append({"image": image_url(i)})
    in_context = len(pieces) - 1
    letters = [chr(ord("A") + i) for i in range(26)]
    options = [{"letter": letters[i], "text": t} for i, t in enumerate(texts[:26])] or [
        {"letter": letters[i], "image": image_url(in_context + i)} for i in range(min(len(images), 26))
    ]
    return {
        "task": sample.task,
        "parts": parts,
        "question": str(row["question"]),
        "kind": niah_kind(sample.task, len(options)),
        "options": options,
    }


def gold_answer(bench_name: str, dataset: Any, sample: Any) -> dict[str, Any]:
    """The benchmark's answer to a sample, shown after a gold (training) sample is submitted:
    boxes in image pixels [{image, group, bbox}] or a text."""
    kind = human_kind(bench_name)
    if kind == IMAGE_PAIR:
        position = {image_id: i for i, image_id in enumerate(sample.image_ids)}
        boxes = [
            {
                "image": position[b.image_id],
                "group": b.category_id,
                "bbox": [b.bbox[0], b.bbox[1], b.bbox[0] + b.bbox[2], b.bbox[1] + b.bbox[3]],
            }
            for b in dataset.truth.boxes
            if b.image_id in position
        ]
        return {"boxes": boxes, "text": f"{len(boxes)} box(es)" if boxes else "no target in either image"}
    if kind == ONE_BOX:
        return {"boxes": [{"image": 0, "group": 1, "bbox": list(sample.gt)}], "text": "the expected box"}
    from needlepoint.benchmarks.mm_niah.benchmark import shown_answer

    return {"boxes": [], "text": "no answer in this split" if sample.answer is None else shown_answer(sample.answer)}

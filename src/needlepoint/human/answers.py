"""A person's answer as the page posts it, checked and put in the benchmark's own answer schema
(exactly what a model's parsed answer is), so that the benchmark's scorer reads it unchanged.

Every check refuses with one sentence (DataError): finite numbers, boxes inside their image, at
most MAX_BOXES boxes, the right type for an MM-NIAH task.
"""

from __future__ import annotations

import json
from typing import Any

from needlepoint.core.errors import DataError
from needlepoint.core.numeric import is_finite
from needlepoint.human.kinds import DOCUMENT, IMAGE_PAIR, ONE_BOX, article, declared

__all__ = ["MAX_BOXES", "MAX_GROUPS", "MAX_TEXT", "check_answer", "niah_kind", "niah_options"]

MAX_BOXES = 300  # boxes in one answer; no MC-Bench pair has near as many targets
MAX_GROUPS = 9  # groups a person can choose (keys 1-9)
MAX_TEXT = 10_000  # characters of a free-text answer or a note
MAX_COUNTS = 200  # integers of a counting answer


def _box(value: Any, size: tuple[float, float], where: str) -> list[float]:
    """[x1, y1, x2, y2] in pixels inside an image of `size` (width, height), x1 < x2 and y1 < y2."""
    if not isinstance(value, list) or len(value) != 4 or not all(is_finite(v) for v in value):
        raise DataError(f"{where} is not a box of four finite numbers [x1, y1, x2, y2]; draw the box again")
    x1, y1, x2, y2 = (float(v) for v in value)
    w, h = size
    if not (0 <= x1 < x2 <= w and 0 <= y1 < y2 <= h):
        raise DataError(f"{where} {[x1, y1, x2, y2]} is not inside the {w:g}x{h:g} image or has no area; draw the box again")
    return [x1, y1, x2, y2]


def _pair_answer(title: str, sample: Any, answer: Any, confidence: bool) -> list[dict[str, Any]]:
    if not isinstance(answer, list):
        raise DataError(f"{article(title)} answer is a list of boxes ({{image, group, bbox}}); reload the page")
    if len(answer) > MAX_BOXES:
        raise DataError(f"the answer holds {len(answer)} boxes, more than {MAX_BOXES}; delete some")
    out = []
    for n, item in enumerate(answer, 1):
        where = f"box {n}"
        if not isinstance(item, dict):
            raise DataError(f"{where} is not an object with image, group and bbox; reload the page")
        image, group = item.get("image"), item.get("group")
        if type(image) is not int or image not in (0, 1):  # 0.0 == 0, but indexes nothing
            raise DataError(f"{where} names image {image!r}; it must be 0 (image 1) or 1 (image 2)")
        if isinstance(group, bool) or not isinstance(group, int) or not 1 <= group <= MAX_GROUPS:
            raise DataError(f"{where} has group {group!r}; groups are whole numbers 1 to {MAX_GROUPS}")
        box = _box(item.get("bbox"), sample.geometry.sizes[image], where)
        score = 1.0
        if confidence:
            score = item.get("score", 1.0)
            if not is_finite(score) or not 0 <= float(score) <= 1:
                raise DataError(f"{where} has confidence {score!r}; give a number from 0 to 1")
            score = float(score)
        out.append({"image": image, "group": group, "bbox": box, "score": score})
    return out


def _one_box_answer(sample: Any, answer: Any) -> list[list[float]]:
    if isinstance(answer, list) and len(answer) == 1 and isinstance(answer[0], list):
        answer = answer[0]
    return [_box(answer, (sample.width, sample.height), "the box")]


def niah_options(row: dict[str, Any]) -> tuple[list[str], list[str]]:
    """An MM-NIAH row's options: (text choices, image choices' paths); both empty for an open question."""
    meta = row.get("meta") or {}
    return [str(c) for c in meta.get("choices") or []], [str(p) for p in meta.get("choices_image_path") or []]


def niah_kind(task: str, options: int) -> str:
    """The answer widget of an MM-NIAH sample: "counts" (a list of integers), "option" (a letter) or "text"."""
    if task.startswith("counting"):
        return "counts"
    return "option" if options else "text"


def _document_answer(sample: Any, answer: Any) -> str:
    row = sample.row()  # DataError when rewritten since it was shown: an answer to the row shown only
    texts, images = niah_options(row)
    kind = niah_kind(sample.task, len(texts) or len(images))
    if kind == "counts":
        if not isinstance(answer, list) or not answer or len(answer) > MAX_COUNTS:
            raise DataError(f"a {sample.task} answer is a list of 1 to {MAX_COUNTS} counts, e.g. [2, 0, 1]")
        if not all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 1_000_000 for v in answer):
            raise DataError(f"a {sample.task} answer holds whole numbers from 0 to 1,000,000 only, e.g. [2, 0, 1]")
        return json.dumps(answer)
    if kind == "option":
        n = len(texts) or len(images)
        letters = [chr(ord("A") + i) for i in range(n)]
        if not isinstance(answer, str) or answer.strip().upper() not in letters:
            raise DataError(f"a {sample.task} answer is one of the options {', '.join(letters)}, not {str(answer)[:20]!r}")
        return answer.strip().upper()
    if not isinstance(answer, str) or not answer.strip() or len(answer) > MAX_TEXT:
        raise DataError(f"a {sample.task} answer is a word or phrase of 1 to {MAX_TEXT} characters")
    return answer.strip()


def check_answer(bench_name: str, sample: Any, answer: Any, confidence: bool = False) -> Any:
    """`answer` as the benchmark's scorer reads a model's parsed answer; DataError when it is malformed.
    The checks are those of the benchmark's kind of page (its declaration's `human`)."""
    bench = declared(bench_name)
    if bench.human == IMAGE_PAIR:
        return _pair_answer(bench.title, sample, answer, confidence)
    if bench.human == ONE_BOX:
        return _one_box_answer(sample, answer)
    assert bench.human == DOCUMENT  # declared() refuses any other
    return _document_answer(sample, answer)

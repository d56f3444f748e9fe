"""BLINK's Jigsaw and Multi-view_Reasoning questions, the needles of MM-NIAH's reasoning-image task.

Read from BLINK's Hugging Face parquet release (`Jigsaw/val-*.parquet`,
`Multi-view_Reasoning/val-*.parquet`: `question`, `choices`, `answer` like "(A)", `image_1`..`image_4`
as {bytes, path}). Only the val split carries answers. Multi-view: both views go into the
document, the options are BLINK's text choices. Jigsaw: the image with the missing corner goes into
the document, the candidate pieces are the image options.
"""

from __future__ import annotations

import hashlib
import io
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from needlepoint.core.errors import DataError

SUBTASKS = ("Jigsaw", "Multi-view_Reasoning")


@dataclass(frozen=True)
class BlinkQuestion:
    """One BLINK question: images for the document, text or image options, the answer index."""

    source: str
    subtask: str
    question: str
    context_images: list[bytes]
    choices: list[str] | None
    option_images: list[bytes] | None
    answer: int


def _image_bytes(value: Any) -> bytes | None:
    if isinstance(value, dict):
        value = value.get("bytes")
    return bytes(value) if value else None


def _decodes(data: bytes, where: str) -> bool:
    """Whether an image decodes whole (checked at reduced size)."""
    from needlepoint.core.images import check_decodes

    try:
        check_decodes(data, f"of {where}")
    except DataError:
        return False
    return True


def _answer_index(answer: Any, where: str) -> int:
    text = str(answer).strip().strip("()").strip()
    if len(text) != 1 or not "A" <= text.upper() <= "Z":
        raise DataError(f"{where} has answer {answer!r}; BLINK answers look like (A); is this BLINK's val split?")
    return ord(text.upper()) - ord("A")


def _choice_text(choice: str) -> str:
    text = str(choice).strip()
    if len(text) > 3 and text[0] == "(" and text[2] == ")":
        text = text[3:].strip()
    return text


class BlinkSource:
    """The usable BLINK questions under a folder, in file and row order."""

    def __init__(self, folder: Path) -> None:
        import pyarrow.parquet as pq

        if not folder.is_dir():
            raise DataError(
                f"--blink {folder} is not a folder; give BLINK's data folder holding Jigsaw/ and Multi-view_Reasoning/"
            )
        self.files = sorted(
            p
            for p in folder.rglob("*.parquet")
            if any(s.lower() in p.as_posix().lower() for s in SUBTASKS) and "test" not in p.name
        )
        self.questions: list[BlinkQuestion] = []
        self.skipped_unreadable = 0  # questions with an image that does not decode
        for path in self.files:
            subtask = next(s for s in SUBTASKS if s.lower() in path.as_posix().lower())
            try:
                rows = pq.read_table(path).to_pylist()
            except Exception as exc:  # pyarrow raises many types for damaged files
                raise DataError(f"{path} cannot be read as parquet ({exc}); re-download BLINK") from None
            for i, row in enumerate(rows):
                where = f"{path} row {i}"
                images = [b for b in (_image_bytes(row.get(f"image_{k}")) for k in range(1, 5)) if b]
                if row.get("answer") in (None, "", "hidden") or not images:
                    continue
                if not all(_decodes(b, where) for b in images):
                    self.skipped_unreadable += 1
                    continue
                answer = _answer_index(row["answer"], where)
                choices = [_choice_text(c) for c in row.get("choices") or []]
                if subtask == "Jigsaw":
                    if len(images) < 3:
                        continue
                    self.questions.append(
                        BlinkQuestion(
                            str(row.get("idx", where)), subtask, _jigsaw_question(), images[:1], None, images[1:], answer
                        )
                    )
                else:
                    self.questions.append(
                        BlinkQuestion(
                            str(row.get("idx", where)), subtask, str(row["question"]).strip(), images, choices, None, answer
                        )
                    )
        if not self.questions:
            raise DataError(
                f"--blink {folder} holds no answered Jigsaw or Multi-view_Reasoning questions (val split parquet files)"
            )

    def pick(self, rng: random.Random) -> BlinkQuestion:
        return self.questions[rng.randrange(len(self.questions))]


def _jigsaw_question() -> str:
    return (
        "One image of the document has a part missing in its lower right corner. "
        "Which of the following images is the missing part?"
    )


def image_name(data: bytes) -> tuple[str, tuple[int, int]]:
    """A BLINK image's shared file name (by content) and its size."""
    from PIL import Image

    with Image.open(io.BytesIO(data)) as im:
        size = im.size
        fmt = (im.format or "png").lower()
    suffix = {"jpeg": ".jpg"}.get(fmt, f".{fmt}")
    return f"blink/{hashlib.sha1(data).hexdigest()[:20]}{suffix}", size

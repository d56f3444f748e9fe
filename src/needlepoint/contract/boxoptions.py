"""How a benchmark reads the boxes in a model's replies, as one value: the model family, the box
format of its numbers, the answer's syntax, the frame pixel boxes refer to and the side images are
shrunk to.

These are stated by the user and never guessed (the flags --model-family, --box-format,
--answer-format, --abs-frame*, --max-image-side, declared by each benchmark that reads boxes:
`core.options`), and checked together once, when the benchmark is built (`BoxOptions.from_flags`):
a family gives each part's default and a flag overrides it; grounding tokens imply
norm_1000_xyxy, a pixel frame needs pixel boxes. The flags stay the benchmark constructors'
keywords (the registry builds a benchmark from them) and the run identity records exactly what it
recorded before they were one value (`identity`), so runs made before resume.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from needlepoint.contract.base import Parsed
from needlepoint.contract.boxes import parse_boxes
from needlepoint.contract.grounding import answer_syntax, check_answer_format, parse_grounded_boxes, wrong_syntax
from needlepoint.core.conversation import Conversation, Message, Part
from needlepoint.core.geometry import AbsFrame, BoxFormat, check_abs_frame, check_box_format, model_frame, require_box_format
from needlepoint.families import Family, Syntax, family

__all__ = ["BoxOptions"]


@dataclass(frozen=True)
class BoxOptions:
    """The box options of a run, checked (build them with `from_flags`).

    `box_format`: the convention of the model's numbers, None until stated (`require` refuses then:
    a run must state it); `answer_format`: "json" or a syntax's name; `frame`: what pixel boxes are
    pixels of; `max_image_side`: the side images were shrunk to before sending (None: as stored);
    `family`: the --model-family the defaults came from (None: none named)."""

    box_format: BoxFormat | None = None
    answer_format: str = "json"
    frame: AbsFrame = field(default_factory=AbsFrame)
    max_image_side: int | None = None
    family: Family | None = None

    @classmethod
    def from_flags(
        cls,
        box_format: str | None = None,
        answer_format: str | None = None,
        abs_frame: str | None = None,
        abs_frame_factor: int | None = None,
        abs_frame_min_pixels: int | None = None,
        abs_frame_max_pixels: int | None = None,
        max_image_side: int | None = None,
        model_family: str | None = None,
    ) -> BoxOptions:
        """The options from the flags' values (their `dest` keywords), a family's defaults under
        them; DataError in one sentence for an unknown value or a contradicting pair."""
        fam = family(model_family) if model_family else None
        if fam is not None:
            box_format = box_format or fam.box_format
            answer_format = answer_format or fam.syntax
            if abs_frame is None and fam.frame != "official" and box_format == "abs_xyxy":  # a pixel frame, for pixels
                abs_frame = fam.frame
                abs_frame_max_pixels = abs_frame_max_pixels or fam.frame_settings.get("abs_frame_max_pixels")
            max_image_side = max_image_side or fam.max_side
        answer, fmt = check_answer_format(answer_format, check_box_format(box_format))
        frame = check_abs_frame(abs_frame, fmt, abs_frame_factor, abs_frame_min_pixels, abs_frame_max_pixels)
        return cls(fmt, answer, frame, max_image_side, fam)

    @property
    def syntax(self) -> Syntax | None:
        """The token syntax replies are read in (None: JSON)."""
        return answer_syntax(self.answer_format)

    def generation_defaults(self, authors: Mapping[str, Any]) -> dict[str, Any]:
        """The benchmark authors' sampling settings under the family's: the decoding its own
        evaluation code fixes, and what its syntax needs of every request (e.g. special tokens kept)."""
        fam = self.family
        if fam is None:
            return dict(authors)
        extra = {**authors.get("extra", {}), **fam.request}
        return {**authors, **fam.sampling, **({"extra": extra} if extra else {})}

    def conversation(self, parts: Sequence[Part]) -> Conversation:
        """One user turn of `parts`, after the family's own system message when it has one
        (Ferret's states the 1000 x 1000 frame)."""
        user = Message("user", list(parts))
        system = self.family.system if self.family else None
        return Conversation([Message("system", [system]), user] if system else [user])

    def image_limit(self) -> tuple[int, str] | None:
        """The family's most images a request (the `LimitsImages` verb of benchmarks that read
        boxes), with whose limit it is; None without a family or a stated limit."""
        fam = self.family
        if fam is None or fam.max_images is None:
            return None
        return fam.max_images, f"--model-family {fam.name}"

    def read_boxes(self, text: str, width: float, height: float, benchmark: str) -> Parsed:
        """A single-image reply's boxes in the image's pixels (`width` x `height` as annotated),
        allowing for the size and frame it was sent at: read in the run's token syntax when it has
        one, else as JSON boxes in the stated box format (a box in a family's tokens is
        `wrong_syntax` in a family's run); or the parse error."""
        box_format = self.require(benchmark)
        seen = model_frame(width, height, self.max_image_side, self.frame)
        syntax = self.syntax
        if syntax is not None:
            return parse_grounded_boxes(text, syntax, box_format, width, height, seen)
        wrong = wrong_syntax(text, "json") if self.family is not None else None
        if wrong:
            return Parsed(error=wrong)
        return parse_boxes(text, box_format, width, height, seen)

    def require(self, benchmark: str) -> BoxFormat:
        """The stated box format; DataError naming `benchmark` when none was given."""
        return require_box_format(self.box_format, benchmark)

    def identity(self) -> dict[str, Any]:
        """What the run identity records of these options: the box format and the image side
        always, the frame's settings only for a frame other than the official one, the answer
        format only when not JSON, and the family only when one was named (absent at the defaults:
        older runs keep their hash)."""
        return {
            "box_format": self.box_format,
            "max_image_side": self.max_image_side,
            **self.frame.identity(),
            **({"answer_format": self.answer_format} if self.answer_format != "json" else {}),
            **({"model_family": self.family.name} if self.family else {}),
        }

"""How a benchmark reads the boxes in a model's replies, as one value: the box format of the model
family, the answer's syntax, the frame pixel boxes refer to and the side images are shrunk to.

These are stated by the user and never guessed (the flags --box-format, --answer-format,
--abs-frame*, --max-image-side, declared by each benchmark that reads boxes: `core.options`), and
checked together once, when the benchmark is built (`BoxOptions.from_flags`): grounding tokens
imply norm_1000_xyxy, a Qwen frame needs pixel boxes. The flags stay the benchmark constructors'
keywords (the registry builds a benchmark from them) and the run identity records exactly what it
recorded before they were one value (`identity`), so runs made before resume.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from needlepoint.contract.grounding import check_answer_format
from needlepoint.core.geometry import AbsFrame, BoxFormat, check_abs_frame, check_box_format, require_box_format

__all__ = ["GROUNDING_TOKENS", "BoxOptions"]

GROUNDING_TOKENS = "grounding-tokens"  # the --answer-format of Qwen2-VL's grounding syntax (contract/grounding.py)


@dataclass(frozen=True)
class BoxOptions:
    """The box options of a run, checked (build them with `from_flags`).

    `box_format`: the model family's box convention, None until stated (`require` refuses then: a
    run must state it); `answer_format`: "json" or "grounding-tokens"; `frame`: what pixel boxes
    are pixels of; `max_image_side`: the side images were shrunk to before sending (None: as stored)."""

    box_format: BoxFormat | None = None
    answer_format: str = "json"
    frame: AbsFrame = field(default_factory=AbsFrame)
    max_image_side: int | None = None

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
    ) -> BoxOptions:
        """The options from the flags' values (their `dest` keywords); DataError in one sentence for
        an unknown value or a contradicting pair."""
        answer, fmt = check_answer_format(answer_format, check_box_format(box_format))
        frame = check_abs_frame(abs_frame, fmt, abs_frame_factor, abs_frame_min_pixels, abs_frame_max_pixels)
        return cls(fmt, answer, frame, max_image_side)

    @property
    def grounding(self) -> bool:
        """Whether replies are read as Qwen2-VL's grounding tokens (not JSON)."""
        return self.answer_format == GROUNDING_TOKENS

    def require(self, benchmark: str) -> BoxFormat:
        """The stated box format; DataError naming `benchmark` when none was given."""
        return require_box_format(self.box_format, benchmark)

    def identity(self) -> dict[str, Any]:
        """What the run identity records of these options: the box format and the image side
        always, the frame's settings only for a frame other than the official one, and the answer
        format only for grounding tokens (absent at the defaults: older runs keep their hash)."""
        return {
            "box_format": self.box_format,
            "max_image_side": self.max_image_side,
            **self.frame.identity(),
            **({"answer_format": self.answer_format} if self.grounding else {}),
        }

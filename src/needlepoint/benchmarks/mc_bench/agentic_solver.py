"""MC-Bench's agentic baseline as a solver: a reasoning model names the target instances as
phrases, a localizer boxes each phrase in its own image (the paper's best system, Table 2).

    needlepoint eval mc_bench --data D --solver agentic --model REASONER --api-url URL \\
        --localizer vlm:MODEL --localizer-url URL2 --box-format FORMAT     # a served grounding VLM
    needlepoint eval mc_bench --data D --solver agentic --model REASONER --api-url URL \\
        --localizer detector:PATH_OR_HF_ID [--localizer-device cuda|cpu]    # Grounding DINO, OWLv2, OWL-ViT

The reasoner (role "model", the --model client) gets both images in pair order and the
description (`agentic.reasoner_prompt`), with one repair turn after a reply that is no valid
answer. Each named instance then goes to the localizer, all phrases of a sample at once: a served
VLM (role "localizer", an `OpenAICompatModel` of its own with retries and a bound on requests in
flight per endpoint) gets one request per phrase holding that phrase's image alone, and its first
box is kept; a detector (`BatchedDetector`) boxes the phrases of every sample in flight in shared
forward passes, and keeps each phrase's top box when its score reaches the threshold. Every call
is a turn of the record with `about` naming its target; the targets and their boxes are noted
under record["solver"]["targets"]. A failed localizer call fails the sample with its kind; every
answered call is in the sample's call cache (solvers/calls.py), so a resumed run or
`--retry-failed` sends only the calls that never got an answer. A reply naming more than
`--max-phrases` instances is a parse error (`too_many_phrases`, with the repair turn): it never
costs more localizer calls than that. The pure part (prompts, parsers, the answer) is `agentic.py`.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from needlepoint.benchmarks.mc_bench.agentic import (
    LOCALIZER_PROMPT,
    REASONER_PROMPT,
    REASONER_REPAIR_TEXT,
    Target,
    assemble_answer,
    localizer_request,
    parse_localizer_target,
    parse_targets,
    reasoner_prompt,
)
from needlepoint.benchmarks.mc_bench.benchmark import SEQUENCE_PROMPT, McBench, McSample
from needlepoint.contract.base import Parsed
from needlepoint.core import numeric, status
from needlepoint.core.conversation import Reply
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import BoxFormat
from needlepoint.core.options import Option
from needlepoint.solvers.base import SolveContext

if TYPE_CHECKING:
    from needlepoint.models.openai_compat import ClientSettings

__all__ = ["LOCALIZER_KEY_ENV", "AgenticSolver", "localizer_tail", "prompt_hash"]

LOCALIZER_KEY_ENV = "NEEDLEPOINT_LOCALIZER_API_KEY"
"""The served localizer's API key; $OPENAI_API_KEY when unset. Never a flag, so never on disk."""
LOCALIZER_ROLE = "localizer"
DETECTOR_TOOL = "detector"
PROMPT_VERSION = 1
DEFAULT_MAX_PHRASES = 64
TOO_MANY_PHRASES = "too_many_phrases"


def prompt_hash(*texts: str) -> str:
    """A short digest of prompt texts, for the run identity (a changed prompt is a new run)."""
    return hashlib.sha256("\n\x00".join(texts).encode("utf-8")).hexdigest()[:16]


def localizer_tail(ref: str) -> str:
    """The short name of a model id or folder for a leaderboard: `IDEA-Research/grounding-dino-base`
    and `/models/grounding-dino-base/` both give `grounding-dino-base`."""
    return ref.rstrip("/\\").replace("\\", "/").rsplit("/", 1)[-1] or ref


class AgenticSolver:
    """A reasoner that names target phrases, and a served VLM or a detector that boxes them."""

    name = "agentic"
    options: tuple[Option, ...] = (
        Option(
            "--localizer",
            "what boxes the reasoner's phrases: vlm:MODEL (a served grounding VLM, with --localizer-url "
            "and --box-format its box convention) or detector:PATH_OR_HF_ID (Grounding DINO, OWLv2, OWL-ViT; needs "
            "pip install -e '.[agentic]')",
            metavar="vlm:MODEL|detector:PATH",
        ),
        Option(
            "--localizer-url",
            "vlm: the localizer's base URL (repeat to spread over servers; may be the --api-url); "
            f"its API key comes from ${LOCALIZER_KEY_ENV} or $OPENAI_API_KEY",
            metavar="URL",
            repeat=True,
        ),
        Option(
            "--localizer-concurrency",
            "vlm: requests in flight per localizer endpoint (default twice --concurrency, at least 32: a sample asks about two phrases on average)",
            type=int,
            metavar="N",
        ),
        Option(
            "--localizer-device",
            "detector: where the detector runs (default: the GPU when there is one)",
            choices=("cuda", "cpu"),
            metavar="cuda|cpu",
        ),
        Option(
            "--detector-threshold",
            "detector: the least score of a kept box (default 0.05, the paper's)",
            type=float,
            metavar="SCORE",
        ),
        Option(
            "--max-phrases",
            f"most instances the reasoner may name for one sample (default {DEFAULT_MAX_PHRASES}); a reply "
            "naming more is a parse error (too_many_phrases) with a repair turn, and costs no localizer call",
            type=int,
            metavar="N",
        ),
    )

    def __init__(
        self,
        benchmark: McBench,
        localizer: str | None = None,
        localizer_url: str | Sequence[str] | None = None,
        localizer_concurrency: int | None = None,
        localizer_device: str | None = None,
        detector_threshold: float | None = None,
        detector_batch: int | None = None,
        max_phrases: int | None = None,
        client: ClientSettings | None = None,
    ) -> None:
        if not isinstance(benchmark, McBench):
            raise DataError(f"--solver agentic answers mc_bench, not {getattr(benchmark, 'name', benchmark)}")
        self.benchmark = benchmark
        kind, _, ref = (localizer or "").partition(":")
        if localizer is None:
            raise DataError(
                "--solver agentic needs --localizer: vlm:MODEL (a served grounding VLM, with --localizer-url) or "
                "detector:PATH_OR_HF_ID (a Grounding DINO, OWLv2 or OWL-ViT model)"
            )
        if kind not in ("vlm", "detector") or not ref.strip():
            raise DataError(
                f"--localizer {localizer!r} is not vlm:MODEL or detector:PATH_OR_HF_ID; "
                "write e.g. vlm:Qwen/Qwen2.5-VL-7B-Instruct or detector:IDEA-Research/grounding-dino-base"
            )
        if benchmark.input_mode != "sequence" or benchmark.template != SEQUENCE_PROMPT:
            raise DataError(
                "--input-mode merged and --prompt-file do not apply to --solver agentic (the reasoner gets both images "
                "and its own prompt); drop them"
            )
        self.kind, self.ref = kind, ref.strip()
        numeric.flag("--detector-threshold", detector_threshold, 0.0, maximum=1.0)
        numeric.whole("--localizer-concurrency", localizer_concurrency, 1)
        numeric.whole("detector_batch", detector_batch, 1)
        numeric.whole("--max-phrases", max_phrases, 1)
        self.max_phrases = DEFAULT_MAX_PHRASES if max_phrases is None else max_phrases
        self.localizer_model: Any = None
        self.detector: Any = None
        urls = [localizer_url] if isinstance(localizer_url, str) else list(localizer_url or [])
        if kind == "vlm":
            for flag, value in (
                ("--localizer-device", localizer_device),
                ("--detector-threshold", detector_threshold),
                ("detector_batch", detector_batch),
            ):
                if value is not None:
                    raise DataError(f"{flag} applies to --localizer detector:...; drop it for a vlm: localizer")
            if not urls:
                raise DataError(
                    f"--localizer {localizer} needs --localizer-url: the base URL of the server that serves {self.ref} "
                    "(it may be the --api-url)"
                )
            if benchmark.boxes.box_format is None:
                raise DataError(
                    f"--box-format is required with --localizer {localizer}: the box convention of the localizer's model "
                    "family (abs_xyxy, norm_1000_xyxy or norm_1_xyxy; e.g. Qwen2.5-VL abs_xyxy, Qwen3-VL norm_1000_xyxy)"
                )
            from needlepoint.core.images import ImageCache
            from needlepoint.models.openai_compat import ClientSettings, OpenAICompatModel

            key = os.environ.get(LOCALIZER_KEY_ENV) or os.environ.get("OPENAI_API_KEY") or None
            client = client or ClientSettings()  # the run's retries, waits, re-encoding and byte budget
            self.localizer_model = OpenAICompatModel(
                self.ref,
                urls,
                key,
                retry=client.retry,
                reencode_images=client.reencode_images,
                max_request_bytes=client.max_request_bytes,
                max_in_flight=localizer_concurrency or max(32, 2 * client.concurrency),
                local_images=client.local_images,
            )
            # a sample's phrases go out together, one request each with its image: read and encode
            # an image once for all of them (from its first request on), not once a phrase
            self.localizer_model.images = ImageCache(from_first=True)
            self.threshold: float | None = None
        else:
            for flag, vlm_setting in (("--localizer-url", urls or None), ("--localizer-concurrency", localizer_concurrency)):
                if vlm_setting is not None:
                    raise DataError(f"{flag} applies to --localizer vlm:...; drop it for a detector: localizer")
            if benchmark.boxes.box_format not in (None, "abs_xyxy"):
                raise DataError(
                    f"--box-format {benchmark.boxes.box_format} does not apply to --localizer {localizer} (a detector's boxes "
                    "are pixels of the image); drop it"
                )
            # A detector's boxes are pixels of the image as stored: the answer's format is abs_xyxy.
            benchmark.boxes = replace(benchmark.boxes, box_format="abs_xyxy")
            from needlepoint.models.detector import DEFAULT_THRESHOLD, Detector
            from needlepoint.models.detector_batch import BatchedDetector

            threshold = DEFAULT_THRESHOLD if detector_threshold is None else detector_threshold
            self.threshold = threshold
            batch = detector_batch or 16
            self.detector = BatchedDetector(
                lambda: Detector.load(self.ref, localizer_device, threshold, batch), self.ref, max_rows=2 * batch
            )

    # --- what the run records of the solver -----------------------------------------------------

    def identity(self) -> dict[str, Any]:
        ident: dict[str, Any] = {
            "prompt_version": PROMPT_VERSION,
            "reasoner_prompt": prompt_hash(REASONER_PROMPT, REASONER_REPAIR_TEXT),
            "localizer": f"{self.kind}:{self.ref}",
        }
        if self.kind == "vlm":
            ident["localizer_prompt"] = prompt_hash(LOCALIZER_PROMPT)
            ident["box_format"] = self.benchmark.boxes.box_format
        else:
            ident["threshold"] = self.threshold
        if self.max_phrases != DEFAULT_MAX_PHRASES:  # absent at the default: runs from before keep their hash
            ident["max_phrases"] = self.max_phrases
        return ident

    def label(self, model: str) -> str:
        return f"{model} + {localizer_tail(self.ref)} (agentic)"

    def answer_schema(self) -> dict[str, Any]:
        """The JSON schema of the reasoner's answer (`--structured-output`): phrases per image, at
        most --max-phrases each (a reply naming more in all is refused anyway)."""
        from needlepoint.contract.boxschema import image_lists, phrase_item

        return image_lists(phrase_item(), self.max_phrases)

    def models(self) -> Mapping[str, Any]:
        if self.localizer_model is not None:
            return {LOCALIZER_ROLE: self.localizer_model}
        return {DETECTOR_TOOL: self.detector}

    # --- one sample -----------------------------------------------------------------------------

    async def solve(self, sample: McSample, ctx: SolveContext) -> Parsed:
        conversation = reasoner_prompt(sample)
        ctx.request(conversation)
        reply = await ctx.complete(conversation)
        parsed = self._read_targets(reply)
        if not reply.error and parsed.error and parsed.error != status.NO_CONTENT:
            ctx.repaired()
            second = await ctx.complete(conversation.with_turn(reply.text, REASONER_REPAIR_TEXT))
            parsed = self._read_targets(second)
        if parsed.error:
            return parsed
        targets: list[Target] = parsed.answer
        if not targets:
            ctx.note(targets=[])
            return Parsed(answer=[])
        if self.kind == "vlm":
            return await self._with_vlm(sample, targets, ctx)
        return await self._with_detector(sample, targets, ctx)

    def _read_targets(self, reply: Reply) -> Parsed:
        """The reasoner's reply as targets, or the error that stands in (as the default solver reads
        replies); more targets than --max-phrases is the parse error `too_many_phrases`."""
        if reply.error:
            return Parsed(error=reply.error_kind or status.BACKEND_ERROR)
        if not reply.text.strip() and reply.reasoning:
            return Parsed(error=status.NO_CONTENT)
        parsed = parse_targets(reply.text)
        if not parsed.error and len(parsed.answer) > self.max_phrases:
            return Parsed(error=TOO_MANY_PHRASES)
        return parsed

    async def _with_vlm(self, sample: McSample, targets: list[Target], ctx: SolveContext) -> Parsed:
        box_format: BoxFormat = self.benchmark.boxes.require(self.benchmark.name)

        async def one(k: int, target: Target) -> tuple[Reply, Parsed | None]:
            conversation = localizer_request(sample, target, box_format)
            reply = await ctx.complete(conversation, role=LOCALIZER_ROLE, about=_about(k, target))
            if reply.error:
                return reply, None
            return reply, parse_localizer_target(sample, target, reply.text, box_format)

        # every phrase of the sample in flight together; the client bounds requests per endpoint
        done = await asyncio.gather(*(one(k, t) for k, t in enumerate(targets)))
        notes = [_about(k, t) for k, t in enumerate(targets)]
        failed = next((r.error_kind or status.BACKEND_ERROR for r, _ in done if r.error), None)
        boxes: list[list[float] | None] = []
        for note, (reply, got) in zip(notes, done):
            if got is None:
                note["error"] = reply.error_kind
                boxes.append(None)
            elif got.error:
                note["error"] = got.error
                boxes.append(None)
            else:
                note["box"] = [round(v, 2) for v in got.answer]
                boxes.append(got.answer)
        ctx.note(targets=notes)
        if failed is not None:  # the sample takes the failure's kind; the answered calls are in its call cache
            return Parsed(error=failed)
        return assemble_answer(targets, boxes)

    async def _with_detector(self, sample: McSample, targets: list[Target], ctx: SolveContext) -> Parsed:
        detector = self.detector

        async def one(k: int, target: Target) -> Any:
            return await ctx.tool(
                DETECTOR_TOOL,
                lambda: detector.locate(sample.images[target["image"]], target["phrase"]),
                summary=lambda found: {
                    **found.detection.to_json(),
                    "image_size": list(found.size),
                    "pass_phrases": found.rows,
                    "pass_s": found.forward_s,
                },
                about=_about(k, target),
            )

        found = await asyncio.gather(*(one(k, t) for k, t in enumerate(targets)))
        notes = [_about(k, t) for k, t in enumerate(targets)]
        boxes: list[list[float] | None] = []
        scores: list[float] = []
        for target, note, located in zip(targets, notes, found):
            d = located.detection
            # pixels of the decoded image, in pixels of the image as annotated (the same, for a true release)
            width, height = sample.geometry.sizes[target["image"]]
            sx, sy = width / located.size[0], height / located.size[1]
            x1, y1, x2, y2 = d.box
            box = [x1 * sx, y1 * sy, x2 * sx, y2 * sy]
            note.update(score=round(d.score, 6), kept=d.kept)
            if d.kept:
                note["box"] = [round(v, 2) for v in box]
            boxes.append(box if d.kept else None)
            scores.append(d.score)
        ctx.note(targets=notes)
        return assemble_answer(targets, boxes, scores)


def _about(k: int, target: Target) -> dict[str, Any]:
    """A target as its calls and the record's notes name it (numbers from 1, as the prompt's images)."""
    return {"target": k + 1, "image": target["image"] + 1, "group": target["group"], "phrase": target["phrase"]}

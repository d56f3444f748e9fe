"""The model families needlepoint can run as their authors run them (docs/model-families.md).

A `Family` bundles what a family needs and where each rule comes from: its grounding prompt in its
own words, the syntax of its answer, the box format and frame its numbers are in, whether it takes
several images in one request or the two of a pair side by side, the images and sides its API or
processor accepts, its evaluation code's decoding settings, and what a request must ask of the server
for the syntax to survive. Each part is a default the existing flags override. Where the family's own
code or card does not pin a rule down, the entry says so (`unverified`) rather than guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from needlepoint.core.errors import DataError
from needlepoint.core.geometry import BoxFormat

__all__ = ["AUTHORS_FAMILY", "FAMILIES", "Family", "family", "family_names"]

JSON = "json"
"""The syntax of families that answer JSON boxes (the benchmarks' own JSON readers)."""


@dataclass(frozen=True)
class Family:
    """One model family's grounding conventions.

    `title`: the family as a leaderboard names it ("InternVL"); `models`: the releases it covers;
    `syntax`: "json" or a name in `syntaxes.SYNTAXES`; `box_format`: the convention of its numbers
    (None: the user states it with --box-format, as for GPT-4o, which has none of its own); `frame`:
    what pixel boxes are pixels of (`--abs-frame`), with `frame_settings` (e.g. Qwen2.5-VL's
    max_pixels); `prompt`: its own grounding prompt, `{ref}` standing for the expression (None: it
    has none, the benchmark's own prompt is used); `input_mode`: how a benchmark with an image pair
    sends it (`merged` for single-image models, and for those with their own prompt, as MC-Bench's
    authors ran them); `text_first`: the prompt goes before the image (its examples' order; the
    image first otherwise); `groups`: whether it can number MC-Bench's groups; `sampling`: decoding
    settings its own evaluation code fixes (under the user's flags); `request`: keys its syntax needs
    in every request (e.g. keeping special tokens); `detector`: the transformers model type of a
    zero-shot detector run in this process instead of a served model; `served`: what serves it
    ("vLLM", "API", "own server", "in-process"); `system`: the system message its own evaluation
    sends; `sources`: rule -> where it comes from; `unverified`: what its own code or card leaves
    open."""

    name: str
    title: str
    models: str
    syntax: str
    box_format: BoxFormat | None
    prompt: str | None = None
    frame: str = "official"
    frame_settings: Mapping[str, int] = field(default_factory=dict)
    input_mode: str = "sequence"
    text_first: bool = False
    max_images: int | None = None
    max_side: int | None = None
    groups: bool = True
    sampling: Mapping[str, Any] = field(default_factory=dict)
    request: Mapping[str, Any] = field(default_factory=dict)
    detector: str | None = None
    served: str = "vLLM"
    system: str | None = None
    sources: Mapping[str, str] = field(default_factory=dict)
    unverified: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """How a leaderboard names the family's protocol: "InternVL syntax"."""
        return f"{self.title} syntax"


_QWEN_VL = "QwenLM/Qwen-VL eval_mm/evaluate_grounding.py and README (coordinates in [0, 1000))"
_INTERNVL = "OpenGVLab/InternVL internvl_chat/eval/refcoco/evaluate_grounding.py"

FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        Family(
            name="gpt-4o",
            title="GPT-4o",
            models="GPT-4o, GPT-4o-mini, GPT-4.1",
            syntax=JSON,
            box_format=None,
            max_images=500,
            served="API",
            sources={
                "syntax": "none of its own: OpenAI documents no grounding syntax or coordinate frame; the benchmark's JSON, "
                "in the --box-format the user states",
                "limits": "OpenAI Images and vision guide: up to 500 image inputs per request",
            },
            unverified=("the frame of pixel coordinates (the API resizes images internally): state a normalised --box-format",),
        ),
        Family(
            name="gemini",
            title="Gemini",
            models="Gemini 1.5, 2.x, 2.5",
            syntax=JSON,
            box_format="norm_1000_yxyx",
            prompt="Detect {ref}. The box_2d should be [ymin, xmin, ymax, xmax] normalized to 0-1000.",
            text_first=True,
            max_images=3600,
            served="API",
            sources={
                "syntax": 'Gemini API docs, Image understanding, Object detection: JSON items {"box_2d": [ymin, xmin, ymax, xmax], '
                '"label"}, "normalized to 0-1000"; the cookbook Spatial_understanding.ipynb divides by 1000, y first',
                "prompt": "the docs' detection sentence with the expression in place of 'the all of the prominent items' "
                "(the docs give no referring template)",
                "limits": "Gemini API docs: at most 3,600 image files per request",
            },
            unverified=("a referring-expression prompt of Google's own", "how Gemini marks which of several images a box is in"),
        ),
        Family(
            name="claude",
            title="Claude",
            models="Claude 3.x, 4.x",
            syntax=JSON,
            box_format="abs_xyxy",
            frame="claude",
            max_images=100,
            max_side=8000,
            served="API",
            sources={
                "frame": "Anthropic docs, Coordinates and bounding boxes: absolute pixels of the image as Claude resized it "
                "(the largest aspect-preserving size with no side over 1568 px and at most 1568 patches of 28 px)",
                "limits": "Anthropic docs, Vision: 100 images per request (200k-context models), 8000 px a side",
            },
            unverified=("a grounding prompt of Anthropic's own (the benchmark's prompt is used)",),
        ),
        Family(
            name="qwen-vl",
            title="Qwen-VL",
            models="Qwen-VL, Qwen-VL-Chat",
            syntax="qwen-vl",
            box_format="norm_999_xyxy",
            prompt="<ref>{ref}</ref><box>",
            input_mode="merged",
            sampling={"temperature": 0.0, "max_tokens": 28},
            sources={
                "syntax": "QwenLM/Qwen-VL README and tokenization_qwen.py: <ref>phrase</ref><box>(x1,y1),(x2,y2)</box>",
                "scale": f"{_QWEN_VL}: the numbers divided by 999 and times the width or height",
                "prompt": f"{_QWEN_VL}: '<img>...</img><ref>{{}}</ref><box>' (the image goes as an image part)",
                "sampling": f"{_QWEN_VL}: greedy, max_new_tokens 28",
            },
            unverified=("an English referring prompt for the chat model (the evaluator's completion prompt is used)",),
        ),
        Family(
            name="qwen2-vl",
            title="Qwen2-VL",
            models="Qwen2-VL",
            syntax="grounding-tokens",
            box_format="norm_1000_xyxy",
            sources={
                "syntax": "Qwen2-VL's tokenizer_config (<|object_ref_start|>, <|box_start|>, ... special tokens) and "
                "QwenLM/Qwen3-VL qwen-vl-finetune/tools/process_bbox.ipynb (0-1000 of the original image, rounded)",
            },
            unverified=("an official RefCOCO prompt (none is published; the benchmark's prompt asks for the syntax)",),
        ),
        Family(
            name="qwen2.5-vl",
            title="Qwen2.5-VL",
            models="Qwen2.5-VL",
            syntax=JSON,
            box_format="abs_xyxy",
            prompt="Locate {ref}, output its bbox coordinates using JSON format.",
            frame="qwen-smart-resize",
            frame_settings={"abs_frame_max_pixels": 12_845_056},
            text_first=True,
            sources={
                "prompt": "QwenLM/Qwen2.5-VL cookbooks/spatial_understanding.ipynb ('Locate the top right brown cake, output "
                "its bbox coordinates using JSON format.')",
                "frame": "process_bbox.ipynb: absolute pixels of the image as the processor resized it (smart_resize, factor "
                "28); max_pixels 12,845,056 from the checkpoints' preprocessor_config.json, which vLLM loads",
            },
        ),
        Family(
            name="qwen3-vl",
            title="Qwen3-VL",
            models="Qwen3-VL",
            syntax=JSON,
            box_format="norm_1000_xyxy",
            prompt='Locate every object that matches the description "{ref}" in the image. Report bbox coordinates in JSON format.',
            text_first=True,
            sources={
                "prompt": "QwenLM/Qwen3-VL issue 1721 (the maintainers' RefCOCO prompt)",
                "scale": "QwenLM/Qwen3-VL cookbooks/2d_grounding.ipynb: relative coordinates 0-1000, divided by 1000",
            },
            unverified=("which box of a several-box answer the maintainers score (the first is taken)",),
        ),
        Family(
            name="internvl",
            title="InternVL",
            models="InternVL2, InternVL2.5, InternVL3",
            syntax="internvl",
            box_format="norm_1000_xyxy",
            prompt="Please provide the bounding box coordinate of the region this sentence describes: <ref>{ref}</ref>",
            input_mode="merged",
            sampling={"temperature": 0.0, "max_tokens": 100},
            sources={
                "prompt": _INTERNVL,
                "syntax": f"{_INTERNVL}: the first [[x1, y1, x2, y2]] of the answer, on 0-1000",
                "sampling": f"{_INTERNVL}: greedy, max_new_tokens 100, one beam (the default since 2024-11-25, and "
                "forced by --dynamic, which the eval README requires from InternVL 1.5 on)",
            },
            unverified=("InternVL3's own grounding prompt (the shared evaluator's is used)",),
        ),
        Family(
            name="deepseek-vl2",
            title="DeepSeek-VL2",
            models="DeepSeek-VL2",
            syntax="deepseek-vl2",
            box_format="norm_999_xyxy",
            prompt="<|ref|>{ref}<|/ref|>.",
            input_mode="merged",
            sampling={"temperature": 0.0, "max_tokens": 512},
            sources={
                "prompt": "deepseek-ai/DeepSeek-VL2 README grounding example ('<image>\\n<|ref|>The giraffe at the back.<|/ref|>.')",
                "syntax": "deepseek_vl2/serve/app_modules/utils.py parse_ref_bbox: <|det|>[[x1, y1, x2, y2], ...]<|/det|>, "
                "divided by 999 (a co-author confirms 0-999 in DeepSeek-VL2 issue 100)",
                "sampling": "README grounding example: greedy, max_new_tokens 512",
            },
            unverified=("an official RefCOCO prompt or evaluator (none is published)",),
        ),
        Family(
            name="paligemma",
            title="PaliGemma",
            models="PaliGemma, PaliGemma 2",
            syntax="paligemma",
            box_format="norm_1023_yxyx",
            prompt="detect {ref}",
            input_mode="merged",
            max_images=1,
            groups=False,
            sampling={"temperature": 0.0, "max_tokens": 48},
            sources={
                "prompt": "Google's PaliGemma prompt docs: 'detect {object} ; {object}'",
                "syntax": "google-research/big_vision evaluators/proj/paligemma/transfers/segmentation.py: four <locNNNN>, "
                "ymin xmin ymax xmax, divided by 1023 (training encodes round(v * 1023)); Google's user docs divide by 1024",
                "sampling": "big_vision configs/proj/paligemma/transfers/refcoco_seg.py: greedy, max_decode_len 48",
            },
        ),
        Family(
            name="florence-2",
            title="Florence-2",
            models="Florence-2",
            syntax="florence-2",
            box_format="bins_1000_xyxy",
            prompt="Locate the phrases in the caption: {ref}",
            input_mode="merged",
            max_images=1,
            groups=False,
            sampling={"temperature": 0.0, "max_tokens": 1024},
            request={"skip_special_tokens": False},
            served="own server",
            sources={
                "prompt": "processing_florence2.py: <CAPTION_TO_PHRASE_GROUNDING> expands to 'Locate the phrases in the "
                "caption: {input}'",
                "syntax": "processing_florence2.py: <loc_N> x4 after the phrase, 1,000 bins a side, a bin read at its centre "
                "((b + 0.5) * size / 1000); the tokens are special tokens, so requests keep them",
            },
            unverified=("which task prompt produced the card's RefCOCO numbers", "the card's beams (3)"),
        ),
        Family(
            name="kosmos-2",
            title="Kosmos-2",
            models="Kosmos-2",
            syntax="kosmos-2",
            box_format="norm_1_xyxy",
            prompt="<grounding><phrase> {ref}</phrase>",
            input_mode="merged",
            max_images=1,
            sampling={"temperature": 0.0},
            request={"skip_special_tokens": False},
            served="own server",
            sources={
                "prompt": "microsoft/unilm kosmos-2/evaluation/refcoco/cook_data.py: <grounding><phrase>{caption}</phrase>",
                "syntax": "transformers processing_kosmos2.py: <object><patch_index_UL><patch_index_LR></object> on a 32 x 32 "
                "grid (patch_index_to_coordinate)",
            },
        ),
        Family(
            name="cogvlm-grounding",
            title="CogVLM-Grounding",
            models="CogVLM-Grounding",
            syntax="cogvlm-grounding",
            box_format="norm_1000_xyxy",
            prompt="Where is {ref}? answer in [[x0,y0,x1,y1]] format.",
            input_mode="merged",
            max_images=1,
            sampling={"temperature": 0.0},
            served="own server",
            sources={
                "prompt": "THUDM/CogVLM utils/utils/template.py caption2box templates",
                "syntax": "THUDM/CogVLM README, Format of coordination: [[x1,y1,x2,y2]], relative x 1000, three digits; "
                "several boxes joined by ';' (utils/utils/grounding_parser.py)",
            },
            unverified=("which caption2box template produced the README's RefCOCO numbers",),
        ),
        Family(
            name="minigpt-v2",
            title="MiniGPT-v2",
            models="MiniGPT-v2",
            syntax="minigpt-v2",
            box_format="norm_100_xyxy",
            prompt="[refer] give me the location of {ref}",
            input_mode="merged",
            max_images=1,
            sampling={"temperature": 0.0, "max_tokens": 20},
            served="own server",
            sources={
                "prompt": "Vision-CAIR/MiniGPT-4 eval_scripts/eval_ref.py",
                "syntax": "eval_ref.py: {<x1><y1><x2><y2>} on 0-100, divided by 100 (res) and times the width or height",
                "sampling": "eval_configs/minigptv2_benchmark_evaluation.yaml: max_new_tokens 20, greedy",
            },
        ),
        Family(
            name="shikra",
            title="Shikra",
            models="Shikra",
            syntax="shikra",
            box_format="norm_1_square_xyxy",
            prompt="Can you point out {ref} in the image and provide the coordinates of its location?",
            input_mode="merged",
            max_images=1,
            sampling={"temperature": 0.0, "max_tokens": 1024},
            served="own server",
            sources={
                "prompt": "shikras/shikra mllm/demo/webdemo.py REC preset (the image placeholder sent as the image)",
                "syntax": "mllm/dataset/process_function/box_process_function.py PlainBoxFormatter: [x1,y1,x2,y2] with three "
                "decimals, ';' between boxes",
                "frame": "mllm/dataset/utils/transform.py expand2square: fractions of the image padded to a white square, "
                "the image in its middle",
                "sampling": "config/shikra_eval_multi_rec.py: max_new_tokens 1024, one beam",
            },
            unverified=("one REC prompt: the official evaluation draws one of 54 templates at random",),
        ),
        Family(
            name="ferret",
            title="Ferret",
            models="Ferret",
            syntax="ferret",
            box_format="norm_1000_xyxy",
            prompt="What is the location of {ref} in the image?",
            system="A chat between a human and an AI that understands visuals. In images, [x, y] denotes points: top-left "
            "[0, 0], bottom-right [width-1, height-1]. Increasing x moves right; y moves down. Bounding box: [x1, y1, x2, "
            "y2]. Image size: 1000x1000. Follow instructions. ",
            input_mode="merged",
            max_images=1,
            sampling={"temperature": 0.0, "max_tokens": 1024},
            served="own server",
            sources={
                "prompt": "apple/ml-ferret ferret/eval/model_refcoco.py ('What is the location of <obj> in the image?') and "
                "ferret/conversation.py ferret_v1 system message",
                "syntax": "ferret/eval/eval_refexp.py decode_bbox_from_caption and resize_bbox: [x1, y1, x2, y2] of a "
                "1000 x 1000 frame (VOCAB_IMAGE_W), times width / 1000",
            },
            unverified=("resize_bbox truncates to whole pixels; needlepoint keeps the fractions",),
        ),
        Family(
            name="grounding-dino",
            title="Grounding DINO",
            models="Grounding DINO (zero-shot detector)",
            syntax=JSON,
            box_format="abs_xyxy",
            prompt="{ref}",
            groups=False,
            detector="grounding-dino",
            served="in-process",
            sources={
                "prompt": "transformers GroundingDinoProcessor: the caption lower-cased and ended with '.'",
                "boxes": "post_process_grounded_object_detection: scored pixel boxes above the threshold (0.25 by default)",
            },
            unverified=("the score threshold MC-Bench's authors used for their G-DINO-B row",),
        ),
        Family(
            name="owlv2",
            title="OWLv2",
            models="OWLv2 (zero-shot detector)",
            syntax=JSON,
            box_format="abs_xyxy",
            prompt="{ref}",
            groups=False,
            detector="owlv2",
            served="in-process",
            sources={
                "prompt": "transformers Owlv2Processor: one text query",
                "boxes": "post_process_grounded_object_detection: scored boxes above the threshold (0.1 by default), mapped "
                "from the padded square to the image",
            },
        ),
    )
}

AUTHORS_FAMILY = "gpt-4o"
"""The family whose syntax is the benchmarks' own JSON (no --model-family: the authors' protocol)."""


def family_names() -> tuple[str, ...]:
    """The names `--model-family` takes."""
    return tuple(FAMILIES)


def family(name: str) -> Family:
    """The family called `name`; DataError naming the known ones otherwise."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise DataError(
            f"--model-family {name!r} is unknown; use one of {', '.join(FAMILIES)} (needlepoint families lists them)"
        ) from None

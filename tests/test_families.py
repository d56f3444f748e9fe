"""Model families (`--model-family`): each family's documented replies read into the boxes the
family's own post-processing gives; boxes written in each family's syntax read back exactly to
the family's quantization on every box of the real MC-Bench and Ref-Adv-s annotation files; a
reply in another family's syntax is a parse error, never numbers; the `families` command; the
leaderboard labels; the dry run's image limit; the run identity.

The replies below are copied character for character from each family's own documentation, code
or tests (the source is named beside each); those marked "constructed" are built from the grammar
the family's own code documents, where no verbatim reply is published. Where the family's own code
truncates pixels with int(), needlepoint keeps the floats and the expectation says so.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers import MC_BENCH_RELEASE, REF_ADV_PREDICTIONS, one_sentence, run_quiet

from needlepoint.benchmarks.mc_bench.benchmark import McBench, McSample
from needlepoint.benchmarks.mc_bench.parse import PairGeometry, parse_grounding_answer
from needlepoint.benchmarks.ref_adv import RefAdv
from needlepoint.benchmarks.ref_adv.data import RefAdvSample
from needlepoint.cli import main
from needlepoint.contract.boards import Run, answer_label
from needlepoint.contract.boxoptions import BoxOptions
from needlepoint.contract.grounding import parse_grounded_boxes, wrong_syntax
from needlepoint.core import status
from needlepoint.core.conversation import ImageRef
from needlepoint.core.errors import DataError
from needlepoint.core.geometry import BoxFormat, claude_size, from_absolute, smart_resize
from needlepoint.families import FAMILIES, SYNTAXES, Family, family
from needlepoint.families.syntaxes import KOSMOS_GRID, box_to_patches, foreign_syntax

# The families that answer in text (the detectors return boxes in-process, not replies).
TEXT_FAMILIES = [f for f in FAMILIES.values() if f.detector is None]
TOKEN_FAMILIES = [f for f in TEXT_FAMILIES if f.syntax != "json"]
PARSE_ERRORS = {status.WRONG_SYNTAX, status.NO_GROUNDING_FOUND, status.BAD_GROUNDING, status.NO_BBOX_FOUND}


def sample_of(width: float, height: float) -> RefAdvSample:
    """A Ref-Adv-s case of a stated image size (the parser reads only the size)."""
    return RefAdvSample("s0", 0, "the target", (0.0, 0.0, 1.0, 1.0), width, height, 2, ImageRef(key="stated"))


def ref_parse(name: str, text: str, width: float, height: float, **flags: Any) -> Any:
    """A reply read by Ref-Adv-s's parse path as a run with `--model-family name` reads it."""
    return RefAdv(model_family=name, **flags).parse(sample_of(width, height), text)


def tokens_parse(name: str, text: str, width: float, height: float) -> Any:
    """A reply read in family `name`'s syntax and box format by `parse_grounded_boxes`."""
    fam = family(name)
    assert fam.box_format is not None
    return parse_grounded_boxes(text, SYNTAXES[fam.syntax], fam.box_format, width, height)


def scaled(box: Sequence[float], scale: float, width: float, height: float) -> list[float]:
    """x1, y1, x2, y2 on a 0-`scale` grid, in pixels: the formula the families' own code applies."""
    x1, y1, x2, y2 = box
    return [x1 / scale * width, y1 / scale * height, x2 / scale * width, y2 / scale * height]


# ---------------------------------------------------------------------------------------------
# (1) Each family's documented replies read into the family's own boxes.

# (family, reply, (width, height), expected pixel boxes in reply order)
DOCUMENTED: list[tuple[str, str, tuple[float, float], list[list[float]]]] = [
    # QwenLM/Qwen-VL README.md (chat example, ~line 706). The official evaluator
    # (eval_mm/evaluate_grounding.py) divides by 999 and keeps floats: (536.5365, 407.6076, 588.5886, 482.0821)
    # (the tokenizer's drawing helper divides by 1000 and truncates: (536, 407, 588, 481)).
    ("qwen-vl", "<ref>击掌</ref><box>(536,509),(588,602)</box>", (1000, 800), [scaled((536, 509, 588, 602), 999, 1000, 800)]),
    # the same after the tokenizer's _decode with skip_special_tokens (all the tags are special tokens)
    ("qwen-vl", "击掌(536,509),(588,602)", (1000, 800), [scaled((536, 509, 588, 602), 999, 1000, 800)]),
    # QwenLM/Qwen-VL TUTORIAL.md (~line 248): several boxes after one <ref>, and a second phrase
    (
        "qwen-vl",
        "<ref> Two apples</ref><box>(302,257),(582,671)</box><box>(603,252),(878,642)</box> and<ref> a bowl</ref>"
        "<box>(2,269),(304,674)</box>",
        (640, 480),
        [scaled(b, 999, 640, 480) for b in ((302, 257, 582, 671), (603, 252, 878, 642), (2, 269, 304, 674))],
    ),
    # the same with the tags stripped (research notes, group 1: the form the evaluator parses)
    (
        "qwen-vl",
        " Two apples(302,257),(582,671)(603,252),(878,642) and a bowl(2,269),(304,674)",
        (640, 480),
        [scaled(b, 999, 640, 480) for b in ((302, 257, 582, 671), (603, 252, 878, 642), (2, 269, 304, 674))],
    ),
    # QwenLM/Qwen2-VL issue #9 (now Qwen3-VL#9), a real Qwen2-VL reply decoded with special tokens kept;
    # 0-1000 of the original image (process_bbox.ipynb): (531.0, 412.8, 581.0, 476.8)
    (
        "qwen2-vl",
        "<|object_ref_start|>击掌<|object_ref_end|><|box_start|>(531,516),(581,596)<|box_end|><|im_end|>",
        (1000, 800),
        [[531.0, 412.8, 581.0, 476.8]],
    ),
    # the same as vLLM returns it by default (the six tokens are special: skip_special_tokens drops them)
    ("qwen2-vl", "击掌(531,516),(581,596)", (1000, 800), [[531.0, 412.8, 581.0, 476.8]]),
    # QwenLM/Qwen3-VL qwen-vl-finetune/tools/process_bbox.ipynb: [146, 137, 615, 415] on 640 x 428 becomes
    # [228, 320, 961, 970]; read back: (145.92, 136.96, 615.04, 415.16) (constructed around the notebook's numbers)
    ("qwen2-vl", "<|box_start|>(228,320),(961,970)<|box_end|>", (640, 428), [[145.92, 136.96, 615.04, 415.16]]),
    # OpenGVLab/InternVL issue #227, the maintainer-confirmed answer format; the evaluator
    # (internvl_chat/eval/refcoco/evaluate_grounding.py) divides by 1000: (161.92, 110.88, 469.12, 377.76)
    # (the streamlit demo truncates: (161, 110, 469, 377))
    ("internvl", "<ref>XXX</ref><box>[[253, 231, 733, 787]]</box>", (640, 480), [[161.92, 110.88, 469.12, 377.76]]),
    # as the family's own chat() decodes it (skip_special_tokens=True) and vLLM by default
    ("internvl", "XXX[[253, 231, 733, 787]]", (640, 480), [[161.92, 110.88, 469.12, 377.76]]),
    # two boxes in one <box> (the demo's regex evaluates a [[..], [..]] list; constructed)
    (
        "internvl",
        "<ref>the cups</ref><box>[[253, 231, 733, 787], [0, 0, 500, 500]]</box>",
        (640, 480),
        [[161.92, 110.88, 469.12, 377.76], [0.0, 0.0, 320.0, 240.0]],
    ),
    # deepseek-ai/DeepSeek-VL2 README.md grounding example, decoded with skip_special_tokens=False, on the
    # README's own image (images/visual_grounding_1.jpeg, 724 x 1086); parse_ref_bbox divides by 999 and
    # truncates: (420, 293, 724, 978); the floats: (420.3403, 293.5135, 724.0, 978.3784)
    (
        "deepseek-vl2",
        "<|ref|>The giraffe at the back.<|/ref|><|det|>[[580, 270, 999, 900]]<|/det|><｜end▁of▁sentence｜>",
        (724, 1086),
        [scaled((580, 270, 999, 900), 999, 724, 1086)],
    ),
    # the same with the special tokens stripped (vLLM's default)
    (
        "deepseek-vl2",
        "The giraffe at the back.[[580, 270, 999, 900]]",
        (724, 1086),
        [scaled((580, 270, 999, 900), 999, 724, 1086)],
    ),
    # huggingface/transformers tests/models/paligemma/test_modeling_paligemma.py test_integration_detection_bug:
    # EXPECTED_DECODED_TEXT (prompt included; decoded with skip_special_tokens=True, the <locNNNN> survive);
    # y first, big_vision's evaluator divides by 1023: [193.3138, 23.9296, 404.1447, 332.1994]
    (
        "paligemma",
        "detect shoe\n<loc0051><loc0309><loc0708><loc0646> shoe",
        (640, 480),
        [[309 / 1023 * 640, 51 / 1023 * 480, 646 / 1023 * 640, 708 / 1023 * 480]],
    ),
    # constructed from the Keras tutorial's regex (` ; ` between detections)
    (
        "paligemma",
        "<loc0256><loc0128><loc0768><loc0896> cow ; <loc0000><loc0000><loc0512><loc1023> sky",
        (640, 480),
        [
            [128 / 1023 * 640, 256 / 1023 * 480, 896 / 1023 * 640, 768 / 1023 * 480],
            [0.0, 0.0, 640.0, 512 / 1023 * 480],
        ],
    ),
    # huggingface/transformers tests/models/florence2/test_modeling_florence2.py
    # test_large_model_batching_inference_eager (29 <pad>s as in the test string); a bin read at its centre
    # ((b + 0.5) * size / 1000, the remote code's floats): [33.6, 160.56, 596.8, 371.76] (native .int(): [33, 160, 596, 371])
    (
        "florence-2",
        "</s><s>car<loc_52><loc_334><loc_932><loc_774></s>" + "<pad>" * 29,
        (640, 480),
        [[33.6, 160.56, 596.8, 371.76]],
    ),
    # the same file, test_base_model_batching_inference_sdpa (<OD>: one phrase with two boxes); the native
    # post-processor truncates to [[34, 160, 597, 371], [272, 241, 303, 247], [454, 276, 553, 370], [96, 280, 198, 371]]
    (
        "florence-2",
        "</s><s>car<loc_53><loc_333><loc_933><loc_774>door handle<loc_425><loc_503><loc_474><loc_515>wheel"
        "<loc_709><loc_576><loc_865><loc_772><loc_150><loc_584><loc_309><loc_773></s><pad>",  # the test's <pad>s cut to one
        (640, 480),
        [
            [(b[0] + 0.5) * 0.64, (b[1] + 0.5) * 0.48, (b[2] + 0.5) * 0.64, (b[3] + 0.5) * 0.48]
            for b in ((53, 333, 933, 774), (425, 503, 474, 515), (709, 576, 865, 772), (150, 584, 309, 773))
        ],
    ),
    # huggingface/transformers docs/source/en/model_doc/kosmos-2.md (snowman.jpg, skip_special_tokens=True);
    # post_process_generation gives (0.390625, 0.046875, 0.984375, 0.828125) and
    # (0.171875, 0.015625, 0.484375, 0.890625): at 640 x 480, [250.0, 22.5, 630.0, 397.5], [110.0, 7.5, 310.0, 427.5]
    (
        "kosmos-2",
        "<grounding> An image of<phrase> a snowman</phrase><object><patch_index_0044><patch_index_0863></object> warming "
        "himself by<phrase> a fire</phrase><object><patch_index_0005><patch_index_0911></object>.",
        (640, 480),
        [[250.0, 22.5, 630.0, 397.5], [110.0, 7.5, 310.0, 427.5]],
    ),
    # THUDM/CogVLM README.md (CogAgent's grounded operation); utils/utils/grounding_parser.py divides by 1000
    # (and the demo truncates: [135, 239, 503, 270])
    (
        "cogvlm-grounding",
        "Grounded Operation:[combobox] Search -> TYPE: CogVLM at the box [[212,498,787,564]]",
        (640, 480),
        [[135.68, 239.04, 503.68, 270.72]],
    ),
    # the README's input box, and two boxes of one object joined by ';' (constructed from the parser's grammar)
    (
        "cogvlm-grounding",
        "the children [[086,540,400,760;500,100,650,300]]",
        (640, 480),
        [scaled((86, 540, 400, 760), 1000, 640, 480), scaled((500, 100, 650, 300), 1000, 640, 480)],
    ),
    # MiniGPT-v2: constructed from eval_ref.py's grammar ({<x1><y1><x2><y2>} on 0-100, divided by 100)
    ("minigpt-v2", "{<10><20><50><80>}", (640, 480), [[64.0, 96.0, 320.0, 384.0]]),
    # constructed from demo_v2.py's grammar: <p>phrase</p> then boxes joined by <delim>
    (
        "minigpt-v2",
        "<p>a man</p> {<10><20><50><80>}<delim>{<60><20><90><80>}",
        (640, 480),
        [[64.0, 96.0, 320.0, 384.0], [384.0, 96.0, 576.0, 384.0]],
    ),
    # Shikra: constructed from rec.py's target 'Answer: {boxes} .' and PlainBoxFormatter (3 decimals); fractions
    # of the image padded to a white square (expand2square): at 640 x 480 the square is 640, the image 80 px down
    ("shikra", "Answer: [0.100,0.250,0.500,0.750] .", (640, 480), [[64.0, 80.0, 320.0, 400.0]]),
    # several boxes of one phrase joined by ';' (constructed); a portrait image sits 80 px right in its square
    (
        "shikra",
        "Answer: [0.200,0.100,0.500,0.750;0.600,0.000,0.800,1.000] .",
        (480, 640),
        [[128.0 - 80, 64.0, 320.0 - 80, 480.0], [384.0 - 80, 0.0, 512.0 - 80, 640.0]],
    ),
    # Ferret: constructed from train.py's box format; eval_refexp.py's resize_bbox truncates ([64, 120, 320, 360]),
    # needlepoint keeps the floats (the same here)
    ("ferret", "the man in red [100, 250, 500, 750].", (640, 480), [[64.0, 120.0, 320.0, 360.0]]),
    ("ferret", "the man in red [101, 251, 501, 751].", (640, 480), [[64.64, 120.48, 320.64, 360.48]]),
]


@pytest.mark.parametrize(("name", "reply", "size", "expected"), DOCUMENTED)
def test_documented_replies_read_into_the_familys_boxes(
    name: str, reply: str, size: tuple[float, float], expected: list[list[float]]
) -> None:
    width, height = size
    parsed = tokens_parse(name, reply, width, height)
    assert parsed.error is None, parsed.error
    assert parsed.answer == [pytest.approx(b, abs=1e-9) for b in expected]
    # the benchmark's parse path with --model-family gives the same boxes
    assert ref_parse(name, reply, width, height).answer == parsed.answer


# The pixels the families' own code prints, truncated with int() (needlepoint keeps the floats): the
# floats above, truncated, are exactly those numbers. (family, reply, size, the family's printed boxes)
PRINTED: list[tuple[str, str, tuple[float, float], list[list[int]]]] = [
    # evaluate_grounding.py's demo counterpart (streamlit app) for issue #227's box
    ("internvl", "XXX[[253, 231, 733, 787]]", (640, 480), [[161, 110, 469, 377]]),
    # parse_ref_bbox on the README's own image
    ("deepseek-vl2", "The giraffe at the back.[[580, 270, 999, 900]]", (724, 1086), [[420, 293, 724, 978]]),
    # transformers' native Florence2 post-processor, as test_modeling_florence2.py expects
    ("florence-2", "</s><s>car<loc_52><loc_334><loc_932><loc_774></s>", (640, 480), [[33, 160, 596, 371]]),
    (
        "florence-2",
        "</s><s>car<loc_53><loc_333><loc_933><loc_774>door handle<loc_425><loc_503><loc_474><loc_515>wheel"
        "<loc_709><loc_576><loc_865><loc_772><loc_150><loc_584><loc_309><loc_773></s><pad>",
        (640, 480),
        [[34, 160, 597, 371], [272, 241, 303, 247], [454, 276, 553, 370], [96, 280, 198, 371]],
    ),
    # CogVLM's grounding_parser draw_boxes
    ("cogvlm-grounding", "at the box [[212,498,787,564]]", (640, 480), [[135, 239, 503, 270]]),
    # Ferret's resize_bbox
    ("ferret", "the man in red [100, 250, 500, 750].", (640, 480), [[64, 120, 320, 360]]),
]


@pytest.mark.parametrize(("name", "reply", "size", "printed"), PRINTED)
def test_the_floats_truncate_to_the_familys_printed_pixels(
    name: str, reply: str, size: tuple[float, float], printed: list[list[int]]
) -> None:
    parsed = tokens_parse(name, reply, *size)
    assert parsed.answer is not None
    assert [[int(v) for v in box] for box in parsed.answer] == printed


def test_kosmos2_patches_are_the_processors_fractions() -> None:
    """The snowman reply's two boxes as post_process_generation prints them (transformers docs)."""
    found = SYNTAXES["kosmos-2"].read(
        "<phrase> a snowman</phrase><object><patch_index_0044><patch_index_0863></object> warming himself by"
        "<phrase> a fire</phrase><object><patch_index_0005><patch_index_0911></object>."
    )
    assert [g.box for g in found.boxes] == [(0.390625, 0.046875, 0.984375, 0.828125), (0.171875, 0.015625, 0.484375, 0.890625)]
    # one row: the cells' edges (patch_index_to_coordinate's first branch)
    one_row = SYNTAXES["kosmos-2"].read("<object><patch_index_0002><patch_index_0005></object>")
    assert one_row.boxes[0].box == (2 / 32, 0.0, 6 / 32, 1 / 32)
    # several boxes of one phrase joined by the delimiter
    several = SYNTAXES["kosmos-2"].read(
        "<phrase> two dogs</phrase><object><patch_index_0033><patch_index_0100></delimiter_of_multi_objects/>"
        "<patch_index_0500><patch_index_1023></object>"
    )
    assert len(several.boxes) == 2
    assert box_to_patches((0.390625, 0.046875, 0.984375, 0.828125)) == (44, 863)


# The replies of the JSON families, read by the benchmark's path with the family's box format and frame.
JSON_DOCUMENTED: list[tuple[str, str, tuple[float, float], list[list[float]]]] = [
    # google-gemini/cookbook quickstarts/Spatial_understanding.ipynb, cell 29's stored output (first item);
    # y first on 0-1000: [67.0, 314.4, 206.0, 459.2] at 1000 x 800 (the cookbook truncates: [67, 314, 206, 459])
    (
        "gemini",
        '[\n  {"box_2d": [393, 67, 574, 206], "label": "red sprinkle topping"}\n]',
        (1000, 800),
        [[67.0, 314.4, 206.0, 459.2]],
    ),
    (
        "gemini",
        '[\n  {"box_2d": [393, 67, 574, 206], "label": "red sprinkle topping"},\n'
        '  {"box_2d": [379, 248, 539, 370], "label": "pink swirl topping with sprinkles"},\n'
        '  {"box_2d": [365, 396, 502, 503], "label": "light pink swirl topping"}\n]',
        (1000, 800),
        [[67.0, 314.4, 206.0, 459.2], [248.0, 303.2, 370.0, 431.2], [396.0, 292.0, 503.0, 401.6]],
    ),
    # QwenLM/Qwen2.5-VL cookbooks/spatial_understanding.ipynb (cakes.png, 1024 x 1024): pixels of the image as the
    # processor resized it (1036 x 1036 with the checkpoints' max_pixels 12,845,056):
    # (756.139, 389.436, 880.680, 543.629) (the cookbook truncates: (756, 389, 880, 543))
    (
        "qwen2.5-vl",
        '```json\n[\n\t{"bbox_2d": [765, 394, 891, 550], "label": "top right brown cake"}\n]\n```',
        (1024, 1024),
        [[765 / 1036 * 1024, 394 / 1036 * 1024, 891 / 1036 * 1024, 550 / 1036 * 1024]],
    ),
    # Qwen3-VL: no verbatim box reply is published; constructed in the cookbook's JSON shape, 0-1000 of the
    # original image (2d_grounding.ipynb divides by 1000): (145.92, 136.96, 615.04, 415.16) at 640 x 428
    (
        "qwen3-vl",
        '```json\n[\n\t{"bbox_2d": [228, 320, 961, 970], "label": "bowl"}\n]\n```',
        (640, 428),
        [[145.92, 136.96, 615.04, 415.16]],
    ),
    # Anthropic docs, Coordinates and bounding boxes: a 1075 x 1520 page is seen at 924 x 1307 and a corner
    # returned at (462, 653.5) is (537.5, 760.0) on the original (constructed box around the docs' corner)
    ("claude", '{"bbox_2d": [462, 653.5, 924, 1307]}', (1075, 1520), [[537.5, 760.0, 1075.0, 1520.0]]),
]


@pytest.mark.parametrize(("name", "reply", "size", "expected"), JSON_DOCUMENTED)
def test_json_families_read_their_documented_replies(
    name: str, reply: str, size: tuple[float, float], expected: list[list[float]]
) -> None:
    parsed = ref_parse(name, reply, *size)
    assert parsed.error is None, parsed.error
    assert parsed.answer == [pytest.approx(b, abs=1e-9) for b in expected]


def test_claude_size_gives_the_docs_reference_sizes() -> None:
    """Anthropic docs, Coordinates and bounding boxes: resized_size(1075, 1520) == (924, 1307); "a 1920x1080
    screenshot resizes to 1456x819, not 1568x882"; an image that fits is unchanged."""
    assert claude_size(1075, 1520, 1568, 1568) == (924, 1307)
    assert claude_size(1920, 1080, 1568, 1568) == (1456, 819)
    assert claude_size(1024, 768, 1568, 1568) == (1024, 768)
    # the high-resolution tier (2576 px, 4784 patches): 1920 x 1080 fits as is
    assert claude_size(1920, 1080, 2576, 4784) == (1920, 1080)
    # Qwen2.5-VL's frame of the cookbook's 1024 x 1024 image with the checkpoints' max_pixels
    assert smart_resize(1024, 1024, 28, 3136, 12_845_056) == (1036, 1036)


def test_florence2_reply_stripped_of_its_tokens_is_no_box() -> None:
    """<loc_N> are special tokens: without skip_special_tokens false the server leaves the phrase alone,
    which is no answer (and the family's requests ask to keep them)."""
    assert tokens_parse("florence-2", "car", 640, 480).error == status.NO_GROUNDING_FOUND
    assert family("florence-2").request == {"skip_special_tokens": False}


# ---------------------------------------------------------------------------------------------
# (2) Round trips on every box of the real annotation files, every family.


def mc_bench_boxes() -> list[tuple[tuple[float, float, float, float], float, float]]:
    """Every box of the MC-Bench release (COCO x, y, w, h) as xyxy with its image's size."""
    release = json.loads(MC_BENCH_RELEASE.read_text())
    images = {im["id"]: im for im in release["images"]}
    out = []
    for a in release["annotations"]:
        im = images[a["image_id"]]
        x, y, w, h = a["bbox"]
        out.append(((float(x), float(y), float(x + w), float(y + h)), float(im["width"]), float(im["height"])))
    return out


def ref_adv_boxes() -> list[tuple[tuple[float, float, float, float], float, float]]:
    """Every box of the Ref-Adv-s predictions file (the ground truth and the model's first box of each
    case). The file carries no image size (tests/data/README.md: its caption and file-name fields are
    empty), so each case's image is taken as the smallest one holding both its boxes: a box touching
    the image's right or bottom edge is the hardest case for a family's grid."""
    out = []
    for line in REF_ADV_PREDICTIONS.read_text().splitlines():
        row = json.loads(line)
        boxes = [b for b in (row["gt_bbox_xyxy"], row["pred_box_xyxy_first"]) if b]
        width = float(max(1, math.ceil(max(max(b[0], b[2]) for b in boxes))))
        height = float(max(1, math.ceil(max(max(b[1], b[3]) for b in boxes))))
        out += [((float(b[0]), float(b[1]), float(b[2]), float(b[3])), width, height) for b in boxes]
    return out


ANNOTATIONS = {"mc-bench": mc_bench_boxes(), "ref-adv-s": ref_adv_boxes()}


def tolerance(fam: Family, width: float, height: float) -> tuple[float, float]:
    """How far (x, y in pixels) a box may move through a family's syntax: half a unit of its grid
    times the side; one cell for a cell format (Florence-2's bins, Kosmos-2's 32 x 32 patches)."""
    if fam.name == "kosmos-2":
        return width / KOSMOS_GRID, height / KOSMOS_GRID
    if fam.name == "florence-2":
        return width / 1000, height / 1000
    if fam.name == "shikra":  # three decimals of the padded square's side
        side = max(width, height)
        return 0.0005 * side, 0.0005 * side
    grid = {"norm_999_xyxy": 999, "norm_1000_xyxy": 1000, "norm_1023_yxyx": 1023, "norm_100_xyxy": 100}[str(fam.box_format)]
    return 0.5 / grid * width, 0.5 / grid * height


def clipped(box: Sequence[float], width: float, height: float) -> list[float]:
    """The box inside its image (one MC-Bench box lies outside its image: every reader clips it)."""
    x1, y1, x2, y2 = box
    return [min(max(x1, 0.0), width), min(max(y1, 0.0), height), min(max(x2, 0.0), width), min(max(y2, 0.0), height)]


@pytest.mark.parametrize("source", list(ANNOTATIONS))
@pytest.mark.parametrize("fam", TOKEN_FAMILIES, ids=lambda f: f.name)
def test_round_trips_are_exact_to_the_familys_quantization(fam: Family, source: str) -> None:
    """Each box -> the family's numbers (`from_absolute`) -> its syntax (`answer`, with a label) -> parsed
    back: within the family's quantization of the box, every box of the file."""
    syntax = SYNTAXES[fam.syntax]
    assert fam.box_format is not None
    boxes = ANNOTATIONS[source]
    worst = 0.0
    failures = []
    for box, width, height in boxes:
        text = syntax.answer([from_absolute(box, fam.box_format, width, height)], "target")
        parsed = parse_grounded_boxes(text, syntax, fam.box_format, width, height)
        if parsed.error is not None or parsed.answer is None or len(parsed.answer) != 1:
            failures.append((text, parsed.error, box, width, height))
            continue
        tx, ty = tolerance(fam, width, height)
        want = clipped(box, width, height)
        off = [abs(g - w) / t for g, w, t in zip(parsed.answer[0], want, (tx, ty, tx, ty), strict=True)]
        worst = max(worst, *off)
    assert failures == [], f"{len(failures)} of {len(boxes)} boxes do not read back, e.g. {failures[:3]}"
    assert worst <= 1 + 1e-9
    assert len(boxes) == {"mc-bench": 3203, "ref-adv-s": 2276}[source]  # every box of the file


@pytest.mark.parametrize("source", list(ANNOTATIONS))
@pytest.mark.parametrize("name", ["gemini", "qwen3-vl", "qwen2.5-vl", "claude"])
def test_json_families_round_trip_through_the_benchmark_parse(name: str, source: str) -> None:
    """JSON families: each box in the family's box format and frame, written as the family writes its
    JSON (whole numbers), read back by Ref-Adv-s's parse path within half a unit of the family's grid
    (Qwen2.5-VL's and Claude's grid: one pixel of the frame the model sees)."""
    fam = family(name)
    assert fam.box_format is not None
    bench = RefAdv(model_family=name)
    key = "box_2d" if name == "gemini" else "bbox_2d"
    worst = 0.0
    for box, width, height in ANNOTATIONS[source]:
        frame: tuple[float, float]
        if name == "qwen2.5-vl":
            frame = smart_resize(int(width), int(height), 28, 3136, 12_845_056)
        elif name == "claude":
            frame = claude_size(int(width), int(height), 1568, 1568)
        else:
            frame = (1000.0, 1000.0)
        if fam.box_format == "abs_xyxy":
            numbers = [
                box[0] / width * frame[0],
                box[1] / height * frame[1],
                box[2] / width * frame[0],
                box[3] / height * frame[1],
            ]
        else:
            numbers = list(from_absolute(box, fam.box_format, width, height))
        reply = json.dumps([{key: [round(v) for v in numbers], "label": "target"}])
        parsed = bench.parse(sample_of(width, height), reply)
        assert parsed.error is None and parsed.answer is not None and len(parsed.answer) == 1, (reply, parsed.error)
        tx, ty = 0.5 * width / frame[0], 0.5 * height / frame[1]
        want = clipped(box, width, height)
        worst = max(worst, *(abs(g - w) / t for g, w, t in zip(parsed.answer[0], want, (tx, ty, tx, ty), strict=True)))
    assert worst <= 1 + 1e-9


@pytest.mark.parametrize("fam", TOKEN_FAMILIES, ids=lambda f: f.name)
def test_mc_bench_answer_lines_round_trip_with_groups(fam: Family) -> None:
    """MC-Bench's answer lines (`Image N:` then each group's label and its boxes), written in the family's
    syntax by `format_image_line`, read back with their image and group: the writer and the reader
    agree for every syntax, PaliGemma's too, whose label follows its boxes."""
    from needlepoint.contract.grounding import format_image_line

    syntax = SYNTAXES[fam.syntax]
    assert fam.box_format is not None
    geometry = PairGeometry(((640.0, 480.0), (500.0, 1000.0)))
    first = from_absolute((64.0, 48.0, 320.0, 240.0), fam.box_format, 640, 480)
    second = from_absolute((100.0, 100.0, 400.0, 900.0), fam.box_format, 500, 1000)
    third = from_absolute((10.0, 500.0, 200.0, 700.0), fam.box_format, 500, 1000)
    text = format_image_line(1, [(2, [first])], syntax) + "\n" + format_image_line(2, [(3, [second]), (1, [third])], syntax)
    parsed = parse_grounding_answer(text, geometry, False, syntax, fam.box_format)
    assert parsed.error is None, (text, parsed.error)
    got = [(b["image"], b["group"]) for b in parsed.answer]
    assert got == [(0, 2), (1, 3), (1, 1)], text


MC_RELEASE = json.loads(MC_BENCH_RELEASE.read_text())


@pytest.mark.parametrize("fam", TOKEN_FAMILIES, ids=lambda f: f.name)
def test_merged_picture_round_trips_put_each_box_in_its_image(fam: Family) -> None:
    """On the real MC-Bench pairs (the first 500 descriptions), every target written in the family's
    syntax on the merged picture (the two images side by side, a 20 px band between) reads back into
    the image that holds it, within the family's quantization of the picture."""
    syntax = SYNTAXES[fam.syntax]
    assert fam.box_format is not None
    images = {im["id"]: im for im in MC_RELEASE["images"]}
    boxes_of: dict[int, list[list[float]]] = {}
    for a in MC_RELEASE["annotations"]:
        boxes_of.setdefault(a["image_id"], []).append(a["bbox"])
    checked = 0
    for description in MC_RELEASE["descriptions"][:500]:
        left, right = (images[i] for i in description["images_id"])
        sizes = ((float(left["width"]), float(left["height"])), (float(right["width"]), float(right["height"])))
        geometry = PairGeometry(sizes, band=20)
        cw, ch = geometry.canvas
        numbers, want = [], []
        for k, im in enumerate((left, right)):
            dx = 0.0 if k == 0 else geometry.offset
            for x, y, w, h in boxes_of.get(im["id"], []):
                if w <= 0 or h <= 0 or x + w > im["width"] or y + h > im["height"]:
                    continue  # the one box outside its image (see clipped)
                numbers.append(from_absolute((x + dx, y, x + w + dx, y + h), fam.box_format, cw, ch))
                want.append((k, [float(x), float(y), float(x + w), float(y + h)]))
        if not numbers:
            continue
        text = " ".join(syntax.answer([n], "target") for n in numbers)
        parsed = parse_grounding_answer(text, geometry, True, syntax, fam.box_format)
        assert parsed.error is None and parsed.answer is not None, (text, parsed.error)
        assert [b["image"] for b in parsed.answer] == [k for k, _ in want]
        tx, ty = tolerance(fam, cw, ch)
        for b, (_, box) in zip(parsed.answer, want, strict=True):
            assert all(abs(g - w) <= t + 1e-9 for g, w, t in zip(b["bbox"], box, (tx, ty, tx, ty), strict=True)), (text, b, box)
        checked += len(want)
    assert checked > 700


# ---------------------------------------------------------------------------------------------
# (3) A reply in another family's syntax is a parse error, never numbers.

# One documented reply per syntax (the sources are those of DOCUMENTED and JSON_DOCUMENTED above).
FOREIGN: dict[str, str] = {
    "qwen-vl": "<ref>击掌</ref><box>(536,509),(588,602)</box>",
    "grounding-tokens": "<|object_ref_start|>击掌<|object_ref_end|><|box_start|>(531,516),(581,596)<|box_end|><|im_end|>",
    "internvl": "<ref>XXX</ref><box>[[253, 231, 733, 787]]</box>",
    "deepseek-vl2": "<|ref|>The giraffe at the back.<|/ref|><|det|>[[580, 270, 999, 900]]<|/det|><｜end▁of▁sentence｜>",
    "paligemma": "<loc0051><loc0309><loc0708><loc0646> shoe",
    "florence-2": "</s><s>car<loc_52><loc_334><loc_932><loc_774></s><pad><pad>",
    "kosmos-2": "<grounding> An image of<phrase> a snowman</phrase><object><patch_index_0044><patch_index_0863></object>.",
    "cogvlm-grounding": "Grounded Operation:[combobox] Search -> TYPE: CogVLM at the box [[212,498,787,564]]",
    "minigpt-v2": "<p>a man</p> {<10><20><50><80>}<delim>{<60><20><90><80>}",
    "shikra": "Answer: [0.100,0.250,0.500,0.750] .",
    "ferret": "the man in red [100, 250, 500, 750].",
    "json": '[\n  {"box_2d": [393, 67, 574, 206], "label": "red sprinkle topping"}\n]',
    "json-bbox": '```json\n[\n\t{"bbox_2d": [765, 394, 891, 550], "label": "top right brown cake"}\n]\n```',
}
# Pairs where the foreign reply is, character for character, a reply in the family's own syntax:
# InternVL's and DeepSeek-VL2's answers stripped of their tokens are `[[x1, y1, x2, y2]]`, which is
# CogVLM's syntax too; a JSON family reads a bare `[x1, y1, x2, y2]` or `[[...]]` list as the authors'
# JSON readers do, which is what CogVLM's, Shikra's and Ferret's boxes are.
SAME_TEXT = {("internvl", "cogvlm-grounding"), ("deepseek-vl2", "cogvlm-grounding")} | {
    (f.name, g) for f in TEXT_FAMILIES if f.syntax == "json" for g in ("cogvlm-grounding", "shikra", "ferret")
}


def foreign_cases() -> list[tuple[str, str]]:
    cases = []
    for fam in TEXT_FAMILIES:
        for other in FOREIGN:
            own = other == fam.syntax or (fam.syntax == "json" and other.startswith("json"))
            if not own and (fam.name, other) not in SAME_TEXT:
                cases.append((fam.name, other))
    return cases


@pytest.mark.parametrize(("name", "other"), foreign_cases())
def test_a_reply_in_another_familys_syntax_is_a_parse_error(name: str, other: str) -> None:
    fam = family(name)
    box_format = "norm_1000_xyxy" if fam.box_format is None else None  # GPT-4o has none of its own
    parsed = ref_parse(name, FOREIGN[other], 640, 480, box_format=box_format)
    assert parsed.answer is None, f"{name} read {other}'s reply as {parsed.answer}"
    assert parsed.error in PARSE_ERRORS
    # and MC-Bench, in the family's input mode, refuses it alike
    bench = McBench(model_family=name, box_format=box_format)
    geometry = PairGeometry(((640.0, 480.0), (640.0, 480.0)))
    sample = McSample("s0", "the target", None, (0, 1), (ImageRef(key="a"), ImageRef(key="b")), geometry)
    mc = bench.parse(sample, "Image 1: " + FOREIGN[other] if bench.input_mode == "sequence" else FOREIGN[other])
    assert mc.answer is None, f"MC-Bench with {name} read {other}'s reply as {mc.answer}"
    assert mc.error in PARSE_ERRORS | {status.NO_JSON_FOUND, status.BAD_SCHEMA}


@pytest.mark.parametrize("fam", TOKEN_FAMILIES, ids=lambda f: f.name)
def test_a_token_reply_names_the_syntax_it_is_in(fam: Family) -> None:
    """The reader names the other syntax (so the repair turn asks for the right one), and a JSON reply
    to a token family is `wrong_syntax`, never read as the family's numbers."""
    assert wrong_syntax(FOREIGN["json"], fam.syntax) == status.WRONG_SYNTAX
    assert tokens_parse(fam.name, FOREIGN["json"], 640, 480).error == status.WRONG_SYNTAX
    own = FOREIGN[fam.syntax]
    assert foreign_syntax(own, fam.syntax) is None


# Replies cut short or malformed (as DeepSeek-VL2 issues #33/#49 report its greedy decoding gives,
# e.g. `[[470,]]`; the others constructed from each grammar): an error, never numbers.
BROKEN: list[tuple[str, str]] = [
    ("qwen-vl", "<ref>cup</ref><box>(536,509)</box>"),
    ("qwen2-vl", "<|box_start|>(531,516)<|box_end|>"),
    ("internvl", "<ref>cup</ref><box>[[253, 231, 733]]</box>"),
    ("deepseek-vl2", "<|ref|>cup<|/ref|><|det|>[[470,]]<|/det|>"),
    ("paligemma", "<loc0051><loc0309><loc0708><loc0646> shoe ; <loc0051><loc0309><loc0708>"),
    ("paligemma", "<loc051><loc0309><loc0708><loc0646> shoe"),
    ("florence-2", "car<loc_52><loc_334><loc_932>"),
    ("kosmos-2", "<phrase> a cup</phrase><object><patch_index_0044></object>"),
    ("cogvlm-grounding", "[[212,498,787]]"),
    ("minigpt-v2", "{<10><20><50>}"),
    ("shikra", "Answer: [0.1,0.2,0.3] ."),
    ("ferret", "the man [100, 250, 500]"),
]


@pytest.mark.parametrize(("name", "reply"), BROKEN)
def test_a_broken_reply_is_an_error_not_numbers(name: str, reply: str) -> None:
    parsed = tokens_parse(name, reply, 640, 480)
    assert parsed.answer is None and parsed.error in PARSE_ERRORS


def test_an_opening_token_without_a_box_is_bad_grounding() -> None:
    assert tokens_parse("internvl", "<ref>the cup</ref><box>the cup on the left</box>", 640, 480).error == status.BAD_GROUNDING
    assert tokens_parse("deepseek-vl2", "<|ref|>cup<|/ref|><|det|>[[470,]]<|/det|>", 640, 480).error == status.BAD_GROUNDING
    assert tokens_parse("kosmos-2", "<phrase> a cup</phrase><object></object>", 640, 480).error == status.BAD_GROUNDING


# ---------------------------------------------------------------------------------------------
# (4) `needlepoint families`.


def test_families_lists_every_family(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["families"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0] for line in out.splitlines()[1:] if line.strip() and not line.startswith("needlepoint")}
    assert rows == set(FAMILIES)
    for required in (
        "gpt-4o",
        "gemini",
        "claude",
        "qwen-vl",
        "qwen2-vl",
        "qwen2.5-vl",
        "qwen3-vl",
        "internvl",
        "deepseek-vl2",
        "paligemma",
        "florence-2",
        "kosmos-2",
        "cogvlm-grounding",
        "minigpt-v2",
        "shikra",
        "ferret",
    ):
        assert required in FAMILIES
    line = next(row for row in out.splitlines() if row.startswith("internvl "))
    assert "<box>[[x1, y1, x2, y2]]</box>" in line and "norm_1000_xyxy" in line and "merged" in line
    paligemma = next(row for row in out.splitlines() if row.startswith("paligemma "))
    assert "norm_1023_yxyx" in paligemma and "1 (pair merged)" in paligemma
    assert main(["families", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [f["name"] for f in listed] == list(FAMILIES)


def test_families_internvl_shows_its_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["families", "internvl"]) == 0
    out = capsys.readouterr().out
    fam = family("internvl")
    assert out.startswith("internvl: InternVL2, InternVL2.5, InternVL3")
    for rule, where in fam.sources.items():
        assert f"{rule}: {where}" in out
    assert "evaluate_grounding.py" in out and fam.prompt is not None and fam.prompt in out
    for item in fam.unverified:
        assert item in out
    assert main(["families", "ferret", "--json"]) == 0
    (ferret,) = json.loads(capsys.readouterr().out)
    assert ferret["system"] == family("ferret").system and ferret["box_format"] == "norm_1000_xyxy"


def test_an_unknown_family_is_one_sentence_and_exit_2() -> None:
    rc, err = run_quiet(["families", "internvl9"])
    assert rc == 2
    line = one_sentence(err)
    assert "--model-family 'internvl9' is unknown" in line and "internvl" in line
    rc, err = run_quiet(
        ["eval", "ref_adv_s", "--data", "x", "--model", "m", "--api-url", "http://127.0.0.1:9/v1", "--model-family", "nope"]
    )
    assert rc == 2 and "--model-family 'nope' is unknown" in one_sentence(err)


# ---------------------------------------------------------------------------------------------
# (5) Leaderboard labels.


def board_run(tmp_path: Path, identity: dict[str, Any], options: dict[str, Any] | None = None) -> Run:
    return Run(tmp_path, {"identity": identity, "config": {"options": options or {}}}, {})


def test_a_familys_run_is_its_own_protocol_on_the_board(tmp_path: Path) -> None:
    paligemma = board_run(tmp_path, {"option.model_family": "paligemma"})
    assert answer_label("merged", paligemma, groups=True) == "merged, PaliGemma syntax, groups as 1"
    # without groups asked (Ref-Adv-s), PaliGemma is its syntax alone
    assert answer_label("direct", paligemma) == "direct, PaliGemma syntax"
    # a family that numbers groups says nothing about them
    qwen3 = board_run(tmp_path, {"option.model_family": "qwen3-vl"})
    assert answer_label("sequence", qwen3, groups=True) == "sequence, Qwen3-VL syntax"
    assert answer_label("direct", board_run(tmp_path, {"option.model_family": "florence-2"})) == "direct, Florence-2 syntax"
    # no family: the authors' protocol, as before; a family this version lacks is not invented
    assert answer_label("direct", board_run(tmp_path, {})) == "direct"
    assert answer_label("direct", board_run(tmp_path, {"option.model_family": "gone-vl"})) == "direct"
    # the options block (what the user gave) names the family too
    assert answer_label("", board_run(tmp_path, {}, {"model_family": "paligemma"})) == "PaliGemma syntax"


@pytest.mark.parametrize(
    ("name", "label"),
    [("internvl", "InternVL syntax"), ("gemini", "Gemini syntax"), ("claude", "Claude syntax"), ("qwen-vl", "Qwen-VL syntax")],
)
def test_the_label_names_the_family_not_one_version(tmp_path: Path, name: str, label: str) -> None:
    """The board names the family's protocol ("Ref-Adv-s, InternVL syntax", issue 43), the same for every
    version the family covers: an InternVL3 or a Gemini 2.5 run is not labelled InternVL2 or Gemini 1.5."""
    run = board_run(tmp_path, {"option.model_family": name, "option.answer_format": family(name).syntax})
    assert answer_label("direct", run) == f"direct, {label}"


def test_mc_bench_board_says_groups_as_1_for_paligemma(tmp_path: Path) -> None:
    """MC-Bench's board (Table 2's layout): a PaliGemma run's rows say its groups are all group 1; an
    Qwen3-VL run's rows name its syntax only; a run without a family is the authors' protocol."""
    from needlepoint.benchmarks.mc_bench.board import boards

    def run(name: str, identity: dict[str, Any]) -> Run:
        metrics = {"official": {"ap50": 0.5, "acc": 0.5}, "corrected": {"ap50": 0.5, "acc": 0.5}}
        return Run(tmp_path / name, {"identity": identity, "config": {"model": name, "options": {}}}, metrics)

    runs = [
        run("pali", {"option.model_family": "paligemma", "option.input_mode": "merged"}),
        run("qwen3", {"option.model_family": "qwen3-vl", "option.input_mode": "sequence"}),
        run("plain", {"option.input_mode": "sequence"}),
    ]
    (board,) = boards(runs)
    settings = {row.labels[0]: row.labels[1] for row in board.rows}
    assert settings == {
        "pali": "merged, PaliGemma syntax, groups as 1",
        "qwen3": "sequence, Qwen3-VL syntax",
        "plain": "sequence",
    }


# ---------------------------------------------------------------------------------------------
# (6) The dry run counts images against the family's limit.


@pytest.fixture(scope="module")
def mc_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from needlepoint.benchmarks.mc_bench.demo import write_release

    folder, _ = write_release(tmp_path_factory.mktemp("mc_demo"))
    return folder


def dry_run(capsys: pytest.CaptureFixture[str], data: Path, *flags: str) -> tuple[dict[str, Any], str]:
    out = data.parent / "dry-run"  # the estimate's run folder: beside the data, not ./runs of the checkout
    argv = [
        "eval",
        "mc_bench",
        "--data",
        str(data),
        "--model",
        "m",
        "--dry-run",
        "--dry-run-requests",
        "0",
        "--out",
        str(out),
        *flags,
    ]
    assert main([*argv, "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert main(argv) == 0
    return counts, capsys.readouterr().out


def test_dry_run_names_the_samples_over_the_familys_image_limit(mc_demo: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = McBench(model_family="paligemma").load(mc_demo)
    ids = [s.id for s in samples]
    counts, printed = dry_run(capsys, mc_demo, "--model-family", "paligemma", "--input-mode", "sequence")
    limit = counts["image_limit"]
    assert limit["images"] == 1 and limit["of"] == "--model-family paligemma"
    assert limit["over"] == len(ids) and limit["samples_over"] == ids[: len(limit["samples_over"])]
    assert len(limit["samples_over"]) == min(len(ids), 10)
    assert f"image limit (--model-family paligemma): 1 a request; {len(ids)} requests carry more: {ids[0]}" in printed
    # merged (PaliGemma's own input mode): one picture a request, within the limit
    counts, printed = dry_run(capsys, mc_demo, "--model-family", "paligemma")
    assert counts["image_limit"]["over"] == 0 and counts["images"] == len(ids)
    assert "image limit (--model-family paligemma): 1 a request; every request is within it" in printed
    # a family without a limit, and no family: no limit line
    counts, printed = dry_run(capsys, mc_demo, "--box-format", "norm_1000_xyxy")
    assert "image_limit" not in counts and "image limit" not in printed


# ---------------------------------------------------------------------------------------------
# (7) The run identity.


def test_the_family_is_part_of_the_run_identity_and_old_identities_stay() -> None:
    # the literal identity runs recorded before the families: its hash must not move
    assert BoxOptions.from_flags(box_format="abs_xyxy").identity() == {"box_format": "abs_xyxy", "max_image_side": None}
    assert RefAdv(box_format="abs_xyxy").identity() == {
        "prompt_mode": "direct",
        "repair_on_length_only": False,
        "box_format": "abs_xyxy",
        "max_image_side": None,
    }
    internvl = BoxOptions.from_flags(model_family="internvl")
    assert internvl.identity() == {
        "box_format": "norm_1000_xyxy",
        "max_image_side": None,
        "answer_format": "internvl",
        "model_family": "internvl",
    }
    # the same box settings stated by hand are another protocol than the family's
    by_hand = BoxOptions.from_flags(box_format="norm_1000_xyxy", answer_format="internvl")
    assert by_hand.identity() != internvl.identity() and "model_family" not in by_hand.identity()
    # a JSON family records itself and no answer format
    assert BoxOptions.from_flags(model_family="qwen3-vl").identity() == {
        "box_format": "norm_1000_xyxy",
        "max_image_side": None,
        "model_family": "qwen3-vl",
    }
    assert BoxOptions.from_flags(model_family="qwen2.5-vl").identity() == {
        "box_format": "abs_xyxy",
        "max_image_side": None,
        "abs_frame": "qwen-smart-resize",
        "abs_frame_factor": 28,
        "abs_frame_min_pixels": 3136,
        "abs_frame_max_pixels": 12_845_056,
        "model_family": "qwen2.5-vl",
    }
    assert BoxOptions.from_flags(model_family="claude").identity() == {
        "box_format": "abs_xyxy",
        "max_image_side": 8000,
        "abs_frame": "claude",
        "model_family": "claude",
    }
    assert McBench(model_family="paligemma").identity()["model_family"] == "paligemma"
    assert McBench(model_family="paligemma").identity()["input_mode"] == "merged"


def test_a_normalised_box_format_overrides_a_pixel_familys_frame() -> None:
    """`--model-family qwen2.5-vl --box-format norm_1000_xyxy` (or claude's): the family's pixel frame only
    applies to pixel boxes, so the stated format is read as such, not refused for a --abs-frame the
    user never gave."""
    for name in ("qwen2.5-vl", "claude"):
        boxes = BoxOptions.from_flags(box_format="norm_1000_xyxy", model_family=name)
        assert boxes.box_format == "norm_1000_xyxy" and boxes.frame.name == "official"


def test_a_flag_overrides_the_familys_default() -> None:
    assert BoxOptions.from_flags(model_family="qwen2.5-vl", abs_frame="official").frame.name == "official"
    assert BoxOptions.from_flags(model_family="qwen2.5-vl", abs_frame_max_pixels=1_003_520).frame.max_pixels == 1_003_520
    gemini = BoxOptions.from_flags(model_family="gemini", box_format="norm_1000_xyxy")
    assert gemini.box_format == "norm_1000_xyxy" and gemini.identity()["model_family"] == "gemini"
    assert McBench(model_family="internvl", input_mode="sequence").input_mode == "sequence"
    with pytest.raises(DataError, match="unknown"):
        BoxOptions.from_flags(model_family="internvl3000")
    gpt = BoxOptions.from_flags(model_family="gpt-4o")
    with pytest.raises(DataError, match="--box-format is required"):
        gpt.require("ref_adv_s")


def test_generation_defaults_and_conversation_follow_the_family() -> None:
    authors = {"temperature": 0.7, "max_tokens": 4096, "extra": {"top_k": 5}}
    assert BoxOptions.from_flags(box_format="abs_xyxy").generation_defaults(authors) == authors
    internvl = BoxOptions.from_flags(model_family="internvl").generation_defaults(authors)
    assert internvl == {"temperature": 0.0, "max_tokens": 100, "extra": {"top_k": 5}}
    florence = BoxOptions.from_flags(model_family="florence-2").generation_defaults(authors)
    assert florence["extra"] == {"top_k": 5, "skip_special_tokens": False} and florence["max_tokens"] == 1024
    conv = BoxOptions.from_flags(model_family="ferret").conversation(["hi"])
    assert [m.role for m in conv.messages] == ["system", "user"]
    assert conv.messages[0].text == family("ferret").system
    assert [m.role for m in BoxOptions.from_flags(model_family="internvl").conversation(["hi"]).messages] == ["user"]
    assert BoxOptions.from_flags(model_family="paligemma").image_limit() == (1, "--model-family paligemma")
    assert BoxOptions.from_flags(model_family="qwen3-vl").image_limit() is None


def test_the_familys_box_format_reads_the_grid_it_names() -> None:
    """The box formats the families use, on a 1000 x 500 image: the corners of the grid."""
    cases: list[tuple[BoxFormat, list[float], list[float]]] = [
        ("norm_1000_yxyx", [100, 200, 300, 400], [200.0, 50.0, 400.0, 150.0]),
        ("norm_999_xyxy", [0, 0, 999, 999], [0.0, 0.0, 1000.0, 500.0]),
        ("norm_1023_yxyx", [0, 0, 1023, 1023], [0.0, 0.0, 1000.0, 500.0]),
        ("norm_100_xyxy", [10, 20, 50, 80], [100.0, 100.0, 500.0, 400.0]),
        ("bins_1000_xyxy", [0, 0, 999, 999], [0.5, 0.25, 999.5, 499.75]),
        # Shikra: fractions of the 1000 x 1000 square, the image 250 px down
        ("norm_1_square_xyxy", [0.1, 0.25, 0.5, 0.75], [100.0, 0.0, 500.0, 500.0]),
    ]
    from needlepoint.core.geometry import to_absolute

    for box_format, raw, pixels in cases:
        assert list(to_absolute(raw, box_format, 1000, 500)) == pytest.approx(pixels), box_format

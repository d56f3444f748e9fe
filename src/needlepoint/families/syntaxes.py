"""The box syntaxes of the model families (docs/model-families.md cites where each comes from).

Each is a `Syntax` value: how one run of boxes looks, how a box inside it looks, how a phrase is
labelled, how a box is written. The numbers a syntax yields are in its family's box format
(core/geometry.py), except Kosmos-2's patch pairs, which become fractions of the image here (the
one syntax whose numbers are not coordinates).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from needlepoint.families.syntax import NUMBER, Syntax, Values

__all__ = ["MARKERS", "QWEN2", "SYNTAXES", "box_to_patches", "foreign_syntax"]

_N = f"({NUMBER})"


def _ints(values: Sequence[float]) -> list[int]:
    return [int(round(v)) for v in values]


def _list_box(number: str) -> str:
    """`[a, b, c, d]`, as InternVL and DeepSeek-VL2 nest boxes in `[[...]]`."""
    return r"\[\s*" + r"\s*,\s*".join([number] * 4) + r"\s*\]"


def _pairs_box(number: str) -> str:
    """`(x1,y1),(x2,y2)`, Qwen-VL's and Qwen2-VL's corners."""
    return r"\(\s*" + number + r"\s*,\s*" + number + r"\s*\)\s*,?\s*\(\s*" + number + r"\s*,\s*" + number + r"\s*\)"


def _wrapped(body: str, open_: str, close: str) -> re.Pattern[str]:
    """A container: `body` (named), with its opening and closing tokens optional (a server may
    have stripped them)."""
    return re.compile(r"(?:" + re.escape(open_) + r"\s*)?" + body + r"(?:\s*" + re.escape(close) + r")?")


_LIST_BOX = _list_box(NUMBER)
_NESTED = r"\[\s*(?P<body>" + _LIST_BOX + r"(?:\s*,\s*" + _LIST_BOX + r")*)\s*\]"


QWEN2 = Syntax(
    name="grounding-tokens",  # the --answer-format name it has had since before the families
    container=_wrapped(r"(?P<body>" + _pairs_box(NUMBER) + ")", "<|box_start|>", "<|box_end|>"),
    box=re.compile(_pairs_box(_N)),
    write=lambda b: "<|box_start|>({},{}),({},{})<|box_end|>".format(*_ints(b)),
    label=lambda text: f"<|object_ref_start|>{text}<|object_ref_end|>",
    example="<|box_start|>(x1,y1),(x2,y2)<|box_end|>",
    separator=r"\s*",
    opener="<|box_start|>",
    tokens=("<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>", "<|box_end|>"),
)

QWEN_VL = Syntax(
    name="qwen-vl",
    container=_wrapped(r"(?P<body>" + _pairs_box(NUMBER) + ")", "<box>", "</box>"),
    box=re.compile(_pairs_box(_N)),
    write=lambda b: "<box>({},{}),({},{})</box>".format(*_ints(b)),
    label=lambda text: f"<ref>{text}</ref>",
    example="<box>(x1,y1),(x2,y2)</box>",
    separator=r"\s*",
    opener="<box>",
    tokens=("<ref>", "</ref>", "<box>", "</box>"),
)

INTERNVL = Syntax(
    name="internvl",
    container=_wrapped(_NESTED, "<box>", "</box>"),
    box=re.compile(_list_box(_N)),
    write=lambda b: "<box>[[{}, {}, {}, {}]]</box>".format(*_ints(b)),
    label=lambda text: f"<ref>{text}</ref>",
    example="<box>[[x1, y1, x2, y2]]</box>",
    separator=r"\s*,?\s*",
    opener="<box>",
    tokens=("<ref>", "</ref>", "<box>", "</box>"),
)

DEEPSEEK_VL2 = Syntax(
    name="deepseek-vl2",
    container=_wrapped(_NESTED, "<|det|>", "<|/det|>"),
    box=re.compile(_list_box(_N)),
    write=lambda b: "<|det|>[[{}, {}, {}, {}]]<|/det|>".format(*_ints(b)),
    label=lambda text: f"<|ref|>{text}<|/ref|>",
    example="<|det|>[[x1, y1, x2, y2]]<|/det|>",
    separator=r"\s*,?\s*",
    opener="<|det|>",
    tokens=("<|ref|>", "<|/ref|>", "<|det|>", "<|/det|>"),
)

# PaliGemma: four <locNNNN> tokens (ymin, xmin, ymax, xmax on 1,024 bins), then the label; several
# detections separated by " ; ".
PALIGEMMA = Syntax(
    name="paligemma",
    container=re.compile(r"(?P<body>(?:<loc\d{4}>){4})"),
    box=re.compile(r"<loc(\d{4})><loc(\d{4})><loc(\d{4})><loc(\d{4})>"),
    write=lambda b: "".join(f"<loc{v:04d}>" for v in _ints(b)),
    label=lambda text: f" {text} ; ",
    example="<locYMIN><locXMIN><locYMAX><locXMAX>",
    separator=r"",
    opener="<loc",
    label_after=True,
)

# Florence-2: the phrase, then four <loc_N> tokens (x1, y1, x2, y2 as bins of 1,000).
FLORENCE2 = Syntax(
    name="florence-2",
    container=re.compile(r"(?P<body>(?:<loc_\d+>){4})"),
    box=re.compile(r"<loc_(\d+)><loc_(\d+)><loc_(\d+)><loc_(\d+)>"),
    write=lambda b: "".join(f"<loc_{v}>" for v in _ints(b)),
    label=lambda text: text,
    example="<loc_X1><loc_Y1><loc_X2><loc_Y2>",
    separator=r"",
    opener="<loc_",
    tokens=("<loc_N>",),
)

# Kosmos-2: <phrase>label</phrase><object><patch_index_UL><patch_index_LR></object> on a 32 x 32
# grid; several boxes of one phrase separated by </delimiter_of_multi_objects/>.
KOSMOS_GRID = 32
_PATCH_PAIR = r"<patch_index_(\d{4})>\s*<patch_index_(\d{4})>"
_PATCH = r"<patch_index_\d{4}>\s*<patch_index_\d{4}>"
_DELIMITER = "</delimiter_of_multi_objects/>"


def _patches_to_box(match: re.Match[str]) -> Values:
    """A pair of patch indices as fractions of the image (x1, y1, x2, y2), by Kosmos-2's processor
    rule: the two cells' corners when they share a row or a column (or are one cell), their
    centres otherwise."""
    n = KOSMOS_GRID
    ul, lr = int(match.group(1)), int(match.group(2))
    cell = 1.0 / n
    ux, uy, lx, ly = ul % n, ul // n, lr % n, lr // n
    if ul == lr or ux == lx or uy == ly:
        return ux * cell, uy * cell, lx * cell + cell, ly * cell + cell
    return ux * cell + cell / 2, uy * cell + cell / 2, lx * cell + cell / 2, ly * cell + cell / 2


def box_to_patches(box: Sequence[float]) -> tuple[int, int]:
    """Fractions (x1, y1, x2, y2) as Kosmos-2's processor turns a box into its two patch indices."""
    n = KOSMOS_GRID
    x1, y1, x2, y2 = box
    ul_x, ul_y = math.floor(x1 * n), math.floor(y1 * n)
    lr_x, lr_y = math.ceil(x2 * n - 1), math.ceil(y2 * n - 1)

    def clamp(v: int) -> int:
        return min(max(v, 0), n - 1)

    return clamp(ul_y) * n + clamp(ul_x), clamp(lr_y) * n + clamp(lr_x)


KOSMOS2 = Syntax(
    name="kosmos-2",
    container=re.compile(
        r"(?:<object>\s*)?(?P<body>" + _PATCH + r"(?:\s*" + re.escape(_DELIMITER) + r"\s*" + _PATCH + r")*)(?:\s*</object>)?"
    ),
    box=re.compile(_PATCH_PAIR),
    write=lambda b: "<object><patch_index_{:04d}><patch_index_{:04d}></object>".format(*box_to_patches(b)),
    label=lambda text: f"<phrase>{text}</phrase>",
    example="<object><patch_index_UL><patch_index_LR></object>",
    separator=r"\s*(?:" + re.escape(_DELIMITER) + r")?\s*",
    opener="<object>",
    tokens=("<phrase>", "</phrase>", "<object>", "</object>", _DELIMITER, "<patch_index_N>"),
    values=_patches_to_box,
)

# CogVLM-Grounding: [[x0,y0,x1,y1]] with three digits each, several boxes joined by ";".
_COG_BOX = r"(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)"  # three digits as written, 1000 at the far edge
COGVLM = Syntax(
    name="cogvlm-grounding",
    container=re.compile(r"\[\[(?P<body>[^\[\]]*)\]\]"),
    box=re.compile(_COG_BOX),
    write=lambda b: "[[{:03d},{:03d},{:03d},{:03d}]]".format(*_ints(b)),
    label=lambda text: f"{text} ",
    example="[[x0,y0,x1,y1]]",
    separator=r"\s*;?\s*",
)

# MiniGPT-v2: <p>label</p> {<x1><y1><x2><y2>} on 0-100; several boxes joined by <delim>.
MINIGPT_V2 = Syntax(
    name="minigpt-v2",
    container=re.compile(r"\{\s*(?P<body><\d+>\s*<\d+>\s*<\d+>\s*<\d+>)\s*\}"),
    box=re.compile(r"<(\d+)>\s*<(\d+)>\s*<(\d+)>\s*<(\d+)>"),
    write=lambda b: "{{<{}><{}><{}><{}>}}".format(*_ints(b)),
    label=lambda text: f"<p>{text}</p> ",
    example="{<x1><y1><x2><y2>}",
    separator=r"",
)

# Shikra: [x1,y1,x2,y2] as fractions with three decimals (one digit before the point, as its own
# extraction reads them), several boxes joined by ";"; never the inner list of a [[...]].
_SHIKRA_NUMBER = r"\d(?:\.\d+)?"
_SHIKRA_BOX = ",".join([_SHIKRA_NUMBER] * 4)
SHIKRA = Syntax(
    name="shikra",
    container=re.compile(r"(?<!\[)\[(?P<body>" + _SHIKRA_BOX + r"(?:;" + _SHIKRA_BOX + r")*)\](?!\])"),
    box=re.compile(",".join([f"({_SHIKRA_NUMBER})"] * 4)),
    write=lambda b: "[{:.3f},{:.3f},{:.3f},{:.3f}]".format(*b),
    label=lambda text: f"{text} ",
    example="[x1,y1,x2,y2]",
    separator=r";?",
)

# Ferret: [x1, y1, x2, y2] as whole numbers of a 1000 x 1000 frame, after the phrase.
_FERRET_BOX = r"(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)"
FERRET = Syntax(
    name="ferret",
    container=re.compile(r"(?<![\[\w])\[(?P<body>\s*\d+\s*,\s*\d+\s*,\s*\d+\s*,\s*\d+\s*)\](?!\])"),
    box=re.compile(_FERRET_BOX),
    write=lambda b: "[{}, {}, {}, {}]".format(*_ints(b)),
    label=lambda text: f"{text} ",
    example="[x1, y1, x2, y2]",
    separator=r"\s*",
)

SYNTAXES: dict[str, Syntax] = {
    s.name: s for s in (QWEN2, QWEN_VL, INTERNVL, DEEPSEEK_VL2, PALIGEMMA, FLORENCE2, KOSMOS2, COGVLM, MINIGPT_V2, SHIKRA, FERRET)
}

# What gives each syntax away when its tokens are in the reply (and JSON's box keys): a reply read
# in one syntax that holds another's marker answered in the other syntax.
MARKERS: dict[str, re.Pattern[str]] = {
    "json": re.compile(r'"(?:bbox|bbox_2d|box_2d|bboxes|boxes)"\s*:'),
    QWEN2.name: re.compile(r"<\|box_start\|>"),
    QWEN_VL.name: re.compile(r"<box>\s*\("),
    INTERNVL.name: re.compile(r"<box>\s*\["),
    DEEPSEEK_VL2.name: re.compile(r"<\|det\|>"),
    PALIGEMMA.name: re.compile(r"<loc\d{4}>"),
    FLORENCE2.name: re.compile(r"<loc_\d+>"),
    KOSMOS2.name: re.compile(r"<patch_index_\d{4}>"),
    MINIGPT_V2.name: re.compile(r"\{\s*<\d+>"),
}


def foreign_syntax(text: str, own: str) -> str | None:
    """The name of another syntax (or "json") whose marker the reply holds, else None."""
    for name, marker in MARKERS.items():
        if name != own and marker.search(text):
            return name
    return None

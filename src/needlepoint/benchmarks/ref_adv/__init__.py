"""Ref-Adv-s: one referent among look-alike distractors (docs/protocols/ref-adv-s.md).

The package, in the order of the flow: `data` (load the release), `parse` (prompts, repair turn,
reply parsing), `benchmark` (the class: judge, score, report), `scoring` (metrics, the authors'
prediction files), `export` (predictions in the authors' schema), `tables`, `board` (the
leaderboard's layout), `demo` (the demo set). This module is the declaration only, cheap to
import; the benchmark module's names are also reachable from here
(`from needlepoint.benchmarks.ref_adv import RefAdv`), imported when first used.
"""

from __future__ import annotations

import importlib
from typing import Any

from needlepoint.contract.declaration import Declaration, PublishedTable
from needlepoint.core.options import ABS_FRAME, ANSWER_FORMAT, BOX_FORMAT, MAX_IMAGE_SIDE, MODEL_FAMILY, Option

__all__ = ["BENCHMARK"]

BENCHMARK = Declaration(
    name="ref_adv_s",
    title="Ref-Adv-s",
    benchmark="needlepoint.benchmarks.ref_adv.benchmark:RefAdv",
    primary_metric="acc@0.5",
    options=(
        MODEL_FAMILY,
        BOX_FORMAT,
        ANSWER_FORMAT,
        Option("--prompt-mode", 'direct, cot, or finetuned-baseline ("Output the bounding boxes of <expression>")'),
        Option("--images", "images folder for a JSONL data file"),
        MAX_IMAGE_SIDE,
        Option("--repair-on-length-only", "repair turn only after finish_reason=length", switch=True),
        *ABS_FRAME,
    ),
    demo="needlepoint.benchmarks.ref_adv.demo:build",
    prompt_label="expression",
    sort_label="IoU",
    leaderboard="needlepoint.benchmarks.ref_adv.board:boards",
    human="one_box",
    human_options={"box_format": "abs_xyxy"},
    published=(
        PublishedTable(
            "published_data/ref-adv-s_results.csv",
            "Ref-Adv authors' results table (paper Table 6)",
            {
                "acc_0.5": "Acc@0.5",
                "acc_0.75": "Acc@0.75",
                "acc_0.9": "Acc@0.9",
                "bin_2-3": "2-3",
                "bin_4-6": "4-6",
                "bin_7+": ">=7",
            },
            "The published cot column is the authors' mark, not our --prompt-mode: their Thinking and Qwen3.5 rows "
            "are marked CoT but ran with the direct prompt and the model's own thinking. Human experts: Acc@0.5 "
            "only, on a random subset.",
        ),
    ),
)


def __getattr__(name: str) -> Any:
    """The benchmark module's names (RefAdv, parse_boxes, ...), imported when first asked for."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(importlib.import_module("needlepoint.benchmarks.ref_adv.benchmark"), name)

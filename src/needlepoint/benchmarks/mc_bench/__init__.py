"""MC-Bench: box every instance a prompt refers to across an image pair (docs/protocols/mc-bench.md).

The package, in the order of the flow: `groundtruth` and `benchmark` (load, prompt), `parse`,
`agentic` and `agentic_solver` (the agentic baseline), `scoring` with `official`, `corrected` and `cocoeval`,
`tables`, `board` (the leaderboard's layout), `demo`, and `sft` (`needlepoint build mc_bench_sft`).
This module is the declaration only, cheap to import.
"""

from __future__ import annotations

from needlepoint.contract.declaration import Builder, Declaration, PublishedTable
from needlepoint.core.options import ABS_FRAME, ANSWER_FORMAT, BOX_FORMAT, MAX_IMAGE_SIDE, MODEL_FAMILY, Option

__all__ = ["BENCHMARK"]

BENCHMARK = Declaration(
    name="mc_bench",
    title="MC-Bench",
    benchmark="needlepoint.benchmarks.mc_bench.benchmark:McBench",
    primary_metric="official/ap50",  # the paper's headline: AP50 by the authors' evaluator
    options=(
        MODEL_FAMILY,
        BOX_FORMAT,
        ANSWER_FORMAT,
        Option("--input-mode", "sequence or merged"),
        Option("--prompt-file", "a prompt template file replacing the default"),
        Option(
            "--prompt-wording",
            "needlepoint (default: the instruction states the answer format) or finetuned-baseline "
            '(the paper\'s finetuned baseline: "Output the bounding boxes of <description>")',
            choices=("needlepoint", "finetuned-baseline"),
        ),
        Option("--styles", "comma-separated prompt styles: Referring,Comparison,Reasoning"),
        MAX_IMAGE_SIDE,
        *ABS_FRAME,
    ),
    score_options=(Option("--styles", "comma-separated prompt styles"),),
    solvers={"agentic": "needlepoint.benchmarks.mc_bench.agentic_solver:AgenticSolver"},
    demo="needlepoint.benchmarks.mc_bench.demo:build",
    demo_runs=("needlepoint.benchmarks.mc_bench.agentic_demo:agentic_config",),
    leaderboard="needlepoint.benchmarks.mc_bench.board:boards",
    human="image_pair",
    human_options={"box_format": "abs_xyxy"},
    published=(
        PublishedTable(
            "published_data/mc-bench_table2.csv",
            "MC-Bench paper, Table 2",
            {
                "method": "model",
                "acc_ref": "Acc^ref",
                "acc_com": "Acc^com",
                "acc_rea": "Acc^rea",
                "acc": "Acc",
                "ap50_ref": "AP50^ref",
                "ap50_com": "AP50^com",
                "ap50_rea": "AP50^rea",
                "ap50": "AP50",
            },
            "The foundation-model rows (G-DINO-B, APE (D), ONE-PEACE): threshold unknown. The paper does not state the "
            "score threshold its detectors' results were cut at, which sets their Acc; a --model-family grounding-dino run "
            "states its own.",
        ),
    ),
    builders=(
        Builder(
            "mc_bench_sft",
            "needlepoint.benchmarks.mc_bench.sft.command",
            "MC-Bench-style multi-image grounding training data from COCO-format detection sets",
        ),
    ),
)

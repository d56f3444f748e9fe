"""RefCOCO, RefCOCO+ and RefCOCOg: the referring-expression benchmark of every model card
(docs/protocols/refcoco.md).

The package, in the order of the flow: `data` (the samples; the converted JSONL layout),
`layouts` (which layout `--data` holds), `hf` (the lmms-lab parquet sets), `refer` (the original
pickles, read as plain data only), `parse` (prompts, the corrected reading), `official`
(InternVL's evaluator, rule for rule), `benchmark` (the class), `scoring`, `tables`, `board`,
`resample`, `demo`. This module is the declaration only, cheap to import.
"""

from __future__ import annotations

from needlepoint.contract import (
    ABS_FRAME,
    ANSWER_FORMAT,
    BOX_FORMAT,
    MAX_IMAGE_SIDE,
    MODEL_FAMILY,
    Declaration,
    Option,
    PublishedTable,
)

__all__ = ["BENCHMARK", "SPLIT_COLUMNS"]

SPLIT_COLUMNS = {
    "refcoco_val": "RefCOCO val",
    "refcoco_testA": "RefCOCO testA",
    "refcoco_testB": "RefCOCO testB",
    "refcoco+_val": "RefCOCO+ val",
    "refcoco+_testA": "RefCOCO+ testA",
    "refcoco+_testB": "RefCOCO+ testB",
    "refcocog_val": "RefCOCOg val",
    "refcocog_test": "RefCOCOg test",
}

BENCHMARK = Declaration(
    name="refcoco",
    title="RefCOCO / RefCOCO+ / RefCOCOg",
    benchmark="needlepoint.benchmarks.refcoco.benchmark:RefCoco",
    primary_metric="corrected/acc@0.5",
    options=(
        MODEL_FAMILY,
        BOX_FORMAT,
        ANSWER_FORMAT,
        Option(
            "--splits",
            "comma-separated RefCOCO splits to run (refcoco_val, refcoco_testA, refcoco_testB, refcoco+_val, "
            "refcoco+_testA, refcoco+_testB, refcocog_val, refcocog_test); default: every split --data holds",
        ),
        Option("--images", "the folder image paths of the data start in (default: the data folder)"),
        MAX_IMAGE_SIDE,
        *ABS_FRAME,
    ),
    score_options=(MODEL_FAMILY, BOX_FORMAT, ANSWER_FORMAT, *ABS_FRAME),
    demo="needlepoint.benchmarks.refcoco.demo:build",
    prompt_label="expression",
    sort_label="IoU",
    leaderboard="needlepoint.benchmarks.refcoco.board:boards",
    human="one_box",
    human_options={"box_format": "abs_xyxy"},
    published=(
        PublishedTable(
            "published.csv",
            "model reports (reported_in names each row's table)",
            {**SPLIT_COLUMNS, "avg": "avg"},
            "Published Acc@0.5 as each report prints it, under its own evaluator and prompt (the evaluator and prompt "
            "columns): the InternVL rows are comparable with our official reading, the Qwen rows with neither reading "
            "exactly (the Qwen team's scorer is not published). Qwen3-VL reports only the mean of the eight splits.",
            package="needlepoint.benchmarks.refcoco",
        ),
    ),
)

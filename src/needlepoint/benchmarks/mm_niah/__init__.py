"""MM-NIAH: needles in long interleaved image-text documents (docs/protocols/mm-niah.md).

The package, in the order of the flow: `data` and `benchmark` (load, prompt), `retrieve` and `rag`
(the RAG baseline's parts), `judge`, `aggregate` (the official numbers), `heatmap`, `response_files`
(the authors' response files), `board` (needlepoint's leaderboard layout), `demo`, and `build`
(`needlepoint build mm_niah`). This module is the declaration only, cheap to import.
"""

from __future__ import annotations

from needlepoint.benchmarks.mm_niah.ranges import CONTEXT_EDGES, PAPER_TASKS
from needlepoint.contract.declaration import Builder, Declaration, PublishedTable
from needlepoint.core.options import MAX_IMAGE_SIDE, Option

__all__ = ["BENCHMARK"]

# The MM-NIAH files spell the context ranges "1K".."64K"; the leaderboard's columns are "1k".."64k".
_COLUMNS = {f"{edge // 1000}K": f"{edge // 1000}k" for edge in CONTEXT_EDGES}

BENCHMARK = Declaration(
    name="mm_niah",
    title="MM-NIAH",
    benchmark="needlepoint.benchmarks.mm_niah.benchmark:MmNiah",
    primary_metric="overall/overall",
    task_order=PAPER_TASKS,
    options=(
        Option("--tasks", "comma-separated tasks, e.g. retrieval-text,counting-image"),
        Option("--split", "val or test"),
        MAX_IMAGE_SIDE,
        Option(
            "--model-family",
            "the model family whose image limits apply: the images a request and the largest side its API accepts "
            "(needlepoint families lists them; MM-NIAH's prompts and decoding stay the authors')",
        ),
    ),
    score_options=(Option("--split", "the split to score when a folder holds several: val or test"),),
    solvers={"rag": "needlepoint.benchmarks.mm_niah.rag_solver:RagSolver"},  # the authors' RAG baseline
    demo="needlepoint.benchmarks.mm_niah.demo:build",
    demo_runs=("needlepoint.benchmarks.mm_niah.rag_demo:rag_config",),
    prompt_label="question",
    leaderboard="needlepoint.benchmarks.mm_niah.board:boards",
    human="document",
    published=(
        PublishedTable("published_data/mm-niah_paper.csv", "MM-NIAH paper, Tables 2 and 6-11 (test split)", _COLUMNS),
        PublishedTable(
            "published_data/mm-niah_leaderboard.csv",
            "MM-NIAH project-page leaderboard (2024-08-16)",
            _COLUMNS,
            "The MM-NIAH paper's test numbers and the later project-page leaderboard's differ (the page records a "
            "precision fix after the paper); both are shown, each row names its source.",
        ),
    ),
    builders=(
        Builder(
            "mm_niah", "needlepoint.benchmarks.mm_niah.build.cli", "MM-NIAH haystacks from an interleaved corpus (OBELICS format)"
        ),
    ),
)

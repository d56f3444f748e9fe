"""A toy grounding benchmark that lives outside needlepoint, as a user's plugin would: find the one
coloured square in a drawn image and answer with its box. The test registers it
(needlepoint.contract.registry.register) and runs eval, score, report and the HTML report on it without
editing any file of needlepoint (tests/test_toybench.py).

It is built like a built-in grounding benchmark and touches only its own package plus what
needlepoint offers every benchmark: the contracts (benchmarks.base, .boards, .boxes for boxes in a
reply), the core helpers (geometry, files, drawing, status names) and the solver protocol; its
published table is its own CSV (published.csv, beside this file). tests/test_package.py checks the
built-in benchmarks to the same rule.

This module is the whole declaration; the code it names is imported only when used.
"""

from __future__ import annotations

from needlepoint.contract.declaration import Declaration, PublishedTable
from needlepoint.core.options import Option

BENCHMARK = Declaration(
    name="toy_shapes",
    title="Toy shapes",
    benchmark="toybench.benchmark:ToyShapes",
    options=(Option("--instruction", "what the prompt asks for after the question (default: Answer with a JSON box.)"),),
    solvers={"hinted": "toybench.solver:Hinted"},
    prompt_label="question",
    sort_label="IoU",
    leaderboard="toybench.board:boards",
    published=(PublishedTable("published.csv", "Toy paper, Table 1", {"accuracy": "Acc"}, package="toybench"),),
)

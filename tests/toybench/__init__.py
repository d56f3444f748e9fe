"""A toy grounding benchmark that lives outside needlepoint, as a user's plugin would: find the one
coloured square in a drawn image and answer with its box. The test registers it
(needlepoint.contract.registry.register) and runs eval, score, report and the HTML report on it without
editing any file of needlepoint (tests/test_toybench.py).

It is built like a built-in grounding benchmark and imports needlepoint only through its public
faces: `needlepoint.contract` for the benchmark (protocols, Dataset, boxes in a reply, IoU, boards,
file helpers) and `needlepoint.solvers` for its solver; its published table is its own CSV
(published.csv, beside this file). tests/test_package.py holds it to that, and the built-in
benchmarks to the layers.

This module is the whole declaration; the code it names is imported only when used.
"""

from __future__ import annotations

from needlepoint.contract import Declaration, Option, PublishedTable

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

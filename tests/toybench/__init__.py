"""A toy benchmark that lives outside needlepoint, as a user's plugin would: count a letter in a
word. The test registers it (needlepoint.benchmarks.register) and runs eval, score, report and
the HTML report on it without editing any file of needlepoint (tests/test_toybench.py).

This module is the whole declaration; the code it names is imported only when used.
"""

from __future__ import annotations

from needlepoint.benchmarks.declaration import Declaration, PublishedTable
from needlepoint.options import Option

BENCHMARK = Declaration(
    name="toy_letters",
    title="Toy letters",
    benchmark="toybench.benchmark:ToyLetters",
    options=(Option("--instruction", "what the prompt asks for after the question (default: Answer with a number.)"),),
    solvers={"hinted": "toybench.solver:Hinted"},
    prompt_label="word",
    sort_label="error",
    leaderboard="toybench.board:boards",
    published=(PublishedTable("published.csv", "Toy paper, Table 1", {"accuracy": "Acc"}, package="toybench"),),
)

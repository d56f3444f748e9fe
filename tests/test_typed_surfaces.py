"""The typed surfaces of issue 21 item 4: evaluate()'s keywords follow RunConfig's fields, and the
optional model methods are found by their protocols, a benchmark on BaseBenchmark gets the shared
verbs. Issue 40: the optional verbs of benchmarks and solvers are protocols too, and nothing in the
package looks a verb up by its name."""

from __future__ import annotations

import ast
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_type_hints

import pytest
from helpers import REPO

from needlepoint.contract import (
    AnswersInJson,
    BaseBenchmark,
    Benchmark,
    DataError,
    Dataset,
    DrawsFigures,
    Parsed,
    ReadsPredictions,
    Record,
    Resamples,
    WeighsSamples,
)
from needlepoint.contract.registry import make
from needlepoint.core.config import RunConfig
from needlepoint.core.conversation import Closes, Conversation, ImageRef, Message, Scrubs, WaitNotes
from needlepoint.run.evaluate import EvaluateSettings, read_predictions
from needlepoint.solvers import DropsCalls, TakesOptions, solver_class, solver_options


def test_evaluate_takes_every_field_of_run_config_and_no_other() -> None:
    assert set(get_type_hints(EvaluateSettings)) == {f.name for f in dataclasses.fields(RunConfig)}


def test_optional_model_methods_are_found_by_protocol() -> None:
    class Plain:
        name = "plain"

    class Rich:
        name = "rich"

        def scrub(self, text: str) -> str:
            return text.replace("sk-1", "***")

        def wait_note(self) -> str | None:
            return None

        async def aclose(self) -> None:
            return None

    assert not isinstance(Plain(), (Scrubs, WaitNotes, Closes))
    assert isinstance(Rich(), Scrubs) and isinstance(Rich(), WaitNotes) and isinstance(Rich(), Closes)


def test_a_benchmark_on_the_base_writes_only_its_own_verbs(tmp_path: Path) -> None:
    """A benchmark that writes name, load, prompt, parse, judge and score gets every other verb."""

    @dataclasses.dataclass
    class Item:
        id: str
        image: ImageRef

        def fingerprint(self) -> str:
            return self.id

    class Tiny(BaseBenchmark):
        name = "tiny"

        def load(self, data: Path) -> Dataset[Item]:
            return Dataset([Item("a", ImageRef(key="a.png", path=data))])

        def prompt(self, sample: Item) -> Conversation:
            return Conversation([Message("user", [sample.image, "What is it?"])])

        def parse(self, sample: Item, text: str) -> Parsed:
            return Parsed(answer=text.strip()) if text.strip() else Parsed(error="empty_response")

        def judge(self, sample: Item, parsed: Parsed) -> dict[str, Any]:
            return {"correct": parsed.answer == "a cat"}

        def score(self, dataset: Dataset[Item], records: Sequence[Record]) -> dict[str, Any]:
            return {"n": len(records), "accuracy": sum(bool(r["scores"]["correct"]) for r in records) / len(records)}

    bench: Benchmark = Tiny()
    dataset = bench.load(tmp_path / "a.png")
    record: Record = {"id": "a", "status": "ok", "turns": [{"role": "model", "reply": "a cat"}], "parse_error": None}
    record["scores"] = bench.judge(dataset[0], bench.parse(dataset[0], "a cat"))
    assert bench.identity() == {} and bench.followup(dataset[0], Parsed(error="x"), None) is None
    assert bench.export(tmp_path, dataset, [record], "m", {}) == []
    assert bench.running([record]) == "parse fail 0"
    assert bench.tables(bench.score(dataset, [record]))[0].rows == [["n", 1], ["accuracy", 1.0]]
    [item] = bench.report_items(dataset, [record])
    assert (item.prompt, item.answer, item.correct, item.images[0].image.key) == ("What is it?", "a cat", True, "a.png")
    assert not isinstance(bench, (WeighsSamples, AnswersInJson, Resamples, DrawsFigures, ReadsPredictions))
    with pytest.raises(DataError, match="tiny reads no prediction file of its own"):
        read_predictions(bench, tmp_path, None)


BENCHMARK_VERBS = {
    "mc_bench": (AnswersInJson, Resamples, ReadsPredictions),
    "ref_adv_s": (AnswersInJson, Resamples, ReadsPredictions),
    "mm_niah": (WeighsSamples, Resamples, DrawsFigures, ReadsPredictions),
}


@pytest.mark.parametrize("name", sorted(BENCHMARK_VERBS))
def test_the_builtin_benchmarks_optional_verbs_are_found_by_protocol(name: str) -> None:
    bench = make(name)
    every = (WeighsSamples, AnswersInJson, Resamples, DrawsFigures, ReadsPredictions)
    assert [p.__name__ for p in every if isinstance(bench, p)] == [p.__name__ for p in every if p in BENCHMARK_VERBS[name]]


def test_a_solvers_optional_verbs_are_found_by_protocol() -> None:
    niah, mc = make("mm_niah"), make("mc_bench")
    rag, agentic, default = solver_class("rag", niah), solver_class("agentic", mc), solver_class("default", niah)
    assert isinstance(rag, TakesOptions) and isinstance(agentic, TakesOptions) and not isinstance(default, TakesOptions)
    assert solver_options(default) == () and "--embed-model" in [o.flag for o in solver_options(rag)]
    assert isinstance(rag, DropsCalls) and not isinstance(agentic, DropsCalls)
    assert isinstance(agentic, AnswersInJson) and not isinstance(default, AnswersInJson)


# The optional verbs of benchmarks and solvers (and the names they had before issue 40)
VERBS = {
    "cost",
    "resampler",
    "figures",
    "answer_schema",
    "predictions_run",
    "published_run",
    "score_file",
    "file_resampler",
    "dropped_calls",
    "options",
}


def test_no_verb_is_looked_up_by_its_name() -> None:
    """getattr/hasattr with a verb's name is gone from the package: an optional verb is a protocol
    (`isinstance(obj, Proto)`), so a misspelt verb is a type error, not a silent default."""
    found = []
    for path in sorted((REPO / "src" / "needlepoint").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and node.args[1].value in VERBS
            ):
                found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
    assert found == []

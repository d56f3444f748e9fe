"""The typed surfaces of issue 21 item 4: evaluate()'s keywords follow RunConfig's fields, and the
optional model methods are found by their protocols, a benchmark on BaseBenchmark gets the shared
verbs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any, get_type_hints

import pytest

from needlepoint.contract.base import BaseBenchmark, Benchmark, DataError, Dataset, Parsed
from needlepoint.core.config import RunConfig
from needlepoint.core.conversation import Closes, Conversation, ImageRef, Message, Scrubs, WaitNotes
from needlepoint.run.evaluate import EvaluateSettings


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

        def score(self, dataset: Dataset[Item], records: Sequence[dict[str, Any]]) -> dict[str, Any]:
            return {"n": len(records), "accuracy": sum(bool(r["scores"]["correct"]) for r in records) / len(records)}

    bench: Benchmark = Tiny()
    dataset = bench.load(tmp_path / "a.png")
    record = {"id": "a", "status": "ok", "turns": [{"role": "model", "reply": "a cat"}], "parse_error": None}
    record["scores"] = bench.judge(dataset[0], bench.parse(dataset[0], "a cat"))
    assert bench.identity() == {} and bench.followup(dataset[0], Parsed(error="x"), None) is None
    assert bench.export(tmp_path, dataset, [record], "m", {}) == []
    assert bench.running([record]) == "parse fail 0"
    assert bench.tables(bench.score(dataset, [record]))[0].rows == [["n", 1], ["accuracy", 1.0]]
    [item] = bench.report_items(dataset, [record])
    assert (item.prompt, item.answer, item.correct, item.images[0].image.key) == ("What is it?", "a cat", True, "a.png")
    with pytest.raises(DataError, match="tiny writes no prediction file"):
        bench.score_file(tmp_path)

"""The agentic solver's odds and ends: `--max-phrases` bounds the localizer calls of a sample (more
phrases are the sample's parse problem, with the repair turn); an image beyond the pair is one
parse error whether it is a key (`image_3`) or an entry's number (`"image": 3`); a run that found no
box still writes `results_coco.json` (an empty list)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers.agentic import FMT, LOCALIZER, REASONER, agentic_args

from needlepoint.benchmarks.mc_bench.agentic import REASONER_REPAIR_TEXT, parse_targets, reasoner_prompt
from needlepoint.benchmarks.mc_bench.agentic_solver import DEFAULT_MAX_PHRASES
from needlepoint.benchmarks.mc_bench.benchmark import McBench
from needlepoint.benchmarks.mc_bench.demo import write_release
from needlepoint.cli import main
from needlepoint.core.store import read_records
from needlepoint.models.simulated import script_key
from needlepoint.solvers import make_solver


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Any]]:
    folder, _ = write_release(tmp_path_factory.mktemp("mc_odds"), pairs=3)
    return folder, list(McBench(box_format=FMT).load(folder))


def _many(n: int) -> str:
    return json.dumps({"image_1": [{"group": 1, "phrase": f"the shape number {k}"} for k in range(n)], "image_2": []})


@pytest.mark.parametrize(
    "reply",
    [
        '{"image_1": [{"group": 1, "phrase": "a chair"}], "image_3": [{"group": 1, "phrase": "a lamp"}]}',
        '{"image_3": [{"group": 1, "phrase": "a lamp"}]}',
        '{"Image 3": ["a lamp"], "image_2": []}',
        '[{"image": 3, "group": 1, "phrase": "a lamp"}]',
        '[{"image": 1, "group": 1, "phrase": "a chair"}, {"image": 3, "group": 1, "phrase": "a lamp"}]',
    ],
)
def test_an_image_beyond_the_pair_is_one_parse_error(reply: str) -> None:
    assert parse_targets(reply).error == "image_not_given"


def test_max_phrases_bounds_the_localizer_calls_and_image_3_gets_the_repair_turn(
    serve: Any, release: Any, tmp_path: Path
) -> None:
    folder, samples = release
    too_many, beyond = samples[0], samples[1]
    script = {
        script_key(reasoner_prompt(too_many)): [_many(5), _many(4)],  # still too many after the repair turn
        script_key(reasoner_prompt(beyond)): [
            '{"image_3": [{"group": 1, "phrase": "a lamp"}]}',
            '{"image_1": [], "image_2": []}',
        ],
        script_key(reasoner_prompt(samples[2])): ['{"image_1": [], "image_2": []}'],
    }
    reasoner = serve(script=script, default=None, models=(REASONER,))
    localizer = serve(default='{"bbox_2d": [1, 1, 5, 5]}', models=(LOCALIZER,))
    out = tmp_path / "run"
    assert main(agentic_args(folder, reasoner.url, localizer.url, out, "--no-report", "--max-phrases", "3")) == 0
    assert localizer.requests == []  # five, then four phrases: no localizer call at all
    records = read_records(out / "records.jsonl")
    rec = records[too_many.id]
    assert rec["status"] == "done" and rec["parse_error"] == "too_many_phrases" and rec["repair_used"]
    assert [t["role"] for t in rec["turns"]] == ["model", "model"]
    repaired = records[beyond.id]
    assert repaired["repair_used"] and repaired["parse_error"] is None and repaired["answer"] == []
    assert repaired["turns"][1]["sent"][-1]["content"] == [{"type": "text", "text": REASONER_REPAIR_TEXT}]
    header = json.loads((out / "run.json").read_text())
    assert header["identity"]["solver.max_phrases"] == 3
    # no box in the whole run: results_coco.json is still written, an empty list
    assert json.loads((out / "results_coco.json").read_text()) == []
    assert main(["score", "mc_bench", "--predictions", str(out / "results_coco.json"), "--data", str(folder)]) == 0


def test_max_phrases_is_in_the_identity_only_away_from_its_default() -> None:
    def ident(**settings: Any) -> dict[str, Any]:
        return make_solver(
            "agentic", McBench(box_format=FMT), localizer="vlm:a", localizer_url="http://127.0.0.1:9/v1", **settings
        ).identity()

    before = ident()
    assert "max_phrases" not in before and ident(max_phrases=DEFAULT_MAX_PHRASES) == before  # old runs keep their hash
    assert ident(max_phrases=3)["max_phrases"] == 3


def test_max_phrases_must_be_a_positive_whole_number(release: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder, _ = release
    args = agentic_args(folder, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", tmp_path / "r", "--max-phrases", "0")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--max-phrases" in err and "Traceback" not in err and err.count("\n") == 1

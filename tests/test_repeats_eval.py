"""`eval --repeats K`: K sub-runs with seeds --seed + r sent as the request's seed, each resuming
like a run; repeats.json with the mean and spread over repeats, the interval over samples where
there is one, and the share of samples whose correctness changes. A simulated server on 127.0.0.1
that answers by the request's seed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import good_ref_reply, one_sentence, ref_eval_args, scripted_ref_release

from needlepoint.cli import main
from needlepoint.models.simulated import SimulatedServer
from needlepoint.run.repeats import correctness_changes, repeat_seeds


class SeededServer(SimulatedServer):
    """Answers from the script of the request's `seed` (`by_seed`), as a sampling model would differ."""

    by_seed: dict[int, dict[str, list[Any]]]

    async def _chat(self, request: Any) -> Any:
        body = await request.json()  # aiohttp keeps the body: the server's own handler reads it again
        self.script = self.by_seed[body.get("seed")]
        return await super()._chat(request)


def test_repeats_need_sampling_on(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, _, _, _ = scripted_ref_release(tmp_path, n=2)
    args = ref_eval_args(data, "http://127.0.0.1:9/v1", tmp_path / "out", "--repeats", "3", "--temperature", "0")
    assert main(args) == 2
    assert "--repeats needs sampling on" in one_sentence(capsys.readouterr().err)
    assert main(ref_eval_args(data, "http://127.0.0.1:9/v1", tmp_path / "out", "--repeats", "1", "--temperature", "1")) == 2
    assert "at least twice" in one_sentence(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_repeats_store_every_answer_and_report_the_spread(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, rows, keys, _ = scripted_ref_release(tmp_path, n=4)
    right = {k: [good_ref_reply(r)] for k, r in zip(keys, rows)}
    wrong_first = {**right, keys[0]: ['{"bbox_2d": [0, 0, 1, 1]}']}
    server = SeededServer(models=["org/m"], keep_requests=True)
    server.by_seed = {40: right, 41: wrong_first, 42: right}
    server.start()
    try:
        out = tmp_path / "rep"
        args = ref_eval_args(data, server.url, out, "--repeats", "3", "--seed", "40", "--temperature", "0.7")
        args += ["--concurrency", "1", "--no-report", "--json"]
        assert main(args) == 0
        summary = json.loads(capsys.readouterr().out)
        assert json.loads((out / "repeats.json").read_text()) == summary
        assert summary["seeds"] == [40, 41, 42] == repeat_seeds(40, 3)
        sent = sorted(body["seed"] for body in server.bodies())
        assert sent == [40] * 4 + [41] * 4 + [42] * 4  # every sample three times, each repeat's seed in the request
        for r in range(3):  # every answer stored, each repeat a run folder of its own identity
            lines = (out / f"repeat-{r}" / "records.jsonl").read_text().splitlines()
            assert len(lines) == 4
            assert json.loads((out / f"repeat-{r}" / "run.json").read_text())["identity"]["generation"]["seed"] == 40 + r
        acc = summary["metrics"]["Acc@0.5"]
        assert acc["values"] == [100.0, 75.0, 100.0]
        assert acc["mean"] == pytest.approx(275 / 3) and acc["sd"] == pytest.approx(14.433756729740644)
        assert (acc["min"], acc["max"]) == (75.0, 100.0)
        # repeat-0's own Acc@0.5 interval, attached by the metric's name: its value (100.0) ties
        # Acc@0.75's and Acc@0.9's, which once left it without one (issue 41 item 6)
        lo, hi = acc["interval_over_samples"]
        assert lo < 100.0 and hi == 100.0 and summary["level"] == 0.95
        assert acc["sd_over_samples"] == pytest.approx((hi - lo) / (2 * 1.959964), rel=1e-5)
        assert summary["correctness_changes"] == {"samples": 4, "changed": 1, "share": 0.25}

        # the same command again resumes every repeat: nothing is asked again
        before = len(server.bodies())
        assert main(args) == 0
        assert json.loads(capsys.readouterr().out) == summary
        assert len(server.bodies()) == before
        assert main([a for a in args if a != "--json"]) == 0  # the terminal table
        table = capsys.readouterr().out
        assert "3 repeats (seeds 40, 41, 42: repeat-0 ... repeat-2)" in table and "correctness changes" in table
        assert "25.0%" in table and "95% interval over samples (repeat-0)" in table and "sd over samples" in table
        assert len(server.bodies()) == before
    finally:
        server.stop()


def test_correctness_changes_counts_samples_judged_in_every_repeat() -> None:
    assert correctness_changes([{"a": True, "b": False, "c": True}, {"a": True, "b": True}]) == {
        "samples": 2,
        "changed": 1,
        "share": 0.5,
    }
    assert correctness_changes([{}, {}])["share"] is None

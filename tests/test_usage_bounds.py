"""Usage counts that cannot poison a run (issue 42.3): a server's `usage` whose counts are not
whole numbers from 0 to usage.MAX_TURN_TOKENS (a 400- or 35-digit count, a float, a negative,
reasoning tokens above the completion tokens) or that is absent leaves that turn's usage unknown:
the run ends with metrics.json and a report, the cost counts only what is known, and where a price
or a budget is set the run says so once while it runs and again at its end."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import TEST_MODELS, records, ref_eval_args, run_quiet, scripted_ref_release

from needlepoint.contract.usage import MAX_TURN_TOKENS, summarize, tokens_of, usable_tokens
from needlepoint.models.simulated import SimulatedServer

UNKNOWN = "usage unknown"


class UsageServer(SimulatedServer):
    """The simulated model, each answer's `usage` replaced by `usage` (deleted when None)."""

    usage: Any = None

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        answer = await super()._chat(request)
        if answer.status != 200:
            return answer
        body = json.loads(answer.text)
        body.pop("usage", None)
        if self.usage is not None:
            body["usage"] = self.usage
        text = json.dumps(body).replace('"__HUGE__"', "9" * 400)
        return web.Response(text=text, content_type="application/json")


def _start(usage: Any) -> UsageServer:
    server = UsageServer(models=TEST_MODELS, keep_requests=True)
    server.usage = usage
    return server.start()


BAD = {
    "400 digits": {"prompt_tokens": "__HUGE__", "completion_tokens": 3},
    "35 digits": {"prompt_tokens": 10**35, "completion_tokens": 3},
    "a float": {"prompt_tokens": 12.5, "completion_tokens": 3},
    "negative": {"prompt_tokens": -4, "completion_tokens": 3},
    "reasoning above completion": {
        "prompt_tokens": 10,
        "completion_tokens": 3,
        "completion_tokens_details": {"reasoning_tokens": 50},
    },
    "a string": {"prompt_tokens": "10", "completion_tokens": 3},
}


@pytest.mark.parametrize("name", list(BAD))
def test_poisoned_usage_is_unknown_the_run_ends_and_reports(tmp_path: Path, name: str) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = _start(BAD[name])
    try:
        out = tmp_path / "run"
        args = ref_eval_args(data, server.url, out, "--price", "1,1", model="sim-model")
        rc, err = run_quiet(args)
        assert rc == 0 and "Traceback" not in err, err
        metrics = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
        model = metrics["usage"]["roles"]["model"]
        assert model["requests"] == 3 and model["unknown_usage"] == 3
        assert model["prompt_tokens"] == 0 and model["cost"] == 0.0  # nothing counted from an impossible number
        assert err.count(UNKNOWN) == 2, err  # once while it ran, once at its end
        assert (out / "report" / "index.html").exists()
        text = (out / "records.jsonl").read_text(encoding="utf-8")
        assert "9" * 100 not in text  # the stored turn keeps no poisoned number
        rc, err = run_quiet(["eval", *args[1:]])  # a rerun finds the finished run and ends alike
        assert rc == 0 and "Traceback" not in err, err
        rc, err = run_quiet(["report", str(out), "--out", str(tmp_path / "board")])
        assert rc == 0, err
    finally:
        server.stop()


def test_no_usage_with_a_budget_is_said_during_and_at_the_end(tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=4)
    server = _start(None)
    try:
        out = tmp_path / "run"
        rc, err = run_quiet(ref_eval_args(data, server.url, out, "--no-report", "--max-tokens-total", "50", model="sim-model"))
        assert rc == 0, err
        lines = [line for line in err.splitlines() if UNKNOWN in line]
        assert len(lines) == 2 and "--max-tokens-total" in lines[0], err
        assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["usage"]["total"]["unknown_usage"] == 4
    finally:
        server.stop()


def test_good_usage_says_nothing_of_unknown(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = serve(script=script)
    out = tmp_path / "run"
    rc, err = run_quiet(ref_eval_args(data, server.url, out, "--no-report", "--price", "1,1", model="sim-model"))
    assert rc in (0, 3) and UNKNOWN not in err, err
    assert json.loads((out / "metrics.json").read_text(encoding="utf-8"))["usage"]["total"]["unknown_usage"] == 0
    assert all(t.get("usage") for r in records(out) for t in r["turns"])


def test_the_bound_is_stated_and_counts_are_whole_numbers_below_it() -> None:
    assert MAX_TURN_TOKENS == 10**9
    assert usable_tokens({"prompt_tokens": MAX_TURN_TOKENS - 1, "completion_tokens": 0}) == (MAX_TURN_TOKENS - 1, 0, 0)
    cases: list[Any] = [
        *BAD.values(),
        {"prompt_tokens": MAX_TURN_TOKENS, "completion_tokens": 1},
        {"prompt_tokens": True},
        None,
        {},
    ]
    for bad in cases:
        bad = {k: (10**400 if v == "__HUGE__" else v) for k, v in bad.items()} if isinstance(bad, dict) else bad
        assert usable_tokens(bad) is None
        assert tokens_of(bad) == (0, 0, 0)
    turns: Any = [{"role": "model", "model": "m", "usage": {"prompt_tokens": 10**400, "completion_tokens": 1}}]
    block = summarize([{"id": "a", "turns": turns}])  # a record stored before this rule: still summed, as unknown
    assert block["roles"]["model"]["unknown_usage"] == 1 and block["total"]["prompt_tokens"] == 0


def test_budget_says_unknown_usage_once_and_never_averages_it(capsys: pytest.CaptureFixture[str]) -> None:
    from needlepoint.contract.usage import Budget, Prices, parse_price

    budget = Budget(None, 100, Prices())
    for usage in (None, {"prompt_tokens": 1.5, "completion_tokens": 2}, {"prompt_tokens": 10**35, "completion_tokens": 1}):
        budget.charge("m", usage)
    assert budget.tokens == 0 and budget.answered == 0  # nothing known: nothing counted, no mean of nothing
    err = capsys.readouterr().err
    assert err.count(UNKNOWN) == 1 and "the server sent no usage" in err and "--max-tokens-total" in err
    budget.charge("m", {"prompt_tokens": 20, "completion_tokens": 10})
    assert (budget.tokens, budget.answered) == (30, 1)
    priced = Budget(None, None, Prices(default=parse_price("1,1")))
    assert priced.active and priced.refusal() is None  # a price alone counts the answers, refuses nothing

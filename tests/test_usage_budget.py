"""Tokens, time and cost (usage.py): metrics.json's `usage` block, the end-of-run line, prices
from --price and --prices, and the budgets that stop a run (--max-cost, --max-tokens-total)
against the simulated server, which reports usage as vLLM does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import one_sentence, records, ref_eval_args, run_quiet, scripted_ref_release

from needlepoint.contract.usage import Budget, Prices, load_prices, parse_price, summarize, tokens_of
from needlepoint.core.errors import DataError


def _metrics(out: Path) -> dict[str, Any]:
    metrics: dict[str, Any] = json.loads((out / "metrics.json").read_text(encoding="utf-8"))
    return metrics


def _sums(out: Path) -> dict[str, int]:
    """Prompt, completion and reasoning tokens summed by hand from the records' turns."""
    got = {"prompt": 0, "completion": 0, "reasoning": 0, "requests": 0}
    last = {r["id"]: r for r in records(out)}
    for r in last.values():
        for t in r["turns"]:
            u = t.get("usage") or {}
            got["prompt"] += u.get("prompt_tokens", 0)
            got["completion"] += u.get("completion_tokens", 0)
            got["reasoning"] += (u.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)
            got["requests"] += 1
    return got


def test_usage_block_sums_the_servers_usage_and_prices_it(serve: Any, tmp_path: Path) -> None:
    data, rows, keys, script = scripted_ref_release(tmp_path, n=6)
    script[keys[0]] = [{"text": script[keys[0]][0], "reasoning": "one two three four five"}]
    server = serve(script=script)
    out = tmp_path / "run"
    rc, err = run_quiet(ref_eval_args(data, server.url, out, "--no-report", "--price", "1.5,6", model="sim-model"))
    assert rc in (0, 3), err
    usage = _metrics(out)["usage"]
    model = usage["roles"]["model"]
    sums = _sums(out)
    assert sums["reasoning"] == 5  # the one reasoning reply, counted within its completion tokens
    assert model["requests"] == sums["requests"] == len(server.log)
    assert (model["prompt_tokens"], model["completion_tokens"], model["reasoning_tokens"]) == (
        sums["prompt"],
        sums["completion"],
        sums["reasoning"],
    )
    assert model["total_tokens"] == sums["prompt"] + sums["completion"]
    assert model["cost"] == pytest.approx((sums["prompt"] * 1.5 + sums["completion"] * 6) / 1e6)
    assert usage["total"]["cost"] == model["cost"] and usage["total"]["requests"] == model["requests"]
    assert model["models"] == ["sim-model"]
    assert json.loads((out / "run.json").read_text(encoding="utf-8"))["wall_s"] > 0 and "wall time" in err
    assert "usage: model" in err and f"{sums['prompt']:,} prompt" in err and "cost " in err
    assert "run" in _metrics(out) and "acc" in json.dumps(_metrics(out))  # the other blocks as before


def test_prices_file_prices_per_model_and_says_which_has_none(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = serve(script=script)
    prices = tmp_path / "prices.toml"
    prices.write_text('["other/model"]\ninput = 1\noutput = 1\n', encoding="utf-8")
    out = tmp_path / "run"
    rc, err = run_quiet(ref_eval_args(data, server.url, out, "--no-report", "--prices", str(prices), model="sim-model"))
    assert rc in (0, 3), err
    assert _metrics(out)["usage"]["roles"]["model"]["cost"] is None
    assert "cost unknown (no price for sim-model)" in err
    prices.write_text('["sim-model"]\ninput = 2\noutput = 4\n', encoding="utf-8")
    assert load_prices(prices).of("sim-model") == parse_price("2,4")


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--price", "1"], "--price takes IN,OUT"),
        (["--price", "1,-2"], "--price's OUT must be a price of 0 or more"),
        (["--max-cost", "1"], "--max-cost needs prices"),
        (["--max-tokens-total", "0"], "--max-tokens-total must be a positive"),
        (["--prices", "MISSING"], "cannot be read"),
    ],
)
def test_bad_price_or_budget_is_one_sentence_and_no_run_folder(serve: Any, tmp_path: Path, flags: list[str], words: str) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=2)
    server = serve(script=script)
    out = tmp_path / "run"
    flags = [str(tmp_path / "nope.toml") if f == "MISSING" else f for f in flags]
    rc, err = run_quiet(ref_eval_args(data, server.url, out, "--no-report", *flags, model="sim-model"))
    assert rc == 2 and words in one_sentence(err)
    assert not out.exists() and not server.log


def test_bad_toml_is_refused_in_one_sentence(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text("[m]\ninput = 1\n", encoding="utf-8")
    with pytest.raises(DataError, match="exactly `input` and `output`"):
        load_prices(path)
    path.write_text("[m\n", encoding="utf-8")
    with pytest.raises(DataError, match="not valid TOML"):
        load_prices(path)


def test_token_budget_stops_the_run_and_a_rerun_with_more_continues(serve: Any, tmp_path: Path) -> None:
    data, rows, keys, script = scripted_ref_release(tmp_path, n=10)
    server = serve(script=script)
    out = tmp_path / "run"
    args = ref_eval_args(data, server.url, out, "--no-report", "--concurrency", "1", model="sim-model")
    rc, err = run_quiet([*args, "--max-tokens-total", "60"])
    assert rc == 3, err  # the exit code of failed samples: the run is not finished
    assert "the --max-tokens-total budget of 60 tokens is spent" in err
    first = records(out)
    used = sum(u["prompt_tokens"] + u["completion_tokens"] for r in first for t in r["turns"] if (u := t.get("usage")))
    assert 0 < len(server.log) < 10 and used <= 60
    refused = [r for r in first if r["status"] != "done"]
    assert all(r["status"] == "backend_error" and "not sent" in r["error"] for r in refused)  # retryable
    assert all(not t.get("usage") for r in refused for t in r["turns"])
    header = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert header["status"] == "incomplete"
    sent = len(server.log)
    rc, err = run_quiet([*args, "--max-tokens-total", "60"])  # the same budget: what was used counts, nothing is sent
    assert rc == 3 and len(server.log) == sent and "budget of 60 tokens is spent" in err
    rc, err = run_quiet([*args, "--retry-failed", "--max-tokens-total", "100000"])
    assert rc == 0, err
    done = {r["id"]: r for r in records(out)}
    assert len(done) == 10 and all(r["status"] == "done" for r in done.values())
    assert len(set(server.log)) == len(server.log)  # no request twice: answered calls were not asked again


def test_cost_budget_with_a_price_stops_before_passing_it(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=8)
    server = serve(script=script)
    out = tmp_path / "run"
    args = ref_eval_args(data, server.url, out, "--no-report", "--concurrency", "1", "--price", "1000,1000", model="sim-model")
    rc, err = run_quiet([*args, "--max-cost", "0.1"])
    assert rc == 3 and "the --max-cost budget of 0.1 is spent" in err
    assert _metrics(out)["usage"]["total"]["cost"] <= 0.1
    assert 0 < len(server.log) < 8


def test_tokens_of_reads_openai_and_vllm_usage() -> None:
    assert tokens_of(None) == (0, 0, 0)
    assert tokens_of({"prompt_tokens": 3, "completion_tokens": 5, "completion_tokens_details": {"reasoning_tokens": 2}}) == (
        3,
        5,
        2,
    )
    assert tokens_of({"prompt_tokens": 7, "completion_tokens": 5, "reasoning_tokens": 4}) == (7, 5, 4)
    # one impossible count leaves the whole turn's usage unknown (issue 42.3), never partly counted
    assert tokens_of({"prompt_tokens": -1, "completion_tokens": True, "reasoning_tokens": 4}) == (0, 0, 0)


def test_budget_counts_requests_in_flight() -> None:
    budget = Budget(None, 100, Prices())
    assert budget.refusal() is None  # nothing known yet: the first request goes
    budget.release()
    budget.charge("m", {"prompt_tokens": 20, "completion_tokens": 10})  # 30 a request
    assert budget.refusal() is None and budget.refusal() is None  # 30 used + 2 x 30 ahead = 90
    assert budget.refusal() is not None  # + 3 x 30 would pass 100
    assert "--max-tokens-total" in str(budget.stop_reason())


def test_summarize_roles_and_tools() -> None:
    recs: list[Any] = [
        {
            "id": "a",
            "turns": [
                {"role": "model", "model": "m", "usage": {"prompt_tokens": 10, "completion_tokens": 2}, "latency_s": 1.0},
                {"role": "localizer", "model": "loc", "usage": {"prompt_tokens": 5, "completion_tokens": 1}, "latency_s": 0.5},
                {"role": "tool", "tool": "embed", "latency_s": 2.0},
                {"role": "model", "model": "m", "error": "boom", "latency_s": 0.1},
            ],
        }
    ]
    got = summarize(recs, Prices(default=parse_price("1,1")))
    assert got["roles"]["model"]["requests"] == 2 and got["roles"]["model"]["failed_requests"] == 1
    assert got["roles"]["embeddings"]["requests"] == 1 and got["roles"]["embeddings"]["request_s"] == 2.0
    assert got["roles"]["localizer"]["cost"] == pytest.approx(6e-6)
    assert got["total"]["total_tokens"] == 18 and got["total"]["cost"] == pytest.approx(18e-6)


def test_report_page_and_leaderboard_show_the_usage(serve: Any, tmp_path: Path) -> None:
    data, _, _, script = scripted_ref_release(tmp_path, n=3)
    server = serve(script=script)
    out = tmp_path / "run"
    rc, err = run_quiet(ref_eval_args(data, server.url, out, "--price", "2,8", model="sim-model"))
    assert rc in (0, 3), err
    page = (out / "report" / "index.html").read_text(encoding="utf-8")
    total = _metrics(out)["usage"]["total"]
    assert "Tokens, time and cost" in page and f'<td class="num">{total["prompt_tokens"]}</td>' in page
    board_dir = tmp_path / "board"
    rc, err = run_quiet(["report", str(out), "--usage", "--out", str(board_dir)])
    assert rc == 0, err
    rows = (board_dir / "leaderboard_ref_adv_s_usage.csv").read_text(encoding="utf-8").splitlines()
    assert rows[0].startswith("model,requests,failed,prompt tokens,completion tokens,reasoning tokens,request s,cost")
    assert rows[1].startswith(f"sim-model,{total['requests']},{total['failed_requests']},{total['prompt_tokens']},")
    assert rows[1].split(",")[7] == f"{total['cost']:.4f}"
    rc, err = run_quiet(["report", str(out), "--out", str(tmp_path / "plain")])
    assert rc == 0 and not (tmp_path / "plain" / "leaderboard_ref_adv_s_usage.csv").exists()  # opt-in


def test_a_refused_request_is_no_request() -> None:
    refused: Any = {"id": "a", "turns": [{"role": "model", "model": "m", "error": "budget spent", "attempts": 0}]}
    assert summarize([refused])["roles"] == {}

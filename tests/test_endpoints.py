"""Several endpoints: `URL#weight`, weighted least-in-flight, requests and errors per endpoint in
the run folder and its report."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import prompt_key, run_cli

from needlepoint.benchmarks.ref_adv.benchmark import RefAdv
from needlepoint.core.config import RunConfig
from needlepoint.core.conversation import Conversation, Generation, Message
from needlepoint.core.endpoints import add_stats, split_weight
from needlepoint.core.errors import DataError
from needlepoint.models.openai_compat import OpenAICompatModel, RetryPolicy
from needlepoint.run.evaluate import evaluate


def test_split_weight() -> None:
    assert split_weight("http://a:8000/v1") == ("http://a:8000/v1", 1.0)
    assert split_weight("http://a:8000/v1?x=1#2.5") == ("http://a:8000/v1?x=1", 2.5)
    for bad in ("0", "-1", "two", "", "inf", "nan"):
        with pytest.raises(DataError, match="weight"):
            split_weight(f"http://a:8000/v1#{bad}")


def test_bad_weight_on_the_command_line_exits_2(tmp_path: Path) -> None:
    done = run_cli(["eval", "ref_adv_s", "--data", str(tmp_path), "--model", "m", "--api-url", "http://127.0.0.1:9/v1#zero"])
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--api-url weight #zero is not a positive number" in done.stderr


def test_weighted_least_in_flight(serve: Any) -> None:
    """Eight requests at once over weights 3 and 1: six go to the first endpoint, two to the second."""
    heavy, light = serve(delay_s=1.0), serve(delay_s=1.0)

    async def go() -> list[dict[str, Any]]:
        model = OpenAICompatModel("sim", [f"{heavy.url}#3", light.url], retry=RetryPolicy(max_retries=0))
        try:
            convs = [Conversation([Message("user", [f"q{i}"])]) for i in range(8)]
            replies = await asyncio.gather(*(model.complete(c, Generation(timeout_s=30)) for c in convs))
            assert all(r.error is None for r in replies)
            return model.endpoint_stats()
        finally:
            await model.aclose()

    stats = asyncio.run(go())
    assert (len(heavy.log), len(light.log)) == (6, 2)
    assert stats == [
        {"url": f"{heavy.url}", "weight": 3.0, "requests": 6, "errors": 0},
        {"url": light.url, "weight": 1.0, "requests": 2, "errors": 0},
    ]


def test_requests_and_errors_per_endpoint_in_run_folder_and_report(serve: Any, ref_release: Any, tmp_path: Path) -> None:
    folder, rows = ref_release
    samples = RefAdv(box_format="abs_xyxy").load(folder)
    keys = [prompt_key(s) for s in samples]
    good = '{"bboxes": [[1, 1, 20, 20]]}'
    a = serve(script={k: [good] for k in keys}, faults={keys[0]: ["500"], keys[1]: ["500", "500"]}, default=None)
    b = serve(script={k: [good] for k in keys}, faults={keys[0]: ["500"], keys[1]: ["500", "500"]}, default=None)
    config = dict(
        benchmark="ref_adv_s",
        data=folder,
        model="sim-model",
        api_urls=[a.url, f"{b.url}#2"],
        options={"box_format": "abs_xyxy"},
        out=tmp_path / "run",
        concurrency=3,
        show_progress=False,
        max_retries=4,
        backoff_base_s=0.01,
    )
    evaluate(RunConfig(**config))
    header = json.loads((tmp_path / "run" / "run.json").read_text())
    stats = {e["url"]: e for e in header["endpoints"]}
    assert set(stats) == {a.url, b.url}
    assert stats[b.url]["weight"] == 2.0 and stats[a.url]["weight"] == 1.0
    for url, server in ((a.url, a), (b.url, b)):
        assert stats[url]["requests"] == len(server.log)  # every attempt counted where it went
        assert stats[url]["errors"] == 3 - sum(len(f) for f in server.faults.values())  # the 500s this server gave
    errors = sum(e["errors"] for e in stats.values())
    assert errors >= 2  # the first attempts of samples 0 and 1 fail wherever they went
    assert sum(e["requests"] for e in stats.values()) == len(samples) + errors
    assert json.loads((tmp_path / "run" / "run.json").read_text())["config"]["api_urls"][1] == f"{b.url}#2"
    report = (tmp_path / "run" / "report" / "index.html").read_text()
    assert "Requests per endpoint" in report and f"<td>{b.url}</td>" in report

    # A resumed session adds its requests to the same rows.
    lines = (tmp_path / "run" / "records.jsonl").read_text().splitlines()
    drop = next(i for i, line in enumerate(lines) if json.loads(line)["id"] not in (samples[0].id, samples[1].id))
    (tmp_path / "run" / "records.jsonl").write_text("".join(line + "\n" for i, line in enumerate(lines) if i != drop))
    evaluate(RunConfig(**config))
    again = {e["url"]: e for e in json.loads((tmp_path / "run" / "run.json").read_text())["endpoints"]}
    assert sum(e["requests"] for e in again.values()) == len(samples) + errors + 1
    assert sum(e["errors"] for e in again.values()) == errors


def test_add_stats_sums_by_url() -> None:
    one = [{"url": "http://a/v1", "weight": 1.0, "requests": 3, "errors": 1}]
    two = [
        {"url": "http://a/v1", "weight": 1.0, "requests": 2, "errors": 0},
        {"url": "http://b/v1", "weight": 2.0, "requests": 5, "errors": 2},
    ]
    assert add_stats(one, None, two) == [
        {"url": "http://a/v1", "weight": 1.0, "requests": 5, "errors": 1},
        {"url": "http://b/v1", "weight": 2.0, "requests": 5, "errors": 2},
    ]

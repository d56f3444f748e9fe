"""Answers a hostile server bills or inflates: a 200 that is no chat completion but reports the
tokens it used (counted in the run's usage and cost, and against --max-cost, attempt by attempt),
and an answer of more than MAX_ANSWER_BYTES (refused while read, compressed or not, without
holding it)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import run_quiet
from helpers.cli import ref_eval_args

from needlepoint.core.store import read_records
from needlepoint.models import http
from needlepoint.models.simulated import SimulatedServer


class HostileServer(SimulatedServer):
    """Every chat request answered as `mode` says."""

    mode: str = ""
    asked = 0

    async def _chat(self, request: Any) -> Any:
        from aiohttp import web

        self.asked += 1
        if self.mode == "billed":  # an error in a 200, with the usage it was billed for
            body = {"error": {"message": "overloaded"}, "usage": {"prompt_tokens": 1000, "completion_tokens": 1000}}
            return web.json_response(body)
        if self.mode == "huge":  # a length the client can see before reading
            return web.Response(status=200, body=b" " * (http.MAX_ANSWER_BYTES + 1), content_type="application/json")
        stream = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        if self.mode == "bomb":  # a small gzip body that expands past the bound, no length of its own
            stream.headers["Content-Encoding"] = "gzip"
            await stream.prepare(request)
            await stream.write(gzip.compress(b" " * (http.MAX_ANSWER_BYTES + (1 << 20))))
        else:  # "stream": the same bound, chunk after chunk
            await stream.prepare(request)
            for _ in range(http.MAX_ANSWER_BYTES // (8 << 20) + 2):
                await stream.write(b" " * (8 << 20))
        await stream.write_eof()
        return stream


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    with HostileServer(models=("m",)) as server:  # started, and stopped after the test
        yield server


def test_invalid_answers_that_report_usage_are_counted_and_stop_the_budget(
    hostile: HostileServer, ref_release: Any, tmp_path: Path
) -> None:
    """Each attempt reports 1,000 + 1,000 tokens at 1,000 a million each way: 2.0 an attempt, two
    attempts a sample. The first sample's 4.0 is counted; a second would pass --max-cost 5."""
    hostile.mode = "billed"
    out = tmp_path / "run"
    extra = ("--limit", "4", "--concurrency", "1", "--price", "1000,1000", "--max-cost", "5", "--no-report")
    rc, err = run_quiet(ref_eval_args(ref_release[0], hostile.url, out, *extra, model="m", max_retries=1))
    assert rc == 3, err
    assert hostile.asked == 2, "the budget stops the run after the first sample's two billed attempts"
    usage = json.loads((out / "metrics.json").read_text())["usage"]["total"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["cost"]) == (2000, 2000, 4.0)
    assert "--max-cost budget of 5 is spent" in err
    failed = [r for r in read_records(out / "records.jsonl").values() if r["turns"][0].get("attempts")]
    assert len(failed) == 1 and failed[0]["turns"][0].get("usage") == {
        "prompt_tokens": 2000,
        "completion_tokens": 2000,
        "total_tokens": 4000,
    }


@pytest.mark.parametrize("mode", ["huge", "stream", "bomb"])
def test_an_answer_over_the_bound_is_refused_while_read(
    mode: str, hostile: HostileServer, ref_release: Any, tmp_path: Path
) -> None:
    hostile.mode = mode
    out = tmp_path / "run"
    rc, err = run_quiet(ref_eval_args(ref_release[0], hostile.url, out, "--limit", "1", "--no-report", model="m", max_retries=0))
    assert rc == 3, err
    (record,) = read_records(out / "records.jsonl").values()
    assert record["status"] == "backend_error"
    assert f"the answer is over {http.MAX_ANSWER_BYTES >> 20} MiB; not read further" in record["error"]

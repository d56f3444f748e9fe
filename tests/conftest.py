"""Shared fixtures: release folders on disk, simulated model servers on 127.0.0.1, CLI runners."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from needlepoint.benchmarks.ref_adv import RefAdv
from needlepoint.benchmarks.ref_adv.demo import make_rows, write_release
from needlepoint.drawing import render
from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer

REPO = Path(__file__).resolve().parents[1]
TEST_DATA = REPO / "tests" / "data"  # reference data from the benchmarks' releases (tests/data/README.md)
REF_ADV_PREDICTIONS = TEST_DATA / "ref-adv-s" / "qwen25a72b_direct_predictions.jsonl"
MC_BENCH_RELEASE = TEST_DATA / "mc-bench" / "mc-bench_v0.2_val.json"


def in_ci() -> bool:
    """True when the environment says CI (`CI` set and not 0/false/no), as .ci/run sets it."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def extra_module(module: str) -> Any:
    """Import a module of the `test` extra (e.g. pycocotools, the reference a comparison runs
    against): skipped on a developer's machine without it, a failure in CI, where it is installed."""
    try:
        return importlib.import_module(module)
    except ImportError:
        if in_ci():
            pytest.fail(f"{module} is missing: CI installs the test extra (pip install -e '.[test]')", pytrace=False)
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")


# The model names the tests ask for; `serve()` lists them in GET /v1/models unless told otherwise.
TEST_MODELS = (SIMULATED_MODEL_NAME, "sim-model", "m", "org/m", "org/sim-model", "sim/mc-bench", "org/niah-model")


class RecordingServer(SimulatedServer):
    """The simulated model, also keeping each request's headers and JSON body (in arrival order)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []

    async def _chat(self, request: Any) -> Any:
        body = await request.json()  # aiohttp caches the body, so the parent reads it again
        self.requests.append((dict(request.headers), body))
        return await super()._chat(request)


class CountingServer(RecordingServer):
    """Counts the chat requests being answered at once (`most`: the peak). With `hold` > 0 each
    request waits until `hold` are in flight together (or 10 s pass), so that requests sent one
    after another never reach it."""

    hold: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.active = 0
        self.most = 0

    async def _chat(self, request: Any) -> Any:
        self.active += 1
        self.most = max(self.most, self.active)
        try:
            for _ in range(1000 if self.hold else 0):
                if self.most >= self.hold:
                    break
                await asyncio.sleep(0.01)
            return await super()._chat(request)
        finally:
            self.active -= 1


@pytest.fixture
def serve() -> Iterator[Callable[..., RecordingServer]]:
    """Start RecordingServers (SimulatedServer keywords); every one is stopped after the test."""
    started: list[RecordingServer] = []

    def start(**kwargs: Any) -> RecordingServer:
        kwargs.setdefault("models", TEST_MODELS)
        server = RecordingServer(**kwargs).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def prompt_key(sample: Any, bench: RefAdv | None = None) -> str:
    """The text the simulated server looks a sample's answers up by."""
    return (bench or RefAdv(box_format="abs_xyxy")).prompt(sample).messages[0].text


@pytest.fixture(scope="session")
def ref_release(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]]]:
    """A 12-row Ref-Adv-s release in the Hugging Face parquet layout, and its rows."""
    rows = make_rows(12)
    folder = write_release(tmp_path_factory.mktemp("ref_release"), rows)
    return folder, rows


def write_jsonl_release(folder: Path, rows: list[dict[str, Any]], fmt: str = "PNG") -> Path:
    """The JSONL + images folder layout of the same rows; images re-rendered in `fmt`."""
    images = folder / "images"
    images.mkdir(parents=True, exist_ok=True)
    with (folder / "data.jsonl").open("w", encoding="utf-8") as fh:
        for r in rows:
            name = r["file_name"].rsplit(".", 1)[0] + "." + fmt.lower()
            shapes = [(b, "red", "square") for b in r["_boxes"]]
            (images / name).write_bytes(render(int(r["width"]), int(r["height"]), shapes, fmt=fmt))
            public = {k: v for k, v in r.items() if not k.startswith("_") and k != "image"}
            fh.write(json.dumps({**public, "image": name}) + "\n")
    return folder


def small_niah(folder: Path) -> tuple[Path, dict[str, Any], dict[str, list[Any]]]:
    """The MM-NIAH demo set at 6 documents per task (the full demo set is slow on two cores): the
    folder, the run options and the simulated model's script (as the demo's `build` returns them)."""
    import random

    from needlepoint.benchmarks.mm_niah.benchmark import MmNiah
    from needlepoint.benchmarks.mm_niah.demo import simulated_answer, write_release
    from needlepoint.models.simulated import script_key

    write_release(folder, per_task=6)
    bench = MmNiah(split="val")
    rng = random.Random(5)
    script = {
        script_key(bench.prompt(s)): [simulated_answer(s.task, s.answer, s.context_length, rng)] for s in bench.load(folder)
    }
    return folder, {"split": "val"}, script


def run_cli(
    args: list[str], cwd: Path = REPO, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess:
    """`python -m needlepoint.cli ARGS` as a separate process."""
    return subprocess.run(
        [sys.executable, "-m", "needlepoint.cli", *args],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def good_ref_reply(row: dict[str, Any]) -> str:
    """A Ref-Adv-s reply naming the row's ground-truth box, fenced as models write it."""
    fence = "`" * 3
    return f"{fence}json\n" + json.dumps([{"bbox_2d": row["solution"], "label": "target"}]) + f"\n{fence}"


def ref_run_config(data: Path, urls: list[str], out: Path, **kw: Any) -> Any:
    """A quiet Ref-Adv-s RunConfig against local servers (fast retries, no report); `kw` overrides."""
    from needlepoint.config import RunConfig

    settings: dict[str, Any] = {
        "benchmark": "ref_adv_s",
        "data": data,
        "model": "sim-model",
        "api_urls": urls,
        "options": {"box_format": "abs_xyxy"},
        "generation": {"timeout_s": 2.0},
        "concurrency": 4,
        "out": out,
        "max_retries": 2,
        "backoff_base_s": 0.01,
        "show_progress": False,
        "report": False,
    }
    settings.update(kw)
    return RunConfig(**settings)


def report_blob(page: Path) -> dict[str, Any]:
    """The JSON the report page's script renders, read here with plain string handling (the page's
    `\\u003c`-style escapes are JSON escapes)."""
    text = Path(page).read_text(encoding="utf-8")
    tag = '<script type="application/json" id="np-data">'
    assert text.count(tag) == 1
    start = text.index(tag) + len(tag)
    return json.loads(text[start : text.index("</script>", start)])

"""MC-Bench's agentic solver with a real vLLM as the `vlm:` localizer: the tiny random Qwen2.5-VL
boxes each phrase that a simulated reasoner (a local server answering the demo's valid phrases
JSON, which the random model cannot write) names. Every localizer request must be accepted by
vLLM (one image, our prompt, our sampling settings), and each phrase's call must be in the record.

One vLLM server of its own (about 2.4 GB), not the session's pair."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from needlepoint.benchmarks.mc_bench import demo as mc_bench
from needlepoint.benchmarks.mc_bench.agentic_demo import agentic_script
from needlepoint.core.status import DONE
from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer

from .conftest import MODEL_NAME, VllmServer, needlepoint, read_records, start_servers, vllm_counter

pytestmark = pytest.mark.vllm

LIMIT = 4


@pytest.fixture(scope="module")
def localizer(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    server = VllmServer(tiny_model, tmp_path_factory.mktemp("vllm-agentic") / "localizer.log")
    start_servers([server])
    yield server
    server.stop()


def test_agentic_with_vllm_as_localizer(localizer: VllmServer, tmp_path: Path) -> None:
    data, _ = mc_bench.write_release(tmp_path / "mc_bench", pairs=8)
    with SimulatedServer(script=agentic_script(data), default=None) as reasoner:
        out = tmp_path / "run"
        before = vllm_counter(localizer, "vllm:request_success_total")
        proc = needlepoint(
            [
                "eval",
                "mc_bench",
                "--data",
                str(data),
                "--model",
                SIMULATED_MODEL_NAME,
                "--api-url",
                reasoner.url,
                "--solver",
                "agentic",
                "--localizer",
                f"vlm:{MODEL_NAME}",
                "--localizer-url",
                localizer.url,
                "--box-format",
                "abs_xyxy",
                "--limit",
                str(LIMIT),
                "--max-tokens",
                "24",
                "--temperature",
                "0",
                "--out",
                str(out),
                "--no-progress",
            ]
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    records = read_records(out)
    assert len(records) == LIMIT
    calls = 0
    for rec in records:
        assert rec["status"] == DONE, rec
        reasoner_turns = [t for t in rec["turns"] if t["role"] == "model"]
        localizer_turns = [t for t in rec["turns"] if t["role"] == "localizer"]
        named = json.loads(reasoner_turns[-1]["reply"].strip("`").removeprefix("json\n"))
        phrases = [item["phrase"] for image in ("image_1", "image_2") for item in named[image]]
        # one call per phrase, each accepted and answered by vLLM
        assert sorted(t["about"]["phrase"] for t in localizer_turns) == sorted(phrases), rec["id"]
        assert [n["phrase"] for n in rec["solver"]["targets"]] == phrases
        for t in localizer_turns:
            assert t["error"] is None and t["error_kind"] is None, t
            assert t["model"] == MODEL_NAME and t["usage"]["prompt_tokens"] > 0 and t["usage"]["completion_tokens"] > 0, t
            assert t["finish_reason"] in ("stop", "length") and isinstance(t["reply"], str), t
        calls += len(localizer_turns)
    assert calls > LIMIT
    assert vllm_counter(localizer, "vllm:request_success_total") - before == calls
    header = json.loads((out / "run.json").read_text())
    assert header["model_label"] == f"{SIMULATED_MODEL_NAME} + qwen2.5-vl-random (agentic)"

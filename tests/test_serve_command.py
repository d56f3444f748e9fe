"""The servers' command lines and GPU groups (serve/command.py), and the serving flags' refusals."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.cli import one_sentence, run_quiet

from needlepoint.core.errors import DataError
from needlepoint.serve.command import ENGINES, ServeSpec, gpu_groups, launcher, server_command, visible_gpus


def test_the_module_form_names_the_model_by_flag_and_keeps_the_users_flags_last() -> None:
    spec = ServeSpec("model", "vllm", "/w/Qwen", tp=2, args=("--max-model-len", "4096"))
    cmd = server_command(spec, [sys.executable, "-m", "vllm.entrypoints.openai.api_server"], 8123, max_images=7)
    assert cmd[:5] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "/w/Qwen"]
    assert cmd[cmd.index("--port") + 1] == "8123" and cmd[cmd.index("--tensor-parallel-size") + 1] == "2"
    assert cmd[cmd.index("--generation-config") + 1] == "vllm"
    assert json.loads(cmd[cmd.index("--limit-mm-per-prompt") + 1]) == {"image": 7, "video": 0}
    assert cmd[-2:] == ["--max-model-len", "4096"]


def test_flags_the_user_gives_are_not_given_twice() -> None:
    spec = ServeSpec(
        "model", "vllm", "m", args=("--generation-config=auto", "--served-model-name", "mine", "--limit-mm-per-prompt", "{}")
    )
    cmd = server_command(spec, ["vllm", "serve"], 1, max_images=3)
    assert cmd.count("--served-model-name") == 1 and spec.name == "mine"
    assert "--generation-config" not in cmd and "--generation-config=auto" in cmd
    assert cmd.count("--limit-mm-per-prompt") == 1


def test_an_embedding_server_runs_vllms_pooling_runner_without_image_limits() -> None:
    cmd = server_command(ServeSpec("embed", "vllm", "e5", pooling=True), ["vllm", "serve"], 1, max_images=5)
    assert cmd[cmd.index("--runner") + 1] == "pooling" and "--limit-mm-per-prompt" not in cmd


def test_sglang_goes_through_the_same_path() -> None:
    cmd = server_command(ServeSpec("model", "sglang", "m", tp=4), ["python", "-m", "sglang.launch_server"], 9, max_images=2)
    assert cmd[3:5] == ["--model-path", "m"] and cmd[cmd.index("--tp-size") + 1] == "4"
    assert "--generation-config" not in cmd


def test_gpu_groups_are_disjoint_and_refused_when_too_few() -> None:
    specs = [ServeSpec("model", "vllm", "m", tp=2, replicas=2), ServeSpec("localizer", "vllm", "l")]
    assert gpu_groups(specs, ["0", "1", "2", "3", "7"]) == [["0", "1"], ["2", "3"], ["7"]]
    assert gpu_groups(specs, []) == [None, None, None]  # a CPU build: the environment as it is
    with pytest.raises(DataError, match="need 5 GPUs .* but 4 are visible"):
        gpu_groups(specs, ["0", "1", "2", "3"])
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": "2, 4"}) == ["2", "4"]
    assert visible_gpus({"CUDA_VISIBLE_DEVICES": ""}) == []


def test_a_python_as_serve_bin_runs_the_module(tmp_path: Path) -> None:
    assert launcher(ENGINES["vllm"], sys.executable) == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    with pytest.raises(DataError, match="does not exist"):
        launcher(ENGINES["vllm"], str(tmp_path / "nothing"))


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="SGLang is installed here")
def test_sglang_absent_is_one_sentence(ref_release: Any, tmp_path: Path) -> None:
    rc, err = run_quiet(
        ["eval", "ref_adv_s", "--data", str(ref_release[0]), "--model", "m", "--box-format", "abs_xyxy", "--serve", "sglang"]
    )
    assert rc == 2 and "needs SGLang, which is not installed here" in one_sentence(err)


REFUSALS = [
    (["mc_bench", "--solver", "agentic", "--localizer-serve", "vllm"], "give --localizer vlm:MODEL"),
    (["mm_niah", "--solver", "rag", "--embed-serve", "vllm"], "give --embed-model"),
    (["ref_adv_s", "--serve-arg=--max-model-len 9"], "add --serve vllm or drop it"),
    (["ref_adv_s", "--serve", "vllm", "--serve-replicas", "0", "--serve-bin", sys.executable], "must be at least 1"),
]


@pytest.mark.parametrize(("args", "says"), REFUSALS)
def test_serving_flags_refused_in_one_sentence(ref_release: Any, args: list[str], says: str) -> None:
    """Each before any data is read or server started (--data is a release of another benchmark)."""
    box = ["--box-format", "abs_xyxy"] if args[0] != "mm_niah" else []
    rc, err = run_quiet(["eval", args[0], "--data", str(ref_release[0]), "--model", "m", *box, *args[1:]])
    assert rc == 2 and says in one_sentence(err)

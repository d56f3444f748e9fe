"""The Slurm example with NP_SERVE=vllm: each array task runs `needlepoint eval --serve` on the GPUs
it was given, here run as bash with the variables an array task has and the fake `vllm`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from helpers.fake_vllm import all_gone, fake_env, server_pids, write_fake_vllm
from helpers.paths import REPO


def test_an_array_task_starts_and_stops_its_own_servers(ref_release: Any, tmp_path: Path) -> None:
    exe, state = write_fake_vllm(tmp_path)
    runs = tmp_path / "runs"
    env = {
        **os.environ,
        **fake_env(state, gpus="4,5"),
        "SLURM_ARRAY_TASK_ID": "2",
        "NP_SHARDS": "2",
        "SLURM_GPUS_ON_NODE": "2",
        "NP_BENCHMARK": "ref_adv_s",
        "NP_DATA": str(ref_release[0]),
        "NP_MODEL": "org/m",
        "NP_RUNS": str(runs),
        "NP_SERVE": "vllm",
        "NP_SERVE_REPLICAS": "2",
        "NP_PYTHON": sys.executable,
        "NP_EVAL_ARGS": f"--serve-bin {exe} --box-format abs_xyxy --max-retries 0",
    }
    proc = subprocess.run(
        ["bash", str(REPO / "examples" / "slurm" / "shard.sbatch")], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    header = json.loads((runs / "shard-2-of-2" / "run.json").read_text())
    assert header["config"]["shard"] == "2/2"
    assert [s["gpus"] for s in header["config"]["serve"]["servers"]] == [["4"], ["5"]]
    assert (runs / "shard-2-of-2" / "serve" / "model-1.log").exists()
    assert all_gone(server_pids(state)) == []

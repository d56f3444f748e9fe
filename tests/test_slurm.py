"""examples/slurm/ for real: a one-node Slurm cluster on this machine (scripts/slurm-local.sh), a
4-task job array whose tasks each start a server (the simulated model stands in for vLLM), wait for
it and answer their shard, and a dependent merge job; the merged run equals the unsharded run.

Marked `slurm`: the default `pytest` run leaves it out, `.ci/run` runs it as its own step
(`pytest -m slurm`). When the cluster cannot be started the test fails; it never skips.
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import REPO, small_niah, untimed

from needlepoint.core.config import RunConfig
from needlepoint.models.simulated import SIMULATED_MODEL_NAME, SimulatedServer
from needlepoint.run.evaluate import evaluate

pytestmark = pytest.mark.slurm

SCRIPT = REPO / "scripts" / "slurm-local.sh"
SHARDS = 4


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A running one-node cluster (SLURM_CONF in the returned environment); stopped afterwards."""
    if os.geteuid() != 0:
        pytest.fail("the local Slurm cluster runs as root (SlurmUser=root); run `pytest -m slurm` as root, as .ci/run does")
    folder = tmp_path / "cluster"
    env = {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    try:
        started = subprocess.run(["bash", str(SCRIPT), "start", str(folder)], capture_output=True, text=True, timeout=600)
        assert started.returncode == 0, f"the local Slurm cluster did not start: {started.stderr.strip()}"
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True, timeout=60)
        subprocess.run(["bash", str(SCRIPT), "stop", str(folder)], capture_output=True, text=True, timeout=120)


def _free_port_base(count: int) -> int:
    """A base B such that B+1 .. B+count are free ports on 127.0.0.1."""
    rng = random.Random()
    for _ in range(100):
        base = rng.randrange(20000, 60000)
        try:
            for port in range(base + 1, base + count + 1):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
    raise RuntimeError("no free ports")


def _wait(job_ids: list[str], env: dict[str, str], runs: Path, timeout_s: float = 600) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-o", "%i %T %r", "-j", ",".join(job_ids)], env=env, capture_output=True, text=True)
        lines = [line for line in out.stdout.splitlines() if line.strip()]
        if out.returncode == 0 and not lines:
            return
        if any("DependencyNeverSatisfied" in line for line in lines):
            logs = "\n".join(f"--- {p.name}\n{p.read_text()[-2000:]}" for p in sorted((runs / "logs").glob("*.out")))
            pytest.fail(f"a shard job failed, so the merge job cannot run:\n{logs}")
        time.sleep(1)
    pytest.fail(f"the jobs did not finish within {timeout_s:g} s: {out.stdout}")


def test_job_array_and_merge_equal_the_unsharded_run(cluster: dict[str, str], tmp_path: Path) -> None:
    data, options, script = small_niah(tmp_path / "data")
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(script))
    with SimulatedServer(script=script, default=None) as server:
        full = evaluate(
            RunConfig(
                benchmark="mm_niah",
                data=data,
                model=SIMULATED_MODEL_NAME,
                api_urls=[server.url],
                options=options,
                out=tmp_path / "full",
                concurrency=4,
                show_progress=False,
            )
        )

    runs = tmp_path / "runs"
    env = {
        **cluster,
        "NP_BENCHMARK": "mm_niah",
        "NP_DATA": str(data),
        "NP_MODEL": SIMULATED_MODEL_NAME,
        "NP_RUNS": str(runs),
        "NP_EVAL_ARGS": "--split val --concurrency 4",
        "NP_PYTHON": sys.executable,
        "NP_SERVE_CMD": f"{sys.executable} {REPO / 'perf' / 'serve_simulated.py'} --script {script_file} --port {{port}}",
        "NP_PORT_BASE": str(_free_port_base(SHARDS)),
        "NP_HOST": "127.0.0.1",
        "NP_SERVER_WAIT": "120",
        "NP_SBATCH_ARGS": "--cpus-per-task=1",
    }
    submitted = subprocess.run(
        ["bash", str(REPO / "examples" / "slurm" / "submit.sh"), str(SHARDS)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert submitted.returncode == 0, submitted.stderr
    array_id, merge_id = submitted.stdout.split()
    _wait([array_id, merge_id], cluster, runs)

    logs = {p.name: p.read_text() for p in (runs / "logs").glob("*.out")}
    assert sorted(logs) == ["merge.out", *(f"shard-{i}.out" for i in range(1, SHARDS + 1))], logs
    for i in range(1, SHARDS + 1):
        assert f"shard {i}/{SHARDS}" in logs[f"shard-{i}.out"] and "answers" in logs[f"shard-{i}.out"]
        header = json.loads((runs / f"shard-{i}-of-{SHARDS}" / "run.json").read_text())
        assert header["identity"]["shard"] == f"{i}/{SHARDS}" and header["status"] == "complete"
    merged = runs / "merged"
    assert (merged / "metrics.json").exists(), logs["merge.out"]
    assert untimed(json.loads((merged / "metrics.json").read_text())) == untimed(full.metrics)
    assert json.loads((merged / "run.json").read_text())["hash"] == json.loads((full.run_dir / "run.json").read_text())["hash"]
    assert not list((runs / "endpoints").iterdir())  # every task removed its endpoint and stopped its server

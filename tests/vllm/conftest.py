"""Real vLLM servers for the integration suite (`pytest -m vllm tests/vllm`).

The servers run vLLM's CPU build from the venv that `scripts/setup-vllm.sh` makes (`.venv-vllm/`),
serving a tiny random Qwen2.5-VL that `scripts/make_tiny_qwen.py` writes for this session, and, for
the second model family's module, a tiny random InternVL3 (`scripts/make_tiny_internvl.py`). They
listen on free ports of 127.0.0.1 and are stopped when the session (or that module) ends. When vLLM cannot run
(no venv, a server that does not start) the tests fail with the reason; they never skip.

At most two servers run at once (4.7 GB of memory together, measured here).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from needlepoint.core.structured import COMPACT_JSON_FLAGS

REPO = Path(__file__).resolve().parents[2]
VLLM_VENV = Path(os.environ.get("NEEDLEPOINT_VLLM_VENV", REPO / ".venv-vllm"))
VLLM_PYTHON = VLLM_VENV / "bin" / "python"
MODEL_NAME = "tiny/qwen2.5-vl-random"
API_KEY = "sk-needlepoint-vllm-test"  # the key server B requires
MAX_MODEL_LEN = 8192
START_TIMEOUT_S = float(os.environ.get("NEEDLEPOINT_VLLM_START_TIMEOUT", "600"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get_json(url: str, api_key: str | None = None, timeout: float = 5.0) -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    with urllib.request.urlopen(request, timeout=timeout) as resp:
        return json.loads(resp.read())


@dataclass
class VllmServer:
    """One `vllm.entrypoints.openai.api_server` process (and the engine process it starts)."""

    model_dir: Path
    log_path: Path
    api_key: str | None = None
    max_model_len: int = MAX_MODEL_LEN
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    served_name: str = MODEL_NAME
    extra_args: list[str] = field(default_factory=list)  # e.g. vLLM's pooling runner flags

    @property
    def base(self) -> str:
        """The address without `/v1`."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI base URL, as `--api-url` takes it."""
        return f"{self.base}/v1"

    def start(self) -> VllmServer:
        if not VLLM_PYTHON.exists():
            pytest.fail(f"no vLLM environment at {VLLM_VENV}: run `bash scripts/setup-vllm.sh` first", pytrace=False)
        args = [
            str(VLLM_PYTHON),
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            "float32",
            "--max-model-len",
            str(self.max_model_len),
            "--max-num-seqs",
            "16",
        ]
        if self.api_key:
            args += ["--api-key", self.api_key]
        args += self.extra_args
        env = {
            **os.environ,
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": "2",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "CUDA_VISIBLE_DEVICES": "",
        }
        env.pop("OPENAI_API_KEY", None)
        env.pop("VLLM_API_KEY", None)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("wb")
        # Its own process group, so that stop() and kill() reach the engine process too.
        self.process = subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=self.log_path.parent, start_new_session=True
        )
        log.close()
        return self

    def wait_ready(self, deadline: float) -> None:
        """Wait until /v1/models answers; fail with the end of the server log if it never does."""
        assert self.process is not None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                self._fail(f"the vLLM server exited with code {self.process.returncode} while starting")
            try:
                get_json(f"{self.url}/models", self.api_key, timeout=2)
                return
            except (urllib.error.URLError, OSError, ValueError):
                time.sleep(1)
        self._fail(f"the vLLM server did not answer /v1/models within {START_TIMEOUT_S:.0f} s")

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        """SIGKILL the server and its engine: a crash, as a test of failover needs."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.kill()

    def log_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def _fail(self, message: str) -> None:
        tail = self.log_tail()
        self.stop()
        pytest.fail(f"{message}; log {self.log_path}:\n{tail}", pytrace=False)


def start_servers(servers: list[VllmServer]) -> None:
    """Start several servers at once and wait for all of them."""
    for s in servers:
        s.start()
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        for s in servers:
            s.wait_ready(deadline)
    except BaseException:
        for s in servers:
            s.stop()
        raise


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random Qwen2.5-VL, built for this session by the vLLM venv's Python."""
    if not VLLM_PYTHON.exists():
        pytest.fail(f"no vLLM environment at {VLLM_VENV}: run `bash scripts/setup-vllm.sh` first", pytrace=False)
    out = tmp_path_factory.mktemp("tiny-qwen2.5-vl")
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(REPO / "scripts" / "make_tiny_qwen.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if proc.returncode != 0:
        pytest.fail(f"building the tiny model failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return out


@dataclass
class Servers:
    """The session's two servers: `open` needs no key and reads local image files; `keyed` requires
    API_KEY and reads none."""

    open: VllmServer
    keyed: VllmServer

    def ensure_keyed(self) -> VllmServer:
        """Server B, restarted when a test (failover) has killed it."""
        if not self.keyed.alive():
            self.keyed = VllmServer(self.keyed.model_dir, self.keyed.log_path.with_suffix(".restart.log"), api_key=API_KEY)
            start_servers([self.keyed])
        return self.keyed


@pytest.fixture(scope="session")
def servers(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    logs = tmp_path_factory.mktemp("vllm-logs")
    pair = Servers(
        # without free JSON whitespace, as `--serve vllm --structured-output` starts vLLM (test_structured_output.py)
        # it reads image files under the session's temporary folder by their file:// URLs (--local-images)
        open=VllmServer(
            tiny_model,
            logs / "server-a.log",
            extra_args=[*COMPACT_JSON_FLAGS, "--allowed-local-media-path", str(tmp_path_factory.getbasetemp())],
        ),
        keyed=VllmServer(tiny_model, logs / "server-b.log", api_key=API_KEY),
    )
    start_servers([pair.open, pair.keyed])
    yield pair
    pair.open.stop()
    pair.keyed.stop()


def _cli_env(extra: dict[str, str] | None) -> dict[str, str]:
    """The environment of a `needlepoint` process: this checkout's package, no inherited API key."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), os.environ.get("PYTHONPATH", "")) if p)
    return {**env, **(extra or {})}


def needlepoint(args: list[str], env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """`needlepoint ARGS` with the project's Python, as a separate process."""
    command = [sys.executable, "-m", "needlepoint.cli", *args]
    return subprocess.run(command, cwd=REPO, env=_cli_env(env), capture_output=True, text=True, timeout=timeout)


def needlepoint_popen(args: list[str], stdout: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`needlepoint ARGS` in the background; stdout and stderr go to a file."""
    with stdout.open("wb") as fh:
        command = [sys.executable, "-m", "needlepoint.cli", *args]
        return subprocess.Popen(command, cwd=REPO, env=_cli_env(env), stdout=fh, stderr=subprocess.STDOUT)


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "records.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def vllm_counter(server: VllmServer, name: str) -> float:
    """A counter from the server's Prometheus /metrics (summed over its label sets)."""
    request = urllib.request.Request(
        f"{server.base}/metrics", headers={"Authorization": f"Bearer {server.api_key}"} if server.api_key else {}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:  # a busy CPU server answers slowly
        text = resp.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


# A second model family: a tiny random InternVL3 in transformers' native format
# (InternVLForConditionalGeneration, which vLLM serves through its InternS1 code), with the chat
# template the InternVL3-*-hf checkpoints ship (scripts/make_tiny_internvl.py).
INTERNVL_NAME = "tiny/internvl3-random"


def build_tiny_model(script: str, out: Path) -> Path:
    """Run a `scripts/make_tiny_*.py` builder with the vLLM venv's Python into `out`; fail with its output."""
    if not VLLM_PYTHON.exists():
        pytest.fail(f"no vLLM environment at {VLLM_VENV}: run `bash scripts/setup-vllm.sh` first", pytrace=False)
    proc = subprocess.run(
        [str(VLLM_PYTHON), str(REPO / "scripts" / script), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if proc.returncode != 0:
        pytest.fail(f"building the tiny model ({script}) failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}", pytrace=False)
    return out


@pytest.fixture(scope="session")
def tiny_internvl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny random InternVL3, built for this session by the vLLM venv's Python."""
    return build_tiny_model("make_tiny_internvl.py", tmp_path_factory.mktemp("tiny-internvl3"))


@pytest.fixture(scope="module")
def internvl_server(tiny_internvl: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmServer]:
    """A vLLM server of the tiny InternVL3, for the module that asks for it (stopped after it, so
    that it is not left running beside the session's Qwen pair); no key. Eager mode: torch.compile
    of the model would add about 35 s to its start on 2 cores and changes nothing the tests read."""
    server = VllmServer(
        tiny_internvl,
        tmp_path_factory.mktemp("vllm-internvl") / "internvl.log",
        served_name=INTERNVL_NAME,
        extra_args=["--enforce-eager"],
    )
    start_servers([server])
    yield server
    server.stop()

"""The command line of one inference server, and the GPUs each server gets.

One code path for every engine: an `Engine` knows how its server is started (executable or Python
module) and how its flags are spelled; `server_command` adds what needlepoint needs (address,
port, served name, tensor parallelism, vLLM's `--generation-config vllm`, the images a prompt may
hold) unless the user's own `--serve-arg` flags already say it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from needlepoint.core.errors import DataError
from needlepoint.core.structured import COMPACT_JSON_FLAGS

HOST = "127.0.0.1"


@dataclass(frozen=True)
class Engine:
    """How one inference server is started and how its flags are spelled."""

    name: str
    title: str
    executable: str | None  # the command on PATH, e.g. `vllm` (None: module only)
    subcommand: tuple[str, ...]  # after the executable, before the model, e.g. ("serve",)
    module: str  # `python -m MODULE`
    model_flag: str  # how the module form names the model
    tp_flag: str
    name_flag: str = "--served-model-name"
    install: str = ""


ENGINES: dict[str, Engine] = {
    "vllm": Engine(
        "vllm",
        "vLLM",
        "vllm",
        ("serve",),
        "vllm.entrypoints.openai.api_server",
        "--model",
        "--tensor-parallel-size",
        install="pip install vllm",
    ),
    "sglang": Engine(
        "sglang", "SGLang", None, (), "sglang.launch_server", "--model-path", "--tp-size", install="pip install 'sglang[all]'"
    ),
}


@dataclass(frozen=True)
class ServeSpec:
    """What one role's servers are: the engine, the model (path or hub id) and the name it is
    served under, tensor parallelism, replicas, the user's extra flags, the executable, and
    whether it embeds (`pooling`) instead of chatting."""

    role: str  # "model", "localizer", "embed"
    engine: str
    model: str
    tp: int = 1
    replicas: int = 1
    args: tuple[str, ...] = ()
    bin: str | None = None
    pooling: bool = False
    served_name: str | None = None

    @property
    def name(self) -> str:
        """The model name requests use: `--served-model-name` of the extra flags, else `model` as given."""
        return given_flag(self.args, "--served-model-name") or self.served_name or self.model


def given_flag(args: Sequence[str], flag: str) -> str | None:
    """The value of `flag` in a list of command-line arguments (`--f V` or `--f=V`), else None."""
    for i, a in enumerate(args):
        if a == flag and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
    return None


def has_flag(args: Sequence[str], *flags: str) -> bool:
    """Whether any of `flags` is among the arguments (alone or as `--f=V`)."""
    return any(a == f or a.startswith(f + "=") for a in args for f in flags)


def launcher(engine: Engine, bin: str | None) -> list[str]:
    """The start of the server's command: `--serve-bin` (a Python interpreter runs the engine's
    module; anything else is the engine's executable), else the executable on PATH, else this
    Python's module when the package is importable; DataError when the engine is not installed."""
    if bin:
        path = shutil.which(bin) or bin
        if not Path(path).exists():
            raise DataError(
                f"--serve-bin {bin} does not exist; give the {engine.title} executable or a Python that has it installed"
            )
        if Path(path).name.startswith("python"):
            return [path, "-m", engine.module]
        return [path, *engine.subcommand]
    found = shutil.which(engine.executable) if engine.executable else None
    if found and _runs(found):
        return [found, *engine.subcommand]
    if importlib.util.find_spec(engine.module.split(".")[0]) is not None:
        return [sys.executable, "-m", engine.module]
    raise DataError(
        f"--serve {engine.name} needs {engine.title}, which is not installed here ({engine.install}); "
        f"or pass --serve-bin PATH (its executable, or a Python that has it)"
    )


def _runs(executable: str) -> bool:
    """Whether an engine's executable starts at all (the CPU build's `vllm` command does not)."""
    try:
        return subprocess.run([executable, "--version"], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def server_command(
    spec: ServeSpec,
    start: Sequence[str],
    port: int,
    max_images: int | None = None,
    compact_json: bool = False,
    local_media: Path | None = None,
) -> list[str]:
    """The full command of one server of `spec`, after `start` (see `launcher`); `compact_json`
    (--structured-output) drops free whitespace from vLLM's JSON grammars, so that a constrained
    reply has a bounded length (structured.py); `local_media` (--local-images: the folder of the
    run's image files, links resolved) lets a vLLM chat server read them by their file:// URLs."""
    engine = ENGINES[spec.engine]
    module_form = "-m" in start
    args = list(spec.args)
    cmd = [*start, *([engine.model_flag, spec.model] if module_form else [spec.model])]
    cmd += ["--host", HOST, "--port", str(port)]
    if not has_flag(args, engine.name_flag):
        cmd += [engine.name_flag, spec.name]
    if spec.tp != 1 and not has_flag(args, engine.tp_flag, "-tp"):
        cmd += [engine.tp_flag, str(spec.tp)]
    if engine.name == "vllm":
        if not has_flag(args, "--generation-config"):
            cmd += ["--generation-config", "vllm"]  # the model's generation_config.json must not change the authors' sampling
        if spec.pooling and not has_flag(args, "--runner", "--task"):
            cmd += ["--runner", "pooling"]
        if max_images and not spec.pooling and not has_flag(args, "--limit-mm-per-prompt"):
            # no video: a benchmark sends images only, and vLLM then profiles no video inputs at start
            cmd += ["--limit-mm-per-prompt", json.dumps({"image": max_images, "video": 0})]
        if compact_json and not has_flag(args, COMPACT_JSON_FLAGS[0]):
            cmd += list(COMPACT_JSON_FLAGS)
        if local_media is not None and not spec.pooling and not has_flag(args, "--allowed-local-media-path"):
            cmd += ["--allowed-local-media-path", str(local_media)]
    elif engine.name == "sglang" and spec.pooling and not has_flag(args, "--is-embedding"):
        cmd += ["--is-embedding"]
    return cmd + args


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def visible_gpus(env: Mapping[str, str] | None = None) -> list[str] | None:
    """The GPUs this process may use: CUDA_VISIBLE_DEVICES as a scheduler set it, else every GPU
    nvidia-smi lists; None when neither says (no NVIDIA GPU: the servers share the environment)."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        return [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def gpu_groups(specs: Sequence[ServeSpec], gpus: list[str] | None) -> list[list[str] | None]:
    """Disjoint GPU groups, `tp` GPUs a server, for every server of every spec in order; DataError
    when the visible GPUs are too few. Without visible GPUs (None or none: a CPU build) each server
    keeps the environment as it is."""
    wanted = sum(s.tp * s.replicas for s in specs)
    if not gpus:
        return [None] * sum(s.replicas for s in specs)
    if wanted > len(gpus):
        detail = ", ".join(f"{s.role}: {s.replicas} x {s.tp}" for s in specs)
        raise DataError(
            f"the servers need {wanted} GPUs ({detail}) but {len(gpus)} are visible (CUDA_VISIBLE_DEVICES={','.join(gpus)}); "
            "lower --serve-replicas or --serve-tp, or ask the scheduler for more GPUs"
        )
    out: list[list[str] | None] = []
    at = 0
    for s in specs:
        for _ in range(s.replicas):
            out.append(gpus[at : at + s.tp])
            at += s.tp
    return out

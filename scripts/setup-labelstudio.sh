#!/usr/bin/env bash
# The virtual environment of the Label Studio round-trip tests (tests/test_human_labelstudio_server.py):
# the `label-studio` package from PyPI in its own venv inside the clone (.venv-labelstudio/,
# git-ignored), apart from the project's venv (Label Studio pins Django and many other packages).
#
#   bash scripts/setup-labelstudio.sh          # idempotent: a complete venv is left as it is
#
# The tests start it on 127.0.0.1 with SQLite in a temporary data folder, the user and token
# created by `label-studio start --username ... --user-token ...` (no prompt).
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-labelstudio
PY="$VENV/bin/python"
STAMP="$VENV/.needlepoint-labelstudio-ready"
PYTHON=${PYTHON:-python3}
VERSION=${LABEL_STUDIO_VERSION:-1.23.*}

if [ -f "$STAMP" ] && [ -x "$VENV/bin/label-studio" ] && "$PY" -c "import label_studio" >/dev/null 2>&1; then
  echo "setup-labelstudio: $VENV is ready"
  exit 0
fi

# pip's output without the lines that say nothing here (local index folders it skips); its exit status kept.
pip_quiet() {
  "$PY" -m pip "$@" --quiet 2>&1 | { grep -v -e "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}

rm -rf "$VENV"
"$PYTHON" -m venv "$VENV"
pip_quiet install --upgrade pip
pip_quiet install "label-studio==$VERSION"

# Fail here, not in the tests, when Label Studio cannot even start its command.
"$VENV/bin/label-studio" --help >/dev/null 2>&1 || {
  echo "setup-labelstudio: $VENV/bin/label-studio does not run (see: $VENV/bin/label-studio --help)" >&2
  exit 1
}
touch "$STAMP"
echo "setup-labelstudio: $VENV ready (label-studio $("$PY" -c 'import importlib.metadata as m; print(m.version("label-studio"))'))"

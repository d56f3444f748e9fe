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
# A database with every migration applied: Label Studio's first start migrates SQLite for minutes
# on a small machine; the tests copy this file into their data folder and start in seconds.
MIGRATED="$VENV/needlepoint-migrated"
PYTHON=${PYTHON:-python3}
VERSION=${LABEL_STUDIO_VERSION:-1.23.*}

# pip's output without the lines that say nothing here (local index folders it skips); its exit status kept.
pip_quiet() {
  "$PY" -m pip "$@" --quiet 2>&1 | { grep -v -e "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}

if [ -f "$STAMP" ] && [ -x "$VENV/bin/label-studio" ] && "$PY" -c "import label_studio" >/dev/null 2>&1; then
  echo "setup-labelstudio: $VENV is installed"
else
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  pip_quiet install --upgrade pip
  pip_quiet install "label-studio==$VERSION"
  touch "$STAMP"
fi

if [ ! -f "$MIGRATED/label_studio.sqlite3" ]; then
  # `label-studio version` applies the migrations to an empty database, then prints its version.
  # Django's migrations go on from the last one applied, so a failed try (seen once in CI, its
  # cause not kept) is tried again on the same folder before the setup gives up and shows why.
  rm -rf "$MIGRATED.partial"
  mkdir -p "$MIGRATED.partial"
  migrated=false
  for try in 1 2 3; do
    if LABEL_STUDIO_BASE_DATA_DIR="$PWD/$MIGRATED.partial" DJANGO_DB=sqlite LATEST_VERSION_CHECK=false \
      "$VENV/bin/label-studio" version >"$MIGRATED.partial/version.txt" 2>&1; then
      migrated=true
      break
    fi
    echo "setup-labelstudio: migrating the database failed (try $try of 3); the end of its output:" >&2
    tail -15 "$MIGRATED.partial/version.txt" >&2
    df -h "$MIGRATED.partial" >&2 || true
  done
  if [ "$migrated" != true ]; then
    echo "setup-labelstudio: Label Studio cannot migrate its database (see $MIGRATED.partial/version.txt)" >&2
    exit 1
  fi
  rm -rf "$MIGRATED"
  mv "$MIGRATED.partial" "$MIGRATED"
fi
echo "setup-labelstudio: $VENV ready (label-studio $("$PY" -c 'import importlib.metadata as m; print(m.version("label-studio"))'), migrated database in $MIGRATED)"

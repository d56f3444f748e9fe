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
# What pip installs. Label Studio 1.23 asks for `sentry-sdk>=2.16.0` with no upper bound, and
# sentry-sdk 3.0 no longer takes the `send_default_pii` option that Label Studio passes at start
# (label_studio/core/utils/sentry.py): every command then ends in "TypeError: Unknown option
# 'send_default_pii'", the database's migration first. The 2.x line it was released against.
REQUIREMENTS=("label-studio==$VERSION" "sentry-sdk>=2.16.0,<3")

# pip's output without the lines that say nothing here (local index folders it skips); its exit status kept.
pip_quiet() {
  "$PY" -m pip "$@" --quiet 2>&1 | { grep -v -e "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}

# The stamp holds the requirements it was installed from: a venv made from other ones is made anew.
if [ "$(cat "$STAMP" 2>/dev/null)" = "${REQUIREMENTS[*]}" ] && [ -x "$VENV/bin/label-studio" ] \
  && "$PY" -c "import label_studio" >/dev/null 2>&1; then
  echo "setup-labelstudio: $VENV is installed"
else
  rm -rf "$VENV"
  "$PYTHON" -m venv "$VENV"
  pip_quiet install --upgrade pip
  pip_quiet install "${REQUIREMENTS[@]}"
  echo "${REQUIREMENTS[*]}" >"$STAMP"
fi

if [ ! -f "$MIGRATED/label_studio.sqlite3" ]; then
  # `label-studio version` applies the migrations to an empty database, then prints its version.
  rm -rf "$MIGRATED.partial"
  mkdir -p "$MIGRATED.partial"
  LABEL_STUDIO_BASE_DATA_DIR="$PWD/$MIGRATED.partial" DJANGO_DB=sqlite LATEST_VERSION_CHECK=false \
    "$VENV/bin/label-studio" version >"$MIGRATED.partial/version.txt" 2>&1 || {
    echo "setup-labelstudio: Label Studio cannot migrate its database (see $MIGRATED.partial/version.txt); the end of its output:" >&2
    tail -15 "$MIGRATED.partial/version.txt" >&2
    exit 1
  }
  rm -rf "$MIGRATED"
  mv "$MIGRATED.partial" "$MIGRATED"
fi
echo "setup-labelstudio: $VENV ready (label-studio $("$PY" -c 'import importlib.metadata as m; print(m.version("label-studio"))'), migrated database in $MIGRATED)"

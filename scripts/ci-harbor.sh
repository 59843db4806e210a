#!/usr/bin/env bash
# The Harbor interop tier: Harbor task folders read by contagent and by the `harbor`
# package's own TaskConfig must give the same values. `harbor` (Python >= 3.12; it pulls
# LiteLLM and more) lives in a test-only venv outside the clone, made here when missing:
#   CONTAGENT_HARBOR_VENV (default /var/cache/contagent/harbor-venv), HARBOR_VERSION (0.26.0).
# Usage: scripts/ci-harbor.sh [--install-only] [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${CONTAGENT_HARBOR_VENV:-/var/cache/contagent/harbor-venv}"
version="${HARBOR_VERSION:-0.26.0}"

find_python() {
  for candidate in python3.13 python3.12 "$(pyenv root 2>/dev/null)/versions/3.12"*/bin/python3 python3; do
    if command -v "$candidate" >/dev/null 2>&1 &&
      "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then
      command -v "$candidate"
      return
    fi
  done
  echo "ci-harbor: no Python >= 3.12 found (harbor needs one)" >&2
  exit 1
}

if ! "$venv/bin/python" -c "import harbor.models.task.config" 2>/dev/null; then
  python="$(find_python)"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install -q --upgrade pip
  "$venv/bin/pip" install -q "harbor==$version"
fi
if [ "${1:-}" = "--install-only" ]; then
  exit 0
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
CONTAGENT_HARBOR_PYTHON="$venv/bin/python" CONTAGENT_HARBOR_TESTS=1 \
  .venv/bin/python -m pytest -n 0 -m harbor tests/harbor "$@"

#!/usr/bin/env bash
# Browser tier: `contagent view` in a real headless Chromium (Debian's chromium +
# chromium-driver, driven by selenium from the `browser` extra). Idempotent: installs
# only what is missing, then runs the tests marked `browser`.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1 || ! command -v chromedriver >/dev/null 2>&1; then
  echo "ci-browser: installing chromium chromium-driver" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq chromium chromium-driver >/dev/null
fi

python="${PYTHON:-.venv/bin/python}"
if [ ! -x "$python" ]; then
  python3 -m venv .venv
  python=.venv/bin/python
fi
"$python" -m pip install -q -e '.[dev,browser]'

CONTAGENT_BROWSER_TESTS=1 "$python" -m pytest -n 0 -m browser tests/viewer

#!/usr/bin/env bash
# The Ray tier: install the `ray` extra into .venv (idempotent) and run the tests
# marked `ray` on a local multi-node Ray cluster the tests start and stop themselves.
# Needs what the Docker tier needs first (scripts/ensure-docker.sh, scripts/build-images.sh).
set -euo pipefail
cd "$(dirname "$0")/.."

[ -x .venv/bin/python ] || python3 -m venv .venv
.venv/bin/python -c 'import ray' 2>/dev/null || .venv/bin/pip install -q -e '.[dev,ray]'

CONTAGENT_DOCKER_TESTS=1 CONTAGENT_RAY_TESTS=1 .venv/bin/python -m pytest -m ray "$@"

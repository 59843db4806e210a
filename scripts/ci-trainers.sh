#!/usr/bin/env bash
# The trainer tier: TRL's SFTTrainer, prime-rl's renderers and prime-rl's prepare_batch (its files in
# ../shared/prime_rl, CONTAGENT_PRIME_RL) on the exported sample data,
# on CPU (tests/trainers, pytest marker `trainers`). Idempotent: the venv is cached outside
# the clone and rebuilt only when pyproject.toml changes.
# `--install-only` sets the venv up and runs nothing (CI does that while images build).
set -euo pipefail
cd "$(dirname "$0")/.."

# The venv (torch, TRL, transformers: about 1.5 GB) lives outside the clone, under
# $CONTAGENT_CACHE (default /var/cache/contagent), keyed by a hash of pyproject.toml. It
# holds the dependencies only: contagent itself is imported from this clone (PYTHONPATH),
# so one cached venv serves every clone with the same dependencies.
cache="${CONTAGENT_CACHE:-/var/cache/contagent}"
key="$(sha256sum pyproject.toml | cut -c1-16)"
venv="$cache/trainers-venv-$key"
mkdir -p "$cache"
if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    # A CPU build of torch (no CUDA libraries): the +cpu release when the package index
    # offers it, else the default build.
    "$venv/bin/pip" install -q "torch==${CONTAGENT_TORCH_CPU:-2.13.0+cpu}" \
        || "$venv/bin/pip" install -q torch
    "$venv/bin/pip" install -q '.[dev,trainers]'
    "$venv/bin/pip" uninstall -q -y contagent
    touch "$venv/.complete"
fi
[ "${1:-}" = "--install-only" ] && exit 0

export CONTAGENT_TRAINER_TESTS=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$venv/bin/python" -m pytest -q -n 0 -m trainers tests/trainers "$@"

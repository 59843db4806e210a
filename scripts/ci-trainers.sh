#!/usr/bin/env bash
# The trainer tier: TRL's SFTTrainer, prime-rl's renderers and prime-rl's prepare_batch (its files in
# ../shared/prime_rl, CONTAGENT_PRIME_RL) on the exported sample data,
# on CPU (tests/trainers, pytest marker `trainers`). Idempotent: the venv (.venv-trainers)
# is kept and reinstalled only when pyproject.toml changes; pip keeps its wheel cache.
# `--install-only` sets the venv up and runs nothing (CI does that while images build).
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv-trainers
stamp="$venv/.installed-for"
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$venv/bin/pip" install -q --upgrade pip
    # A CPU build of torch (no CUDA libraries): the +cpu release when the package index
    # offers it, else the default build.
    "$venv/bin/pip" install -q "torch==${CONTAGENT_TORCH_CPU:-2.13.0+cpu}" \
        || "$venv/bin/pip" install -q torch
    "$venv/bin/pip" install -q -e '.[dev,trainers]'
    echo "$want" > "$stamp"
fi
[ "${1:-}" = "--install-only" ] && exit 0

export CONTAGENT_TRAINER_TESTS=1 HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
exec "$venv/bin/python" -m pytest -q -n 0 -m trainers tests/trainers "$@"

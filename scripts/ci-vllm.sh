#!/usr/bin/env bash
# The vLLM tier: a real vLLM (its CPU build) serving a tiny, locally built Qwen3-architecture
# model, driven through `contagent proxy` (tests/vllm, pytest marker `vllm`).
#
# The server's venv is heavy (about 3.4 GB), so it lives outside the clone, under
# $CONTAGENT_CACHE (default /var/cache/contagent), keyed by a hash of
# tests/vllm/requirements.txt and constraints.txt (every package's version); the tiny model
# and tokenizer are cached beside it, keyed by a hash of the script that builds them. The
# tests themselves run in the project's venv and start the server (and the transformers
# recompute) with the cached venv's Python.
#   --install-only   build the venv and the model, run nothing (CI does this in the background)
# Any other arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."

cache="${CONTAGENT_CACHE:-/var/cache/contagent}"
reqs=tests/vllm/requirements.txt
pins=tests/vllm/constraints.txt
key="$(cat "$reqs" "$pins" | sha256sum | cut -c1-16)"
venv="$cache/vllm-venv-$key"
mkdir -p "$cache"

if [ ! -f "$venv/.complete" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q --upgrade pip
    "$venv/bin/pip" install -q -r "$reqs" -c "$pins"
    # pip pulls CUDA-linked builds of these from PyPI; transformers' Qwen3 class then fails to
    # import (`operator torchvision::nms does not exist`). vLLM needs them only for
    # multimodal models.
    "$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec || true
    touch "$venv/.complete"
fi
py="$venv/bin/python"

builder=tests/vllm/build_model.py
mkey="$(cat "$builder" "$reqs" | sha256sum | cut -c1-16)"
model="$cache/vllm-model-$mkey"
if [ ! -f "$model/.complete" ]; then
    rm -rf "$model"
    HF_HUB_OFFLINE=1 "$py" "$builder" "$model"
    touch "$model/.complete"
fi
[ "${1:-}" = "--install-only" ] && exit 0

export CONTAGENT_VLLM_TESTS=1 CONTAGENT_VLLM_PYTHON="$py" CONTAGENT_VLLM_MODEL="$model"
pybin="${CONTAGENT_PYTHON:-.venv/bin/python}"
exec "$pybin" -m pytest -q -n 0 -m vllm tests/vllm "$@"

#!/usr/bin/env bash
# Build what the Docker tests need on a machine without a container registry:
#   1. the offline Debian trixie base image (debootstrap; skipped when it exists),
#   2. one runner image per agent FROM it, trusting the host's CA bundle for pip/npm
#      (each skipped when an image built from the same docker/ files exists).
# The agents: OpenHands (docker/Dockerfile) and one per docker/agents/<agent>.Dockerfile, whose
# image is contagent-runner-<agent>:latest (tests/agents checks each agent module says so).
# CONTAGENT_AGENTS picks some (default: all of them).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE="${CONTAGENT_BASE_IMAGE:-contagent-base:trixie}"
RUNNER_IMAGE="${CONTAGENT_RUNNER_IMAGE:-contagent-runner:latest}"
CA_BUNDLE="${CONTAGENT_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"
AGENTS="${CONTAGENT_AGENTS:-openhands $(cd docker/agents && ls -- *.Dockerfile | sed 's/\.Dockerfile$//' | tr '\n' ' ')}"

scripts/build-offline-base.sh "$BASE_IMAGE"

files_hash() {  # the content hash of the given files/folders (the CA bundle is not part of it)
  find "$@" -type f ! -path 'docker/ca-bundle/*' ! -path 'docker/agents/*' -print0 \
    | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16
}

build() {  # build IMAGE DOCKERFILE HASH: rebuilt when HASH differs from the image's label
  local image="$1" dockerfile="$2" hash="$3"
  local current ctx
  current="$(docker image inspect -f '{{ index .Config.Labels "contagent.docker-hash" }}' "$image" 2>/dev/null || true)"
  if [[ "$current" == "$hash" ]]; then
    echo "build-images: $image is up to date, skipping" >&2
    return 0
  fi
  ctx="$(mktemp -d /tmp/contagent-build.XXXXXX)"
  cp -r docker/. "$ctx/"
  rm -f "$ctx/ca-bundle/ca.crt"
  if [[ -s "$CA_BUNDLE" ]]; then
    cp "$CA_BUNDLE" "$ctx/ca-bundle/ca.crt"
  fi
  echo "build-images: building $image from $BASE_IMAGE" >&2
  local t0=$SECONDS
  docker build -q \
    --build-arg BASE_IMAGE="$BASE_IMAGE" \
    --label contagent.docker-hash="$hash" \
    -f "$ctx/$dockerfile" \
    -t "$image" "$ctx" >/dev/null || { rm -rf "$ctx"; return 1; }
  rm -rf "$ctx"
  echo "build-images: built $image in $((SECONDS - t0)) s" >&2
}

# OpenHands first (the other Docker tests need it); the other agents' images then build side
# by side: their time is mostly downloading (pip, npm), not the two cores.
pids=()
for agent in $AGENTS; do
  case "$agent" in
    openhands) build "$RUNNER_IMAGE" Dockerfile "$(files_hash docker)" ;;
    *)
      [[ -f "docker/agents/$agent.Dockerfile" ]] || { echo "build-images: unknown agent $agent" >&2; exit 2; }
      # its own files (docker/agents/<agent>.*) and the shared entrypoint
      build "contagent-runner-$agent:latest" "agents/$agent.Dockerfile" \
        "$(cat docker/agents/"$agent".* | sha256sum | cut -c1-8)$(files_hash docker/entrypoint.sh | cut -c1-8)" &
      pids+=($!) ;;
  esac
done
failed=0
for pid in "${pids[@]}"; do
  wait "$pid" || failed=1
done
exit "$failed"

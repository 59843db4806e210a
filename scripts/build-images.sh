#!/usr/bin/env bash
# Build what the Docker tests need on a machine without a container registry:
#   1. the offline Debian trixie base image (debootstrap; skipped when it exists),
#   2. the runner image FROM it, trusting the host's CA bundle for pip
#      (skipped when an image built from the same docker/ files exists).
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_IMAGE="${CONTAGENT_BASE_IMAGE:-contagent-base:trixie}"
RUNNER_IMAGE="${CONTAGENT_RUNNER_IMAGE:-contagent-runner:latest}"
CA_BUNDLE="${CONTAGENT_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}"

scripts/build-offline-base.sh "$BASE_IMAGE"

# The image is stale when any file of docker/ changed (the CA bundle is not part of it).
hash="$(find docker -type f ! -path 'docker/ca-bundle/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)"
current="$(docker image inspect -f '{{ index .Config.Labels "contagent.docker-hash" }}' "$RUNNER_IMAGE" 2>/dev/null || true)"
if [[ "$current" == "$hash" ]]; then
  echo "build-images: $RUNNER_IMAGE is up to date, skipping" >&2
  exit 0
fi

ctx="$(mktemp -d /tmp/contagent-build.XXXXXX)"
trap 'rm -rf "$ctx"' EXIT
cp -r docker/. "$ctx/"
rm -f "$ctx/ca-bundle/ca.crt"
if [[ -s "$CA_BUNDLE" ]]; then
  cp "$CA_BUNDLE" "$ctx/ca-bundle/ca.crt"
fi
echo "build-images: building $RUNNER_IMAGE from $BASE_IMAGE" >&2
docker build -q \
  --build-arg BASE_IMAGE="$BASE_IMAGE" \
  --label contagent.docker-hash="$hash" \
  -t "$RUNNER_IMAGE" "$ctx" >/dev/null
echo "build-images: built $RUNNER_IMAGE" >&2

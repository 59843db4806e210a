#!/usr/bin/env bash
# Make sure a Docker engine answers. On CI machines only the client is installed
# and there is no systemd: install Debian's engine and start dockerd ourselves.
set -euo pipefail

if docker info >/dev/null 2>&1; then
  exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
  echo "ensure-docker: installing docker.io" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq docker.io >/dev/null
fi

log="${DOCKERD_LOG:-/tmp/contagent-dockerd.log}"
echo "ensure-docker: starting dockerd (log: $log)" >&2
nohup dockerd >"$log" 2>&1 &
echo $! > /tmp/contagent-dockerd.pid

for _ in $(seq 1 60); do
  if docker info >/dev/null 2>&1; then
    echo "ensure-docker: engine is up" >&2
    exit 0
  fi
  sleep 1
done
echo "ensure-docker: dockerd did not answer within 60 s; see $log" >&2
exit 1

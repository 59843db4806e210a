#!/usr/bin/env bash
# Build a Debian trixie base image (Python 3.13) without a container registry:
# debootstrap a minimal root file system from the machine's own Debian mirror and
# `docker import` it. Skipped when the image already exists.
#
# The mirror is read from the machine's apt configuration, never written here.
set -euo pipefail

IMAGE="${1:-${CONTAGENT_BASE_IMAGE:-contagent-base:trixie}}"
SUITE="${SUITE:-trixie}"
PACKAGES="python3,python3-venv,python3-pip,ca-certificates,bash,procps,tmux,git,curl"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "build-offline-base: $IMAGE exists, skipping" >&2
  exit 0
fi

if [[ -z "${MIRROR:-}" ]]; then
  src=/etc/apt/sources.list.d/debian.sources
  if [[ -f "$src" ]]; then
    MIRROR="$(awk '/^URIs:/ {print $2; exit}' "$src")"
  fi
fi
if [[ -z "${MIRROR:-}" && -f /etc/apt/sources.list ]]; then
  MIRROR="$(awk '/^deb / {print $2; exit}' /etc/apt/sources.list)"
fi
if [[ -z "${MIRROR:-}" ]]; then
  echo "build-offline-base: no Debian mirror found in apt configuration; set MIRROR" >&2
  exit 1
fi

if ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq debootstrap >/dev/null
fi

rootfs="$(mktemp -d /tmp/contagent-rootfs.XXXXXX)"
trap 'rm -rf "$rootfs"' EXIT
echo "build-offline-base: debootstrap $SUITE into $rootfs" >&2
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$MIRROR" >/tmp/contagent-debootstrap.log 2>&1 \
  || { tail -20 /tmp/contagent-debootstrap.log >&2; exit 1; }
# Keep the image small: package caches are not needed at run time.
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["/bin/bash"]' \
  - "$IMAGE" >/dev/null
echo "build-offline-base: built $IMAGE" >&2

#!/usr/bin/env bash
# A fresh secret per rollout, so that a pass can only come from reading it.
set -euo pipefail
mkdir -p ~/workspace
secret="s-$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
printf '%s' "$secret" > ~/workspace/secret.txt
# Kept outside the workspace so that evaluation does not depend on the agent leaving it alone.
printf '%s' "$secret" > /root/.expected_secret
chmod 600 /root/.expected_secret
echo "setup: wrote ~/workspace/secret.txt"

#!/usr/bin/env bash
# Pass when ~/workspace/result.txt holds exactly "pass:<secret>" (one trailing newline tolerated).
set -uo pipefail
expected="pass:$(cat /root/.expected_secret)"
if [[ ! -f ~/workspace/result.txt ]]; then
  echo "FAIL: ~/workspace/result.txt does not exist"
  exit 1
fi
actual="$(cat ~/workspace/result.txt)"
if [[ "$actual" == "$expected" ]]; then
  echo "PASS: result.txt matches"
  exit 0
fi
echo "FAIL: expected '$expected', got '$actual'"
exit 1

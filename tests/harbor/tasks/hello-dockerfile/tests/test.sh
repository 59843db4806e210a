#!/bin/bash
# 1 when /app/hello.txt holds the greeting and nothing of the agent phase saw the tests.
sleep 1  # a process left over from the agent phase would have written /app/leak by now
if [ -e /app/leak ]; then echo "the agent phase could read /tests: $(cat /app/leak)"; echo 0 > /logs/verifier/reward.txt; exit 0; fi
if [ "$(cat /app/hello.txt 2>/dev/null)" = "$GREETING" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi

#!/bin/bash
# Half credit for any answer, full marks only with the mode the task's env set.
answer=$(cat /work/answer.txt 2>/dev/null)
if [ -n "$answer" ] && [ "$TASK_MODE" = "graded" ]; then
  printf '{"reward": 0.5, "format": 1, "answer_len": %d}\n' "${#answer}" > /logs/verifier/reward.json
else
  printf '{"reward": 0, "format": 0}\n' > /logs/verifier/reward.json
fi

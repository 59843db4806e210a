#!/bin/sh
# Runner container entrypoint. `contagent run` copies its in-container program
# (contagent/runner/lifecycle/agent_main.py) and the rollout's settings into /contagent
# before starting the container, so the image only needs the pinned SDK.
set -e
if [ "$#" -eq 0 ]; then
  exec /opt/venv/bin/python /contagent/agent_main.py /contagent/settings.json
fi
exec "$@"

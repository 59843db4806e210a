"""The program that runs *inside* the runner container (any Python 3 of the image).

``contagent run`` copies this file, a ``settings.json`` and the agent's own
files into ``/contagent`` and starts the container. It is self-contained (no
``contagent`` import) and knows no agent: the agent phase runs the command
the agent's module chose (:class:`contagent.agents.base.Launch`), with its
stdout in ``out/agent.stdout`` and its stderr on the container's.

Phases: ``setup.sh``, the agent, ``evaluate.sh``. After each phase
``outcome.json`` is rewritten (temp + rename) so that a rollout killed at its
timeout still leaves what it had done.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def _run(argv: list[str], cwd: Path, log: Path, *, stderr: int | None, env: dict[str, str]) -> int:
    """``argv``'s exit code, its stdout in ``log``; ``stderr=None`` leaves stderr on the container's."""
    # no timeout here: the host kills the whole container at the rollout's timeout
    with log.open("wb") as out:
        try:
            return subprocess.run(
                argv,
                cwd=cwd,
                stdout=out,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **env},
                check=False,
            ).returncode
        except OSError as exc:  # e.g. the agent is not installed in this image
            print(f"cannot start {argv[0]}: {exc}", file=sys.stderr)
            return 127


def main(argv: list[str]) -> int:
    settings = json.loads(Path(argv[1]).read_text())
    out = Path(settings["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    workspace = Path(settings["workspace"])
    outcome: dict[str, Any] = {"exit_codes": {}, "timings": {}}
    outcome_path = out / "outcome.json"
    _write_json(outcome_path, outcome)

    def phase(name: str, run: Callable[[], int]) -> int:
        """Run one phase; its exit code and duration reach the host even if a later one hangs."""
        t0 = time.monotonic()
        rc = run()
        outcome["exit_codes"][name] = rc
        outcome["timings"][f"{name}_s"] = time.monotonic() - t0
        _write_json(outcome_path, outcome)
        return rc

    def script(name: str) -> Callable[[], int]:
        path = settings[f"{name}_script"]
        log = out / f"{name}.log"
        return lambda: _run(["bash", path], workspace, log, stderr=subprocess.STDOUT, env={})

    def agent() -> int:
        launch = settings["launch"]
        return _run(launch["argv"], workspace, out / "agent.stdout", stderr=None, env=launch["env"])

    if phase("setup", script("setup")) != 0:
        return 0
    phase("agent", agent)
    phase("evaluate", script("evaluate"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

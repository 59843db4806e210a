"""mini-swe-agent headless: runs *inside* its runner image (``/opt/venv``).

Self-contained (no ``contagent`` import). Reads ``mini.json`` (written by
:mod:`contagent.agents.mini_swe_agent`), runs the stock ``mini.yaml`` prompts
with the default (non-interactive) agent and the local environment, saves the
trajectory (one JSON document) and a short report in the out folder.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

#: mini-swe-agent's exit statuses, in the runner's stop_condition words
STOPS = {"Submitted": "finished", "LimitsExceeded": "max_iterations", "TimeExceeded": "timeout"}


def run(cfg: dict[str, Any], out: Path, report: dict[str, Any]) -> None:
    os.environ["MSWEA_COST_TRACKING"] = "ignore_errors"  # a local model has no price
    os.environ["MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT"] = str(int(cfg["num_retries"]) + 1)
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import yaml
    from minisweagent import __version__
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_path
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    report["version"] = __version__
    conf = yaml.safe_load(get_config_path("mini.yaml").read_text())
    agent_conf = {k: v for k, v in conf["agent"].items() if k not in ("mode", "confirm_exit")}
    agent_conf.update(
        step_limit=int(cfg["max_iterations"]),
        cost_limit=0,
        output_path=out / "mini.traj.json",
    )
    model_conf = dict(conf["model"])
    model_conf.update(model_name=cfg["model"], model_kwargs=cfg["model_kwargs"])
    model = LitellmModel(**model_conf)
    env = LocalEnvironment(**{**conf.get("environment", {}), "cwd": cfg["workspace"]})
    agent = DefaultAgent(model, env, **agent_conf)
    result = agent.run(cfg["task"])
    status = str(result.get("exit_status", ""))
    report["stop_condition"] = STOPS.get(status, status or None)
    report["iterations"] = agent.n_calls


def main(argv: list[str]) -> int:
    cfg = json.loads(Path(argv[1]).read_text())
    out = Path(cfg["out_dir"])
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {}
    code = 0
    try:
        run(cfg, out, report)
    except Exception as exc:  # the agent's failure is data, reported to the host
        report["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
        traceback.print_exc(file=sys.stderr)
        code = 1
    (out / "mini-report.json").write_text(json.dumps(report, indent=2))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))

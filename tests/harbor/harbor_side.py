"""Run by the harbor test venv's Python (not by the test suite): every task folder given
on the command line read with Harbor's own ``TaskConfig``, printed as one JSON object.

Only the ``harbor`` package is imported here; contagent is never on this path.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from harbor.models.task.config import TaskConfig
from harbor.utils.env import resolve_env_vars


def _mode(policy: object, fallback: object) -> str:
    mode = getattr(policy, "network_mode", None) if policy is not None else None
    return (mode or fallback).value  # type: ignore[union-attr]


def read(root: Path) -> dict[str, object]:
    cfg = TaskConfig.model_validate_toml((root / "task.toml").read_text())
    env = cfg.environment
    hc = env.healthcheck
    return {
        "name": cfg.task.name.rsplit("/", 1)[-1] if cfg.task else root.name,
        "agent_timeout_s": cfg.agent.timeout_sec,
        "verifier_timeout_s": cfg.verifier.timeout_sec,
        "build_timeout_s": env.build_timeout_sec,
        "cpus": env.cpus,
        "memory_mb": env.memory_mb,
        "storage_mb": env.storage_mb,
        "docker_image": env.docker_image,
        "workdir": env.workdir,
        "skills_dir": env.skills_dir,
        "env": resolve_env_vars(env.env),
        "verifier_env": resolve_env_vars(cfg.verifier.env),
        "solution_env": resolve_env_vars(cfg.solution.env),
        "agent_user": cfg.agent.user,
        "verifier_user": cfg.verifier.user,
        "healthcheck": None if hc is None else [hc.command, hc.interval_sec, hc.retries],
        "agent_network": _mode(cfg.agent.explicit_phase_policy(), env.network_mode),
        "verifier_network": _mode(cfg.verifier.explicit_phase_policy(), env.network_mode),
        "gpus": env.gpus,
        "mcp_servers": len(env.mcp_servers),
        "steps": len(cfg.steps or []),
    }


if __name__ == "__main__":
    print(json.dumps({Path(p).name: read(Path(p)) for p in sys.argv[1:]}))

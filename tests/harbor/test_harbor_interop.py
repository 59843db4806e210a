"""contagent's reading of Harbor tasks against Harbor's own ``TaskConfig`` (the ``harbor``
package in a test-only venv; scripts/ci-harbor.sh makes it and runs these tests)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from contagent.errors import ContagentError
from contagent.runner.tasks.harbor_task import load_harbor_task
from tests.harbor.helpers import TASKS, write_task

pytestmark = pytest.mark.harbor

HARBOR_PYTHON = Path(
    os.environ.get("CONTAGENT_HARBOR_PYTHON", "/var/cache/contagent/harbor-venv/bin/python")
)
HARBOR_SIDE = Path(__file__).with_name("harbor_side.py")
#: valid Harbor tasks whose values contagent refuses, and the field the refusal names
REFUSED = {
    "gpu": ("[environment]\ngpus = 2\n", "gpus = 2"),
    "steps": ('[[steps]]\nname = "one"\n', "[[steps]]"),
    "mcp": ('[[environment.mcp_servers]]\nname = "m"\nurl = "http://m:1/sse"\n', "mcp_servers"),
}


def harbor_reads(*roots: Path) -> dict[str, dict[str, Any]]:
    if not HARBOR_PYTHON.is_file():
        pytest.fail(f"{HARBOR_PYTHON} missing: run scripts/ci-harbor.sh (what .ci/run does)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONTAGENT_TEST_")}
    proc = subprocess.run(
        [str(HARBOR_PYTHON), str(HARBOR_SIDE), *map(str, roots)],
        capture_output=True,
        text=True,
        check=False,
        env={**env, "PYTHONPATH": ""},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result: dict[str, dict[str, Any]] = json.loads(proc.stdout)
    return result


def test_both_sides_read_the_same_values_of_every_fixture() -> None:
    roots = sorted(p for p in TASKS.iterdir() if (p / "task.toml").is_file())
    theirs = harbor_reads(*roots)
    assert set(theirs) == {p.name for p in roots}
    for root in roots:
        want = theirs[root.name]
        try:
            ours = load_harbor_task(root)
        except ContagentError as exc:  # only a value contagent refuses, named in the reason
            assert root.name == "needs-gpu" and want["gpus"] == 1
            assert "gpus = 1" in str(exc)
            continue
        hc = ours.healthcheck
        got = {
            "name": ours.name,
            "agent_timeout_s": ours.agent_timeout_s,
            "verifier_timeout_s": ours.verifier_timeout_s,
            "build_timeout_s": ours.build_timeout_s,
            "cpus": ours.cpus,
            "memory_mb": ours.memory_mb,
            "storage_mb": ours.storage_mb,
            "docker_image": ours.docker_image,
            "workdir": ours.workdir,
            "skills_dir": ours.skills_path,
            "env": ours.env,
            "verifier_env": ours.verifier_env,
            "solution_env": ours.solution_env,
            "agent_user": ours.agent_user,
            "verifier_user": ours.verifier_user,
            "healthcheck": None if hc is None else [hc.command, hc.interval_s, hc.retries],
            "agent_network": ours.agent_network,
            "verifier_network": ours.verifier_network,
        }
        assert got == {k: want[k] for k in got}, root.name
        assert not want["gpus"] and want["mcp_servers"] == 0 and want["steps"] == 0


def test_harbor_accepts_each_task_contagent_refuses_and_reads_the_value_named(
    tmp_path: Path,
) -> None:
    roots = [write_task(tmp_path / name, toml) for name, (toml, _) in REFUSED.items()]
    theirs = harbor_reads(*roots)
    assert theirs["gpu"]["gpus"] == 2
    assert theirs["steps"]["steps"] == 1 and theirs["mcp"]["mcp_servers"] == 1
    for root in roots:
        with pytest.raises(ContagentError, match=REFUSED[root.name][1].replace("[", r"\[")):
            load_harbor_task(root)

"""`--ray-address` and `--rollout-cpus` without a cluster: Ray stays optional."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.helpers import REPO, cli

_NO_RAY = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'ray' or name.startswith('ray.'):\n"
    "            raise ImportError('No module named ray (blocked by the test)')\n"
    "sys.meta_path.insert(0, Block())\n"
)


def test_the_local_runner_never_imports_ray(tmp_path: Path) -> None:
    code = _NO_RAY + (
        "import contagent.cli, contagent.cli.run_cmd, contagent.runner.run\n"
        "import contagent.runner.executors.executor, contagent.runner.executors.local_executor\n"
        "from contagent.runner.config import LlmOptions, RunConfig\n"
        "from contagent.runner.run import open_executor\n"
        "assert 'ray' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0, proc.stderr


def test_ray_address_without_ray_installed_is_one_line(tmp_path: Path) -> None:
    code = _NO_RAY + "from contagent.cli import main\nsys.argv[0] = 'contagent'\nmain()\n"
    args = ["run", "--served-model-name", "m", "--ray-address", "127.0.0.1:1"]
    args += ["--experiment", "exp_001", "--log-dir", str(tmp_path / "logs")]
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    [line] = proc.stderr.splitlines()
    assert "--ray-address needs Ray: pip install 'contagent[ray]'" in line


def test_rollout_cpus_must_be_positive(tmp_path: Path) -> None:
    proc = cli("run", "--served-model-name", "m", "--rollout-cpus", "0", "--ray-address", "auto")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "--rollout-cpus must be positive" in proc.stderr

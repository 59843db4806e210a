"""Fixtures for the viewer: an export of the samples, a run's log dir, a served viewer."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from contagent._loopthread import InThread
from contagent.exporters.export import ExportOptions, export
from contagent.layout import RunPaths
from contagent.testing.rollouts import RolloutBuilder, assistant, call
from contagent.testing.samples import PASSED, TASK
from contagent.viewer.app import Viewer

SCRIPT = "<script>window.__xss = 1</script>"
XSS_ID = "xss_probe"


def xss_rollout(root: Path, rollout_id: str = XSS_ID) -> Path:
    """A rollout whose tool output, reasoning and experiment name carry markup."""
    b = RolloutBuilder(rollout_id, TASK)
    c1 = call("call_1", "terminal", command="cat notes.html")
    b.step(assistant("Reading <b>notes</b>.", c1, reasoning=f"think {SCRIPT}"))
    b.tool_output("call_1", "terminal", f"{SCRIPT}\n<img src=x onerror=window.__xss=2>")
    b.step(assistant(None, call("call_2", "finish", message="done")))
    return b.write(root, {**PASSED, "experiment": f"exp_{SCRIPT}"}).root


@pytest.fixture()
def export_dir(samples: Path, tmp_path: Path) -> Path:
    """``contagent export`` of the samples (and the markup probe) with --filter all."""
    xss_rollout(samples)
    out = tmp_path / "out"
    export([samples], out, ExportOptions(filter="all"))
    return out


@pytest.fixture()
def run_dir(samples: Path, tmp_path: Path) -> Path:
    """A run's --log-dir: rollouts/<name>/ plus the runner's <name>.log/.result/.err."""
    run = RunPaths(tmp_path / "logs")
    shutil.copytree(samples, run.rollouts_dir)
    (run.rollouts_dir / "expected.json").unlink()
    xss_rollout(run.rollouts_dir)
    for name in ("clean_pass", XSS_ID):
        run.log(name).write_text(f'{{"event": "start"}}\n{{"event": "{SCRIPT}"}}\n')
        run.result_text(name).write_text(f"evaluate.sh: pass\nverdict: passed {SCRIPT}\n")
        run.err(name).write_text("runner stderr line\n")
    return run.root


def serve(path: Path) -> InThread[Viewer]:
    return InThread(Viewer(path, "127.0.0.1", 0), "viewer")


@pytest.fixture()
def export_viewer(export_dir: Path) -> Iterator[Viewer]:
    with serve(export_dir) as running:
        yield running.service


@pytest.fixture()
def run_viewer(run_dir: Path) -> Iterator[Viewer]:
    with serve(run_dir) as running:
        yield running.service

"""Fixtures for the viewer: an export of the samples, a run's log dir, a served viewer."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from contagent.export.exporter import ExportOptions, export
from contagent.layout import RunPaths
from contagent.viewer.app import Viewer
from tests.viewer.helpers import SCRIPT, XSS_ID, serve, xss_rollout


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


@pytest.fixture()
def export_viewer(export_dir: Path) -> Iterator[Viewer]:
    with serve(export_dir) as running:
        yield running.service


@pytest.fixture()
def run_viewer(run_dir: Path) -> Iterator[Viewer]:
    with serve(run_dir) as running:
        yield running.service

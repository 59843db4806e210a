"""A run whose Docker engine restarts mid-run, and one whose --log-dir fills up: each ends
on its own in one line, claims no verdict it could not record, and --resume completes it."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import docker
import pytest

from contagent.layout import RolloutPaths
from contagent.rawlog.read import read_exchanges
from contagent.rawlog.result import RolloutResult
from contagent.runner import docker_ops
from contagent.testing.llm_stub import Reply
from contagent.testing.players import mini
from tests.e2e import private_engine
from tests.e2e.stopping import AGENT_IMAGE, RunProcess, left, run_args, wait_for_calls

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def engine(docker_client: Any) -> Iterator[private_engine.PrivateEngine]:
    why = private_engine.usable()
    if why is not None:
        pytest.skip(why)
    host_bridge = Path("/sys/class/net/docker0")
    had_bridge = host_bridge.exists()
    eng = private_engine.PrivateEngine()
    eng.start()
    try:
        eng.load(docker_client, AGENT_IMAGE)
        yield eng
    finally:
        eng.stop()
    # the host engine's containers and builds need their bridge after this module
    assert host_bridge.exists() or not had_bridge, "the private engine removed docker0"


def _result(log_dir: Path, name: str) -> RolloutResult | None:
    path = log_dir / "rollouts" / name / "result.json"
    return RolloutResult.model_validate_json(path.read_bytes()) if path.exists() else None


def test_engine_restarted_mid_run_ends_the_run_and_resume_completes_it(
    tmp_path: Path, stub_factory: Any, owner: str, engine: private_engine.PrivateEngine
) -> None:
    moves: dict[str, Any] = {"play": lambda req: Reply(content="slow", delay=300)}
    stub = stub_factory(lambda req: moves["play"](req))
    logs, rid = tmp_path / "logs", f"t-{uuid.uuid4().hex[:10]}"
    env = {"DOCKER_HOST": private_engine.URL}
    client = docker.DockerClient(base_url=private_engine.URL, timeout=60)
    try:
        run = RunProcess(run_args(stub.url, logs, rid, "--repeat", "2"), owner, env)
        wait_for_calls(stub, 1)
        engine.stop()
        engine.start()
        assert run.wait(120) == 1, run.stderr
        assert "Traceback" not in run.stderr
        end = [ln for ln in run.stderr.splitlines() if ln.startswith("contagent: error:")]
        assert len(end) == 1 and "run stopped: the Docker engine stopped answering" in end[0]
        first = _result(logs, "exp_001")
        assert first is not None and first.status == "infra_error"
        assert first.stop_condition == "docker_engine"
        assert "Docker engine" in (first.error or "")
        assert _result(logs, "exp_001_r1") is None  # not started
        raw = read_exchanges(RolloutPaths(logs / "rollouts" / "exp_001").raw_log)
        assert raw.problems == [] and len(raw.requests) == len(raw.outcomes) == 1

        client.close()
        client = docker.DockerClient(base_url=private_engine.URL, timeout=60)
        moves["play"] = mini
        again = RunProcess(run_args(stub.url, logs, rid, "--repeat", "2", "--resume"), owner, env)
        assert again.wait(300) == 0, again.stderr
        assert f"removed leftovers of run {rid}, whose driver" in again.stderr
        for name in ("exp_001", "exp_001_r1"):
            done = _result(logs, name)
            assert done is not None and done.status == "passed"
        assert left(client, rid) == []
    finally:
        if engine.answers():
            docker_ops.remove_labelled(client, {docker_ops.LABEL_RUN: rid})
        client.close()


def _fill(folder: Path) -> Path:
    """Write into ``folder`` until its file system is full to the last byte."""
    filler = folder / "filler"
    with filler.open("wb", buffering=0) as fh:
        for size in (1 << 20, 1 << 12, 1):
            try:
                while True:
                    fh.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return filler


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    where = tmp_path / "small"
    where.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def test_a_full_log_dir_stops_the_run_in_one_line_without_a_verdict(
    small_disk: Path, stub_factory: Any, run_id: str, owner: str, docker_client: Any
) -> None:
    calls = {"n": 0}

    def play(req: Any) -> Reply:
        calls["n"] += 1
        return replace(mini(req), delay=6) if calls["n"] == 1 else mini(req)

    stub = stub_factory(play)
    logs = small_disk / "logs"
    run = RunProcess(run_args(stub.url, logs, run_id, "--repeat", "2"), owner)
    wait_for_calls(stub, 1)
    filler = _fill(small_disk)  # while the model thinks: its answer cannot be recorded
    assert run.wait(180) == 1, run.stderr
    assert "Traceback" not in run.stderr
    end = [ln for ln in run.stderr.splitlines() if ln.startswith("contagent: error:")]
    assert len(end) == 1, run.stderr
    assert end[0].startswith(f"contagent: error: run stopped: cannot write {logs}/")
    assert end[0].endswith(": No space left on device")
    for name in ("exp_001", "exp_001_r1"):
        assert _result(logs, name) is None  # no verdict claimed
    assert left(docker_client, run_id) == []

    filler.unlink()
    again = RunProcess(run_args(stub.url, logs, run_id, "--repeat", "2", "--resume"), owner)
    assert again.wait(300) == 0, again.stderr
    for name in ("exp_001", "exp_001_r1"):
        done = _result(logs, name)
        assert done is not None and done.status == "passed"

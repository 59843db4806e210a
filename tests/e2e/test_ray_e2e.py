"""`contagent run --ray-address` on a real local Ray cluster of several nodes.

The cluster (a head without CPUs and two one-CPU worker nodes, each its own
processes and ports) is started and stopped by these tests; the nodes share this
host's Docker engine, the runner image and the real agent; the LLM is scripted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.rawlog.stream import read_log_bytes
from contagent.runner import docker_ops
from contagent.runner.summary import RunSummary
from contagent.testing.llm_stub import Reply, RunningStub, Script, StubRequest
from tests.e2e.helpers import RUNNER_IMAGE, chat_requests, secret_player
from tests.helpers import REPO, cli, read_rows

pytest.importorskip("ray")
from tools.ray_cluster import LocalRayCluster

pytestmark = [pytest.mark.docker, pytest.mark.ray]

StubFactory = Callable[[Script], RunningStub]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRayCluster]:
    c = LocalRayCluster(workers=2, cpus=1)
    yield c
    c.stop()


@pytest.fixture
def scratch_cleanup(run_id: str) -> Iterator[None]:
    """A killed node never removes its scratch folders; the test does."""
    yield
    for left in Path(tempfile.gettempdir()).glob(f"contagent-{run_id}-*"):
        shutil.rmtree(left, ignore_errors=True)


@pytest.fixture
def harbor_images(docker_client: Any, owner: str) -> Iterator[None]:
    """The task images the nodes built for this test's owner are removed afterwards."""
    yield
    from contagent.runner.images.agent_image import gc_images

    gc_images(docker_client, owner)


def _results(log_dir: Path) -> list[RolloutResult]:
    paths = RunPaths(log_dir)
    return [
        RolloutResult.model_validate_json(p.read_bytes())
        for p in sorted(paths.rollouts_dir.glob("*/result.json"))
    ]


def _run_cli(stub: RunningStub, cluster: LocalRayCluster, log_dir: Path, run_id: str, owner: str,
             *extra: str, image: str = RUNNER_IMAGE) -> subprocess.CompletedProcess[str]:  # fmt: skip
    return cli(
        "run", "--served-model-name", "stub-model", "--vllm-url", stub.url,
        "--ray-address", cluster.address, "--experiment", "exp_001", "--log-dir", str(log_dir),
        "--image", f"openhands={image}", "--run-id", run_id, "--timeout", "300",
        "--max-iterations", "10", *extra,
        env={"CONTAGENT_OWNER": owner, "COLUMNS": "200"}, timeout=600,
    )  # fmt: skip


def _export_and_validate(log_dir: Path, out: Path, rollouts: int) -> None:
    proc = cli("export", str(RunPaths(log_dir).rollouts_dir), "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = read_rows(out / "results.jsonl")
    assert len(rows) == rollouts and all(r["training_ready"] and r["passed"] for r in rows)
    proc = cli("validate", str(out / "results.jsonl"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _whole(log_dir: Path, name: str) -> None:
    """The rollout's raw log holds exactly the three exchanges of one complete attempt."""
    rollout = RunPaths(log_dir).rollout(name)
    assert rollout.raw_log == rollout.compacted, name  # compacted on the node, shipped so
    records = [json.loads(x) for x in read_log_bytes(rollout.raw_log).splitlines()]
    assert [r["type"] for r in records] == ["request", "outcome"] * 3, name
    assert [r["index"] for r in records] == [0, 0, 1, 1, 2, 2], name
    assert all(r["outcome"] == "completed" for r in records if r["type"] == "outcome"), name


def test_rollouts_spread_over_the_nodes_export_validate_and_resume(
    tmp_path: Path, cluster: LocalRayCluster, stub_factory: StubFactory, run_id: str, owner: str
) -> None:
    stub = stub_factory(secret_player())
    log_dir = tmp_path / "logs"
    proc = _run_cli(stub, cluster, log_dir, run_id, owner, "--repeat", "4", "--jobs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = _results(log_dir)
    assert [r.status for r in results] == ["passed"] * 4, [r.error for r in results]
    workers = {cluster.node_id(w)[:12] for w in cluster.workers}
    nodes = {(r.node or "").rsplit("/", 1)[-1] for r in results}
    assert nodes == workers  # both nodes ran rollouts, and result.json says which
    assert all(f"/{n}" in proc.stderr for n in nodes)  # the end-of-run table shows nodes
    for r in results:
        _whole(log_dir, r.rollout_id)
    assert not RunPaths(log_dir).incoming_dir.exists()
    _export_and_validate(log_dir, tmp_path / "export", 4)

    again = _run_cli(stub, cluster, log_dir, run_id, owner, "--repeat", "4", "--resume")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stderr.count("resumed") == 4 and len(chat_requests(stub)) == 12


def test_a_node_without_the_image_stops_the_run_in_one_line(
    tmp_path: Path, cluster: LocalRayCluster, stub_factory: StubFactory, run_id: str, owner: str
) -> None:
    stub = stub_factory(secret_player())
    # Present on the engine, but not a runner image: every node refuses it.
    proc = _run_cli(
        stub,
        cluster,
        tmp_path / "logs",
        run_id,
        owner,
        image="contagent-base:trixie",
    )
    assert proc.returncode == 2, proc.stderr  # unusable input, as on the local runner
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("contagent: error: Ray node ") and "not a contagent runner image" in line
    assert chat_requests(stub) == [] and not RunPaths(tmp_path / "logs").rollouts_dir.exists()


def _slow_player(delay: float) -> Callable[[StubRequest], Reply]:
    play = secret_player()

    def slow(req: StubRequest) -> Reply:
        return dataclasses.replace(play(req), delay=delay)

    return slow


def _wait_for_runners(docker_client: Any, run_id: str, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = docker_client.containers.list(
            filters={
                "label": [f"{docker_ops.LABEL_RUN}={run_id}", f"{docker_ops.LABEL_ROLE}=runner"]
            }
        )
        if len(running) >= count:
            return
        time.sleep(0.5)
    raise AssertionError(f"{count} runner containers of {run_id} did not start")


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_ctrl_c_or_sigterm_cancels_the_tasks_and_the_nodes_clean_up(
    tmp_path: Path, cluster: LocalRayCluster, stub_factory: StubFactory, run_id: str, owner: str,
    docker_client: Any, scratch_cleanup: None, signum: int, code: int,
) -> None:  # fmt: skip
    stub = stub_factory(lambda req: Reply(content="thinking", delay=120))
    args = [sys.executable, "-m", "contagent", "run", "--served-model-name", "stub-model",
            "--vllm-url", stub.url, "--ray-address", cluster.address, "--experiment", "exp_001",
            "--repeat", "3", "--jobs", "2", "--log-dir", str(tmp_path / "logs"),
            "--openhands-image", RUNNER_IMAGE, "--run-id", run_id]  # fmt: skip
    proc = subprocess.Popen(
        args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "CONTAGENT_OWNER": owner},
    )  # fmt: skip
    try:
        _wait_for_runners(docker_client, run_id, 2)
        while len(chat_requests(stub)) < 2:  # both agents are waiting on the model
            time.sleep(0.5)
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == code, out + err
    assert "interrupted" in err
    # Every node removed the run's containers and networks (the run_id fixture checks too).
    assert docker_ops.leftovers(docker_client, {docker_ops.LABEL_RUN: run_id}) == [], err
    # The two rollouts that had started stopped and came back as interrupted, their
    # recordings kept; the third never started.
    results = _results(tmp_path / "logs")
    assert [(r.status, r.error) for r in results] == [("infra_error", "interrupted")] * 2
    for r in results:
        records = read_log_bytes(RunPaths(tmp_path / "logs").rollout(r.rollout_id).raw_log)
        assert b'"type":"request"' in records.replace(b" ", b"")


def test_a_node_lost_mid_run_is_retried_elsewhere_and_every_rollout_is_whole(
    tmp_path: Path, cluster: LocalRayCluster, stub_factory: StubFactory,
    run: Callable[..., RunSummary], run_id: str, docker_client: Any, scratch_cleanup: None,
) -> None:  # fmt: skip
    stub = stub_factory(_slow_player(2.0))
    outcome: list[RunSummary | BaseException] = []

    def go() -> None:
        try:
            outcome.append(run(stub, experiments=("exp_001",), repeat=2, jobs=2,
                               ray_address=cluster.address))  # fmt: skip
        except BaseException as exc:
            outcome.append(exc)

    driver = threading.Thread(target=go)
    driver.start()
    try:
        _wait_for_runners(docker_client, run_id, 2)
        while len(chat_requests(stub)) < 2:  # both agents are talking to the model
            time.sleep(0.2)
        lost = cluster.workers[0]
        cluster.kill_worker(lost)
    finally:
        driver.join(timeout=500)
    cluster.add_worker(1)  # for whatever runs next
    [summary] = outcome
    assert isinstance(summary, RunSummary), summary
    assert summary.ok and [r.status for r in summary.results] == ["passed"] * 2
    survivor = {cluster.node_id(w)[:12] for w in cluster.workers[:1]}
    assert {(r.node or "").rsplit("/", 1)[-1] for r in summary.results} == survivor
    assert len(chat_requests(stub)) > 6  # the lost attempt had been talking to the model too
    log_dir = tmp_path / "logs"
    for r in summary.results:
        _whole(log_dir, r.rollout_id)  # the retry's rollout, nothing of the lost attempt
    paths = RunPaths(log_dir)
    assert not paths.superseded_dir.exists() and not paths.incoming_dir.exists()
    _export_and_validate(log_dir, tmp_path / "export", 2)
    # What the killed node's attempt left in Docker (its node never cleaned up) is gone.
    docker_ops.remove_labelled(docker_client, {docker_ops.LABEL_RUN: run_id})


def test_a_harbor_task_runs_on_a_node_that_builds_its_image_there(
    tmp_path: Path, cluster: LocalRayCluster, stub_factory: StubFactory,
    run: Callable[..., RunSummary], scratch_cleanup: None, harbor_images: None,
) -> None:  # fmt: skip
    """The task folder (tests/ and solution/ included) travels to the node, which builds
    the task image from environment/ and runs the phases; the oracle needs no LLM."""
    tasks = tmp_path / "tasks"
    shutil.copytree(REPO / "tests" / "harbor" / "tasks" / "hello-dockerfile", tasks / "hello")
    summary = run(stub_factory(_slow_player(0.0)), tasks, agents=("oracle",),
                  ray_address=cluster.address)  # fmt: skip
    (result,) = summary.results
    assert result.status == "passed" and result.reward == 1.0, result.error
    assert result.node is not None and "/" in result.node  # a Ray node ran it
    assert result.image is not None and result.image.startswith("contagent-task:")


def test_a_node_that_cannot_build_a_task_image_refuses_the_run_naming_it(
    tmp_path: Path, cluster: LocalRayCluster, stub_factory: StubFactory,
    run: Callable[..., RunSummary], scratch_cleanup: None, harbor_images: None,
) -> None:  # fmt: skip
    """Every node builds the images before any rollout; one that cannot stops the run in
    one line naming the node, and no rollout starts."""
    from contagent.errors import ContagentError
    from tests.harbor.helpers import write_task

    tasks = tmp_path / "tasks"
    broken = write_task(tasks / "broken", "[environment]\nbuild_timeout_sec = 60\n")
    (broken / "solution").mkdir()
    (broken / "solution" / "solve.sh").write_text("#!/bin/sh\n")
    (broken / "environment" / "Dockerfile").write_text("FROM contagent-base:trixie\nRUN exit 3\n")
    with pytest.raises(ContagentError) as info:
        run(stub_factory(_slow_player(0.0)), tasks, agents=("oracle",),
            ray_address=cluster.address)  # fmt: skip
    (line,) = str(info.value).splitlines()
    assert line.startswith("Ray node ") and " cannot build the image of task broken " in line
    assert "for oracle: image build failed:" in line
    assert not RunPaths(tmp_path / "logs").rollouts_dir.exists()

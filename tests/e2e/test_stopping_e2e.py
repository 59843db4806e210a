"""Stopping `contagent run`: SIGTERM, SIGHUP (a real terminal hung up), a second signal,
and SIGKILL noticed by the next run or gc; real engine, real agent, scripted LLM."""

from __future__ import annotations

import fcntl
import os
import pty
import signal
import socket
import termios
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

from contagent.layout import RunPaths
from contagent.rawlog.result import RolloutResult
from contagent.runner import docker_ops
from contagent.runner.stopping.leftovers import LABEL_HOST, LABEL_PID, LABEL_STARTED
from contagent.testing.llm_stub import Reply
from contagent.testing.players import mini
from tests.e2e.helpers import BASE_IMAGE
from tests.e2e.stopping import AGENT_IMAGE, RunProcess, left, run_args, wait_for_calls, wait_until

pytestmark = pytest.mark.docker

SLOW = Reply(content="slow", delay=300)


@pytest.fixture(autouse=True)
def _agent_image(docker_client: Any) -> None:
    docker_client.images.get(AGENT_IMAGE)


def _results(log_dir: Path) -> dict[str, RolloutResult]:
    out = {}
    for p in sorted((log_dir / "rollouts").glob("*/result.json")):
        out[p.parent.name] = RolloutResult.model_validate_json(p.read_bytes())
    return out


def test_sigterm_stops_like_ctrl_c_and_resume_completes(
    tmp_path: Path, stub_factory: Any, run_id: str, owner: str, docker_client: Any
) -> None:
    moves: dict[str, Any] = {"play": lambda req: SLOW}
    stub = stub_factory(lambda req: moves["play"](req))
    logs = tmp_path / "logs"
    run = RunProcess(run_args(stub.url, logs, run_id, "--jobs", "2", "--repeat", "3"), owner)
    wait_for_calls(stub, 2)
    assert left(docker_client, run_id)
    run.proc.send_signal(signal.SIGTERM)
    assert run.wait(120) == 143, run.stderr
    assert "stopping: SIGTERM: stopping 2 running rollout(s)" in run.stderr
    assert (
        "contagent: error: interrupted by SIGTERM; the run's containers and networks were removed"
        in run.stderr
    )
    assert "Traceback" not in run.stderr
    assert left(docker_client, run_id) == []
    results = _results(logs)
    assert sorted(results) == ["exp_001", "exp_001_r1"]  # the queued one was never started
    for r in results.values():
        assert (r.status, r.error) == ("infra_error", "interrupted by SIGTERM")
    journal = RunPaths(logs).run_log(run_id).read_text()
    assert "interrupted by SIGTERM" in journal and "exit 143" in journal

    moves["play"] = mini
    again = RunProcess(
        run_args(stub.url, logs, run_id, "--jobs", "2", "--repeat", "3", "--resume"), owner
    )
    assert again.wait(300) == 0, again.stderr
    assert {r.status for r in _results(logs).values()} == {"passed"}
    assert len(_results(logs)) == 3


def _on_a_terminal() -> tuple[int, dict[str, Any]]:
    """A pseudo-terminal that becomes the child's controlling terminal, as an SSH session's."""
    master, slave = pty.openpty()

    def become_session_leader() -> None:
        os.setsid()
        fcntl.ioctl(slave, termios.TIOCSCTTY, 0)

    popen = {
        "stdin": slave,
        "stdout": slave,
        "stderr": slave,
        "preexec_fn": become_session_leader,
        "pass_fds": (slave,),
    }
    return master, popen


def test_sighup_of_a_closed_terminal_cleans_up_and_logs_to_the_log_dir(
    tmp_path: Path, stub_factory: Any, run_id: str, owner: str, docker_client: Any
) -> None:
    stub = stub_factory(lambda req: SLOW)
    logs = tmp_path / "logs"
    master, popen = _on_a_terminal()
    run = RunProcess(
        run_args(stub.url, logs, run_id, "--jobs", "2", "--repeat", "2"), owner, **popen
    )
    os.close(popen["stdin"])
    drain = bytearray()

    def read_terminal() -> None:
        try:
            while chunk := os.read(master, 65536):
                drain.extend(chunk)
        except OSError:
            pass

    threading.Thread(target=read_terminal, daemon=True).start()
    wait_for_calls(stub, 2)
    assert left(docker_client, run_id)
    os.close(master)  # the terminal hangs up: the kernel sends SIGHUP, writes fail from now on
    assert run.wait(120) == 129
    assert left(docker_client, run_id) == []
    for r in _results(logs).values():
        assert (r.status, r.error) == ("infra_error", "interrupted by SIGHUP")
    journal = RunPaths(logs).run_log(run_id).read_text()
    assert "stopping: SIGHUP: stopping 2 running rollout(s)" in journal
    assert "exp_001_r1" in journal  # the summary table
    assert (
        "contagent: error: interrupted by SIGHUP; the run's containers and networks were removed"
        in journal
    )
    assert "Traceback" not in journal


def test_a_second_signal_says_what_is_left_and_how_to_remove_it(
    tmp_path: Path, stub_factory: Any, run_id: str, owner: str, docker_client: Any
) -> None:
    stub = stub_factory(lambda req: SLOW)
    logs = tmp_path / "logs"
    run = RunProcess(run_args(stub.url, logs, run_id, "--jobs", "2", "--repeat", "2"), owner)
    wait_for_calls(stub, 2)
    run.proc.send_signal(signal.SIGTERM)
    run.wait_for_line("stopping: SIGTERM")
    run.proc.send_signal(signal.SIGINT)
    assert run.wait(60) == 130, run.stderr
    lines = [ln for ln in run.stderr.splitlines() if "second SIGINT during clean-up" in ln]
    assert len(lines) == 1, run.stderr
    still = left(docker_client, run_id)
    assert still, "clean-up was over before the second signal: nothing to say"
    assert "left in Docker: " in lines[0]
    assert lines[0].endswith(f"`contagent gc --run-id {run_id}` removes them")
    assert "second SIGINT during clean-up" in RunPaths(logs).run_log(run_id).read_text()
    gc = RunProcess(["gc", "--run-id", run_id], owner)
    assert gc.wait(60) == 0, gc.stderr
    assert left(docker_client, run_id) == []


def _foreign_network(client: Any, owner: str) -> Any:
    """A network of ``owner`` labelled as made on another host (a shared owner name)."""
    rid = f"t-{uuid.uuid4().hex[:10]}"
    labels = {
        docker_ops.LABEL_OWNER: owner,
        docker_ops.LABEL_RUN: rid,
        LABEL_HOST: "another-host.example",
        LABEL_PID: "1",
        LABEL_STARTED: "1.00",
    }
    return client.networks.create(f"{rid}-foreign", internal=True, labels=labels), rid


def test_sigkill_is_noticed_by_the_next_run_and_gc_spares_live_runs(
    tmp_path: Path, stub_factory: Any, owner: str, docker_client: Any
) -> None:
    stub = stub_factory(lambda req: SLOW)
    killed, alive = (f"t-{uuid.uuid4().hex[:10]}" for _ in range(2))
    foreign, foreign_run = _foreign_network(docker_client, owner)
    runs: list[RunProcess] = []
    try:
        runs = [
            RunProcess(run_args(stub.url, tmp_path / rid, rid), owner) for rid in (killed, alive)
        ]
        wait_for_calls(stub, 2)
        wait_until(lambda: all(left(docker_client, r) for r in (killed, alive)), 60, "containers")
        killed_objects = left(docker_client, killed)
        runs[0].proc.send_signal(signal.SIGKILL)
        assert runs[0].wait(30) == -signal.SIGKILL
        assert left(docker_client, killed) == killed_objects  # nothing cleaned it up

        # The next run of this owner (here one whose LLM server is not there) notices.
        nxt = RunProcess(
            run_args("http://127.0.0.1:9/v1", tmp_path / "next", f"t-{uuid.uuid4().hex[:10]}",
                     "--wait-for-llm", "0"), owner,
        )  # fmt: skip
        assert nxt.wait(60) == 1, nxt.stderr
        said = [ln for ln in nxt.stderr.splitlines() if f"removed leftovers of run {killed}" in ln]
        assert len(said) == 1, nxt.stderr
        assert "is gone: 1 container, 1 network" in said[0]
        assert "from host another-host.example, not removed from here" in nxt.stderr
        assert left(docker_client, killed) == []
        assert left(docker_client, alive)  # the live run is untouched
        foreign.reload()  # the other host's leftover is still there

        gc = RunProcess(["gc"], owner)
        assert gc.wait(60) == 0, gc.stderr
        assert f"spared live run {alive}" in gc.stderr
        assert "removed 0 containers, 0 networks" in gc.stderr
        assert left(docker_client, alive)
        foreign.reload()

        runs[1].proc.send_signal(signal.SIGTERM)
        assert runs[1].wait(120) == 143, runs[1].stderr
        assert left(docker_client, alive) == []
    finally:
        for run in runs:
            run.kill()
        for rid in (killed, alive, foreign_run):
            docker_ops.remove_labelled(docker_client, {docker_ops.LABEL_RUN: rid})


def test_gc_never_removes_another_owners_dead_run(docker_client: Any, owner: str) -> None:
    rid = f"t-{uuid.uuid4().hex[:10]}"
    dead = {LABEL_HOST: socket.gethostname(), LABEL_PID: "999999", LABEL_STARTED: "1.00"}
    theirs = {docker_ops.LABEL_OWNER: f"{owner}-else", docker_ops.LABEL_RUN: rid, **dead}
    mine = {**theirs, docker_ops.LABEL_OWNER: owner}
    try:
        for labels, tag in ((mine, "mine"), (theirs, "theirs")):
            docker_client.containers.create(
                BASE_IMAGE, ["true"], labels=labels, name=f"{rid}-{tag}"
            )
        gc = RunProcess(["gc"], owner)
        assert gc.wait(60) == 0, gc.stderr
        assert f"removed leftovers of run {rid}, whose driver (pid 999999" in gc.stderr
        assert docker_ops.leftovers(docker_client, mine) == []
        assert docker_ops.leftovers(docker_client, theirs) == [f"container {rid}-theirs"]
    finally:
        docker_ops.remove_labelled(docker_client, {docker_ops.LABEL_RUN: rid})

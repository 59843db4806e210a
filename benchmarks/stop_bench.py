"""How long `contagent run` takes to stop after SIGTERM: does clean-up fit the grace period?

    .venv/bin/python benchmarks/stop_bench.py [--jobs 4] [--tries 3] [--agent mini-swe-agent]

Starts a real `contagent run` process (real engine, runner image and agent; a scripted
LLM that keeps every rollout waiting for its answer) with ``--jobs`` rollouts in flight
and as many queued, sends SIGTERM once every running rollout has called the model, and
times until the process exits; then checks that nothing of the run is left in Docker.
The baseline is the shortest grace senders give before SIGKILL: ``docker stop``'s 10 s
(Kubernetes gives 30 s by default). Needs a Docker engine and the runner images.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from contagent.agents import get_agent
from contagent.runner import docker_ops
from contagent.testing.llm_stub import Reply, start_stub_in_thread

REPO = Path(__file__).resolve().parents[1]
GRACE_S = 10.0


def one(agent: str, jobs: int, stub_url: str, calls: list[int], log_dir: Path) -> tuple[float, int]:
    run_id = f"bench-stop-{uuid.uuid4().hex[:8]}"
    owner = f"contagent-bench-{uuid.uuid4().hex[:6]}"
    argv = [
        sys.executable, "-c", "from contagent.cli import main; main()", "run",
        "--served-model-name", "bench", "--vllm-url", stub_url, "--agent", agent,
        "--experiments-dir", str(REPO / "experiments"), "--experiment", "exp_001",
        "--log-dir", str(log_dir), "--run-id", run_id, "--jobs", str(jobs),
        "--repeat", str(2 * jobs),
    ]  # fmt: skip
    start = len(calls)
    env = {**os.environ, "CONTAGENT_OWNER": owner}
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while len(calls) - start < jobs:
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise SystemExit(f"the rollouts never all called the model: {proc.stderr}")
        time.sleep(0.1)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    took = time.monotonic() - t0
    client = docker_ops.connect()
    try:
        left = docker_ops.leftovers(client, {docker_ops.LABEL_RUN: run_id})
        docker_ops.remove_labelled(client, {docker_ops.LABEL_RUN: run_id})
    finally:
        client.close()
    if proc.returncode != 143 or left:
        raise SystemExit(f"exit {proc.returncode}, left {left}: {err.decode()[-2000:]}")
    return took, len(left)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--tries", type=int, default=3)
    parser.add_argument("--agent", default="mini-swe-agent")
    args = parser.parse_args()
    get_agent(args.agent)
    calls: list[int] = []

    def slow(req: object) -> Reply:
        calls.append(1)
        return Reply(content="thinking", delay=600)

    stub = start_stub_in_thread(slow, host="127.0.0.1", models=["bench"])
    times = []
    try:
        with tempfile.TemporaryDirectory(prefix="contagent-stop-bench-") as tmp:
            for k in range(args.tries):
                took, _ = one(args.agent, args.jobs, stub.url, calls, Path(tmp) / f"logs{k}")
                times.append(took)
    finally:
        stub.stop()
    print(f"stop benchmark: SIGTERM with --jobs {args.jobs} rollouts in flight ({args.agent}), "
          f"{args.tries} tries; nothing left in Docker after any")  # fmt: skip
    print(f"{'jobs':>4} {'median s':>9} {'max s':>7} {'baseline s':>11}  within")
    verdict = "yes" if max(times) < GRACE_S else "NO"
    print(
        f"{args.jobs:>4} {statistics.median(times):>9.2f} {max(times):>7.2f} "
        f"{GRACE_S:>11.1f}  {verdict} (docker stop's grace before SIGKILL)"
    )


if __name__ == "__main__":
    main()

"""Runner overhead per agent and executor, and --jobs scaling, with the real engine, images
and agents and a scripted LLM.

    .venv/bin/python benchmarks/runner_bench.py [--rollouts 4] [--jobs 1,2] [--agent NAME ...] [--no-ray]

Per rollout, the runner's own overhead is the wall time the host saw minus the
time spent in setup.sh, the agent (SDK import, set-up, run) and evaluate.sh:
network and container creation, copying files in and out, the proxy, clean-up.
Each agent (default: every agent) runs exp_001 with each --jobs setting twice over the same
rollouts: with the local runner and, when Ray is installed (``.[ray]``), as Ray tasks on a
local cluster of two worker nodes started by the benchmark (each with as many CPUs as the
largest --jobs, so --jobs is the only cap). "executor s" is what the executor adds around
each rollout as the driver sees it (from handing the rollout over to having its result):
for Ray, scheduling the task, shipping inputs and files, checking and moving them in; a
figure that a busy machine disturbs far less than rollouts/min.
Needs a Docker engine and the runner images (scripts/build-images.sh).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from contagent.agents import AGENTS
from contagent.runner.config import LlmOptions, RunConfig, agent_images
from contagent.runner.run import run_experiments
from contagent.testing.llm_stub import start_stub_in_thread
from contagent.testing.players import PLAYERS, any_agent

REPO = Path(__file__).resolve().parents[1]


def measure(
    agent: str,
    jobs: int,
    rollouts: int,
    images: dict[str, str],
    stub_url: str,
    log_dir: Path,
    ray: str | None = None,
) -> dict[str, Any]:
    config = RunConfig(
        experiments_dir=REPO / "experiments",
        experiments=("exp_001",),
        log_dir=log_dir,
        skills_dir=REPO / "skills",
        upstream_url=stub_url,
        llm=LlmOptions(served_model_name="bench"),
        images=images,
        agents=(agent,),
        jobs=jobs,
        repeat=rollouts,
        timeout_s=600,
        max_iterations=10,
        owner="contagent-bench",
        ray_address=ray,
    )
    seen: dict[str, float] = {}  # rollout -> seconds from handing it over to its result

    def on_event(event: Any) -> None:
        if event.kind == "started":
            seen[event.name] = time.monotonic()
        elif event.kind == "finished":
            seen[event.name] = time.monotonic() - seen[event.name]

    t0 = time.monotonic()
    summary = run_experiments(config, on_event)
    wall = time.monotonic() - t0
    results = summary.results
    bad = [r for r in results if r.status != "passed"]
    if bad:
        raise SystemExit(
            f"benchmark rollout did not pass: {bad[0].rollout_id}: {bad[0].status} {bad[0].error}"
        )
    timings = [r.timings for r in results if r.timings is not None]
    return {
        "agent": agent,
        "executor": "local" if ray is None else "ray",
        "jobs": jobs,
        "rollouts": len(results),
        "wall_s": wall,
        "per_min": 60 * len(results) / wall,
        "overhead_s": [t.overhead_s or 0.0 for t in timings],
        "rollout_wall_s": [t.wall_s for t in timings],
        "agent_s": [t.agent_s or 0.0 for t in timings],
        # What the executor adds around the rollout itself: for Ray, scheduling the task,
        # shipping inputs and files, checking and moving them in.
        "executor_s": [
            seen[r.rollout_id] - r.timings.wall_s for r in results if r.timings is not None
        ],
    }


def _ray_cluster(workers: int, cpus: int) -> Any:
    try:
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's tools/
        from tools.ray_cluster import LocalRayCluster

        return LocalRayCluster(workers=workers, cpus=cpus)
    except ImportError:
        print("ray is not installed (pip install -e '.[ray]'): local runner only")
        return None


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per setting")
    parser.add_argument("--jobs", default="1,2", help="--jobs settings, comma-separated")
    parser.add_argument("--agent", action="append", choices=sorted(AGENTS), help="repeatable")
    parser.add_argument("--no-ray", action="store_true", help="the local runner only")
    parser.add_argument(
        "--image", action="append", default=[], help="AGENT=NAME, as `contagent run --image`"
    )
    args = parser.parse_args()
    settings = [int(j) for j in args.jobs.split(",")]
    images = agent_images(args.image)

    stub = start_stub_in_thread(any_agent(), models=["bench"])
    cluster = None if args.no_ray else _ray_cluster(2, max(settings))
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="contagent-bench-") as tmp:
            for agent in args.agent or list(PLAYERS):
                where = [None] if cluster is None else [None, cluster.address]
                # One unmeasured rollout first per executor, so no setting pays for cold caches.
                for address in where:
                    measure(
                        agent, 1, 1, images, stub.url, Path(tmp) / f"{agent}-w{address}", address
                    )
                for jobs in settings:
                    for address in where:
                        log_dir = Path(tmp) / f"{agent}-{jobs}-{address is not None}"
                        rows.append(
                            measure(agent, jobs, args.rollouts, images, stub.url, log_dir, address)
                        )
    finally:
        stub.stop()
        if cluster is not None:
            cluster.stop()
    _print(rows, args.rollouts, settings)
    return 0


def _print(rows: list[dict[str, Any]], rollouts: int, settings: list[int]) -> None:
    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    print(f"runner benchmark: exp_001, scripted LLM (3 moves), {rollouts} rollouts per setting")
    print(f"{'agent':>14} {'executor':>8} {'jobs':>4} {'rollouts':>8} {'wall s':>8} {'rollouts/min':>13} "
          f"{'vs local 1':>10} {'rollout s (med)':>16} {'agent s (med)':>14} {'overhead s (med)':>17} "
          f"{'executor s (med)':>17}")  # fmt: skip
    base = {(r["agent"], r["jobs"]): r["per_min"] for r in rows if r["executor"] == "local"}
    for r in rows:
        one = base.get((r["agent"], settings[0]), r["per_min"])
        print(f"{r['agent']:>14} {r['executor']:>8} {r['jobs']:>4} {r['rollouts']:>8} {r['wall_s']:>8.1f} "
              f"{r['per_min']:>13.2f} {r['per_min'] / one:>9.2f}x {med(r['rollout_wall_s']):>16.2f} "
              f"{med(r['agent_s']):>14.2f} {med(r['overhead_s']):>17.2f} {med(r['executor_s']):>17.2f}")  # fmt: skip
    for r in rows:
        if r["executor"] == "ray":
            extra = 60 / r["per_min"] - 60 / base[(r["agent"], r["jobs"])]
            print(f"{r['agent']} --jobs {r['jobs']}: Ray costs {extra:+.2f} s of wall time per "
                  "rollout beside the local runner")  # fmt: skip
    print("baseline: the local runner with --jobs 1 (no figure in the issues); the ideal speed-up "
          "with 2 jobs on 2 cores is 2.00x")  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())

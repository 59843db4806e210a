"""Runner overhead per agent and --jobs scaling, with the real engine, images and agents and a scripted LLM.

    .venv/bin/python benchmarks/runner_bench.py [--rollouts 4] [--agent openhands --agent codex ...]

Per rollout, the runner's own overhead is the wall time the host saw minus the
time spent in setup.sh, the agent (SDK import, set-up, run) and evaluate.sh:
network and container creation, copying files in and out, the proxy, clean-up.
Throughput is measured with --jobs 1 and --jobs 2 over the same number of rollouts,
for each agent (default: all three). Needs a Docker engine and the runner images
(scripts/build-images.sh).
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
from contagent.runner.config import LlmOptions, RunConfig
from contagent.runner.run import run_experiments
from contagent.testing.llm_stub import start_stub_in_thread
from contagent.testing.players import PLAYERS, any_agent

REPO = Path(__file__).resolve().parents[1]


def measure(
    agent: str, jobs: int, rollouts: int, image: str, stub_url: str, log_dir: Path
) -> dict[str, Any]:
    config = RunConfig(
        experiments_dir=REPO / "experiments",
        experiments=("exp_001",),
        log_dir=log_dir,
        skills_dir=REPO / "skills",
        upstream_url=stub_url,
        llm=LlmOptions(served_model_name="bench"),
        image=image,
        agents=(agent,),
        jobs=jobs,
        repeat=rollouts,
        timeout_s=600,
        max_iterations=10,
        owner="contagent-bench",
    )
    t0 = time.monotonic()
    summary = run_experiments(config)
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
        "jobs": jobs,
        "rollouts": len(results),
        "wall_s": wall,
        "per_min": 60 * len(results) / wall,
        "overhead_s": [t.overhead_s or 0.0 for t in timings],
        "rollout_wall_s": [t.wall_s for t in timings],
        "agent_s": [t.agent_s or 0.0 for t in timings],
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rollouts", type=int, default=4, help="rollouts per --jobs setting")
    parser.add_argument("--image", default="contagent-runner:latest", help="the OpenHands image")
    parser.add_argument("--agent", action="append", choices=sorted(AGENTS), help="repeatable")
    args = parser.parse_args()

    stub = start_stub_in_thread(any_agent())
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="contagent-bench-") as tmp:
            for agent in args.agent or list(PLAYERS):
                image = args.image if agent == "openhands" else AGENTS[agent].image
                # One unmeasured rollout first, so that neither setting pays for cold caches.
                measure(agent, 1, 1, image, stub.url, Path(tmp) / f"{agent}-warmup")
                for jobs in (1, 2):
                    log_dir = Path(tmp) / f"{agent}-jobs{jobs}"
                    rows.append(measure(agent, jobs, args.rollouts, image, stub.url, log_dir))
    finally:
        stub.stop()

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    print(
        f"runner benchmark: exp_001, scripted LLM (3 moves), {args.rollouts} rollouts per setting"
    )
    print(f"{'agent':>14} {'jobs':>4} {'rollouts':>8} {'wall s':>8} {'rollouts/min':>13} {'speed-up':>9} "
          f"{'rollout s (med)':>16} {'agent s (med)':>14} {'overhead s (med)':>17} {'overhead s (max)':>17}")  # fmt: skip
    base: dict[str, float] = {}
    for r in rows:
        base.setdefault(r["agent"], r["per_min"])
        print(f"{r['agent']:>14} {r['jobs']:>4} {r['rollouts']:>8} {r['wall_s']:>8.1f} {r['per_min']:>13.2f} "
              f"{r['per_min'] / base[r['agent']]:>8.2f}x {med(r['rollout_wall_s']):>16.2f} {med(r['agent_s']):>14.2f} "
              f"{med(r['overhead_s']):>17.2f} {max(r['overhead_s']):>17.2f}")  # fmt: skip
    print("no baseline figure in the issue; the ideal speed-up with 2 jobs on 2 cores is 2.00x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

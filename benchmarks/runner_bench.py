"""Runner overhead and --jobs scaling, with the real engine, image and agent and a scripted LLM.

    .venv/bin/python benchmarks/runner_bench.py [--rollouts 4] [--jobs 1,2] [--no-ray]

Each --jobs setting runs twice over the same rollouts: with the local runner and,
when Ray is installed (``.[ray]``), as Ray tasks on a local cluster of two worker
nodes started by the benchmark (each with as many CPUs as the largest --jobs, so
--jobs is the only cap); rollouts/min side by side show Ray's own cost per rollout.

Per rollout, the runner's own overhead is the wall time the host saw minus the
time spent in setup.sh, the agent (SDK import, set-up, run) and evaluate.sh:
network and container creation, copying files in and out, the proxy, clean-up.
Throughput is measured with --jobs 1 and --jobs 2 over the same number of rollouts.
"executor s" is what the executor adds around each rollout as the driver sees it (from
handing the rollout over to having its result): for Ray, scheduling the task, shipping
inputs and files, checking and moving them in; a figure that a busy machine disturbs far
less than rollouts/min.
Needs a Docker engine and the runner image (scripts/build-images.sh).
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from contagent.runner.config import LlmOptions, RunConfig
from contagent.runner.run import run_experiments
from contagent.testing.llm_stub import Reply, StubRequest, ToolCall, start_stub_in_thread

REPO = Path(__file__).resolve().parents[1]
SECRET = re.compile(r"s-[0-9a-f]{24}")


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def play(req: StubRequest) -> Reply:
    """exp_001 in three moves: read the secret, write the answer, finish."""
    outputs = [_text(m) for m in req.json["messages"] if m.get("role") == "tool"]
    if not outputs:
        call = ToolCall(
            "terminal", {"command": "cat ~/workspace/secret.txt", "security_risk": "LOW"}
        )
    elif len(outputs) == 1:
        found = SECRET.search(outputs[0])
        secret = found.group(0) if found else "?"
        cmd = f"printf '%s' 'pass:{secret}' > ~/workspace/result.txt"
        call = ToolCall("terminal", {"command": cmd, "security_risk": "LOW"})
    else:
        call = ToolCall("finish", {"message": "done"})
    return Reply(content=None, tool_calls=[call])


def measure(
    jobs: int, rollouts: int, image: str, stub_url: str, log_dir: Path, ray: str | None = None
) -> dict[str, Any]:
    config = RunConfig(
        experiments_dir=REPO / "experiments",
        experiments=("exp_001",),
        log_dir=log_dir,
        skills_dir=REPO / "skills",
        upstream_url=stub_url,
        llm=LlmOptions(served_model_name="bench"),
        image=image,
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
        from contagent.testing.ray_cluster import LocalRayCluster

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
    parser.add_argument("--no-ray", action="store_true", help="the local runner only")
    parser.add_argument("--image", default="contagent-runner:latest")
    args = parser.parse_args()
    settings = [int(j) for j in args.jobs.split(",")]

    stub = start_stub_in_thread(play)
    cluster = None if args.no_ray else _ray_cluster(2, max(settings))
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="contagent-bench-") as tmp:
            # One unmeasured rollout first per executor, so that no setting pays for cold caches.
            measure(1, 1, args.image, stub.url, Path(tmp) / "warmup")
            if cluster is not None:
                measure(1, 1, args.image, stub.url, Path(tmp) / "warmup-ray", cluster.address)
            for jobs in settings:
                rows.append(
                    measure(jobs, args.rollouts, args.image, stub.url, Path(tmp) / f"l{jobs}")
                )
                if cluster is not None:
                    rows.append(
                        measure(jobs, args.rollouts, args.image, stub.url, Path(tmp) / f"r{jobs}",
                                cluster.address)
                    )  # fmt: skip
    finally:
        stub.stop()
        if cluster is not None:
            cluster.stop()

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    print(
        f"runner benchmark: exp_001, scripted LLM (3 moves), {args.rollouts} rollouts per setting"
    )
    print(f"{'executor':>8} {'jobs':>4} {'rollouts':>8} {'wall s':>8} {'rollouts/min':>13} {'vs local':>9} "
          f"{'rollout s (med)':>16} {'agent s (med)':>14} {'overhead s (med)':>17} {'executor s (med)':>17}")  # fmt: skip
    local = {r["jobs"]: r["per_min"] for r in rows if r["executor"] == "local"}
    for r in rows:
        print(f"{r['executor']:>8} {r['jobs']:>4} {r['rollouts']:>8} {r['wall_s']:>8.1f} {r['per_min']:>13.2f} "
              f"{r['per_min'] / local[r['jobs']]:>8.2f}x {med(r['rollout_wall_s']):>16.2f} {med(r['agent_s']):>14.2f} "
              f"{med(r['overhead_s']):>17.2f} {med(r['executor_s']):>17.2f}")  # fmt: skip
    for jobs in settings:
        ray_rate = [r["per_min"] for r in rows if r["executor"] == "ray" and r["jobs"] == jobs]
        if ray_rate:
            extra = 60 / ray_rate[0] - 60 / local[jobs]
            print(
                f"--jobs {jobs}: Ray run costs {extra:+.2f} s of wall time per rollout beside the local runner (rollouts/min)"
            )
    print("baseline: the local runner with the same --jobs (no figure in the issue)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Runner overhead and --jobs scaling, with the real engine, image and agent and a scripted LLM.

    .venv/bin/python benchmarks/runner_bench.py [--rollouts 4] [--image contagent-runner:latest]

Per rollout, the runner's own overhead is the wall time the host saw minus the
time spent in setup.sh, the agent (SDK import, set-up, run) and evaluate.sh:
network and container creation, copying files in and out, the proxy, clean-up.
Throughput is measured with --jobs 1 and --jobs 2 over the same number of rollouts.
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


def measure(jobs: int, rollouts: int, image: str, stub_url: str, log_dir: Path) -> dict[str, Any]:
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
    parser.add_argument("--image", default="contagent-runner:latest")
    args = parser.parse_args()

    stub = start_stub_in_thread(play, models=["bench"])
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="contagent-bench-") as tmp:
            # One unmeasured rollout first, so that neither setting pays for cold caches.
            measure(1, 1, args.image, stub.url, Path(tmp) / "warmup")
            for jobs in (1, 2):
                rows.append(
                    measure(jobs, args.rollouts, args.image, stub.url, Path(tmp) / f"jobs{jobs}")
                )
    finally:
        stub.stop()

    def med(xs: list[float]) -> float:
        return statistics.median(xs) if xs else float("nan")

    print(
        f"runner benchmark: exp_001, scripted LLM (3 moves), {args.rollouts} rollouts per setting"
    )
    print(f"{'jobs':>4} {'rollouts':>8} {'wall s':>8} {'rollouts/min':>13} {'speed-up':>9} "
          f"{'rollout s (med)':>16} {'agent s (med)':>14} {'overhead s (med)':>17} {'overhead s (max)':>17}")  # fmt: skip
    base = rows[0]["per_min"]
    for r in rows:
        print(f"{r['jobs']:>4} {r['rollouts']:>8} {r['wall_s']:>8.1f} {r['per_min']:>13.2f} "
              f"{r['per_min'] / base:>8.2f}x {med(r['rollout_wall_s']):>16.2f} {med(r['agent_s']):>14.2f} "
              f"{med(r['overhead_s']):>17.2f} {max(r['overhead_s']):>17.2f}")  # fmt: skip
    print("no baseline figure in the issue; the ideal speed-up with 2 jobs on 2 cores is 2.00x")
    return 0


if __name__ == "__main__":
    sys.exit(main())

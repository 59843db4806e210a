"""The rollout engine's delivery: from a group's last ``result.json`` written to the group in
the trainer's hands, and the engine's CPU per sample, with the scripted stand-in.

    python -m benchmarks.engine_bench --groups 4 --group-size 4 --steps 50

Rollouts run on the in-process executor (real recording proxies, the scripted stub), so
the figures are the engine's own: reading the finished raw logs, the export's sample
code, advantages, the queue. Latency is measured against each group's newest
``result.json`` modification time; CPU is the thread CPU time of reading each finished
rollout (as it ends) and building the groups (when their last rollout ended). On a loaded
machine the wall-clock figure is mostly waiting for a core: the CPU on the path (the last
rollout's read plus its group's build) is the part the engine controls.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from contagent.engine import Engine, EngineConfig
from contagent.engine import engine as engine_module
from contagent.export.exporter import ExportOptions
from contagent.runner.config import LlmOptions, RunConfig
from contagent.testing.inprocess import InProcessExecutor, agent_script
from contagent.testing.llm_stub import start_stub_in_thread


def _experiments(root: Path, n: int) -> list[str]:
    names = [f"task{i:03d}" for i in range(n)]
    for name in names:
        exp = root / name
        (exp / "workspace").mkdir(parents=True)
        (exp / "experiment.json").write_text('{"task": "t"}')
        (exp / "setup.sh").write_text("#!/bin/bash\ntrue\n")
        (exp / "evaluate.sh").write_text("#!/bin/bash\ntrue\n")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--jobs", type=int, default=4)
    args = ap.parse_args()

    cpu: dict[str, list[float]] = {"read": [], "build": []}

    def timed(work: Any, kind: str) -> Any:
        def run(*a: Any, **kw: Any) -> Any:
            t = time.thread_time()
            try:
                return work(*a, **kw)
            finally:
                cpu[kind].append(time.thread_time() - t)

        return run

    # a rollout's log is read as it ends, its group built when the last one ended
    engine_module.read_finished = timed(engine_module.read_finished, "read")  # type: ignore[assignment]
    engine_module.build_group = timed(engine_module.build_group, "build")  # type: ignore[assignment]
    stub = start_stub_in_thread(agent_script, models=["m"])
    latencies: list[float] = []
    samples = 0
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        names = _experiments(root / "exps", args.groups)
        run = RunConfig(
            experiments_dir=root / "exps", log_dir=root / "logs", upstream_url=stub.url,
            llm=LlmOptions("m", temperature=1.0), jobs=args.jobs, wait_for_llm_s=10,
        )  # fmt: skip
        config = EngineConfig(run=run, export=ExportOptions(allow_raw_logprobs=True))

        async def drive() -> int:
            got = 0
            factory = partial(InProcessExecutor, steps=args.steps)
            async with Engine(config, executor=factory) as engine:
                await engine.submit(names, group_size=args.group_size)
                async for group in engine.groups():
                    now = time.time()
                    newest = max(
                        (run.log_dir / "rollouts" / o.rollout_id / "result.json").stat().st_mtime
                        for o in group.rollouts
                    )
                    latencies.append(now - newest)
                    got += len(group.samples)
            return got

        samples = asyncio.run(drive())
    stub.stop()
    lat = sorted(latencies)
    print(
        f"groups {len(lat)} x {args.group_size} rollouts of {args.steps} steps, {samples} samples"
    )
    print(
        f"result.json -> trainer: median {statistics.median(lat) * 1000:.0f} ms, "
        f"max {lat[-1] * 1000:.0f} ms"
    )
    total = sum(cpu["read"]) + sum(cpu["build"])
    print(f"engine CPU per sample: {total / max(samples, 1) * 1000:.1f} ms")
    # what no load can hide: the last rollout's read, then the group's build
    read, build = statistics.median(cpu["read"]), statistics.median(cpu["build"])
    print(
        f"CPU on the path (a rollout's read + its group's build, medians): "
        f"{(read + build) * 1000:.1f} ms ({read * 1000:.1f} + {build * 1000:.1f})"
    )


if __name__ == "__main__":
    main()

"""Compacted raw logs: size on disk, compaction speed, and export/validate speed on them.

In one run, each figure beside its baseline:

* on disk: OpenHands-like rollouts of 25/50/100/200 steps, plain vs compacted
  (target: the 200-step log at most 1% of its plain size);
* compaction: MB/s of plain input, on one core (CPU seconds too), beside a plain
  file copy (target: at least 100 MB/s);
* reading: ``contagent export --jobs 1`` and ``contagent validate`` of a corpus in
  each form, MB/s in plain bytes and peak RSS, each in a fresh process (target:
  compacted at least 0.9x the MB/s of plain, with the same RSS bound).

Usage: ``python benchmarks/compact_bench.py [--rollouts 8] [--steps 100] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from contagent.layout import find_rollouts
from contagent.rawlog.compact import compact_dirs, compact_rollout

# the repository's tools/ (the corpus generator) is not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from measure import timed

from tools.corpus import make_rollout


def _one_core() -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


def sizes(work: Path) -> None:
    print(f"{'steps':>6}{'plain MB':>11}{'compacted kB':>14}{'ratio':>9}{'x smaller':>11}")
    for steps in (25, 50, 100, 200):
        paths = make_rollout(work / f"size-{steps}", steps, steps, random.Random(steps))
        plain = paths.exchanges.stat().st_size
        compact_rollout(paths)
        stored = paths.compacted.stat().st_size
        print(
            f"{steps:6d}{plain / 1e6:11.1f}{stored / 1e3:14.1f}{stored / plain:9.2%}"
            f"{plain / stored:11.0f}"
        )
    print("target: the 200-step log at most 1.00% of its plain size\n")


def speed(corpus: Path, scratch: Path) -> None:
    plain = sum(p.exchanges.stat().st_size for p in find_rollouts([corpus]))
    copy = scratch / "copy"
    shutil.copytree(corpus, copy)
    t, c = time.perf_counter(), time.process_time()
    for p in sorted(copy.rglob("exchanges.jsonl")):
        with open(p, "rb") as src, open(p.with_suffix(".copy"), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            dst.flush()
            os.fsync(dst.fileno())
    base_wall, base_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    done = compact_dirs([copy])
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    assert all(d.status == "compacted" for d in done)
    mb = plain / 1e6
    print(f"{'compaction (one core)':34}{'MB/s':>8}{'MB/CPU-s':>10}")
    print(f"{'plain file copy (baseline)':34}{mb / base_wall:8.0f}{mb / base_cpu:10.0f}")
    print(f"{'contagent compact':34}{mb / wall:8.0f}{mb / cpu:10.0f}")
    print("target: compaction at least 100 MB/s of plain input\n")


def reading(corpus: Path, scratch: Path, repeat: int) -> None:
    plain = sum(p.exchanges.stat().st_size for p in find_rollouts([corpus]))
    packed = scratch / "packed"
    shutil.copytree(corpus, packed)
    compact_dirs([packed])
    mb = plain / 1e6
    me = [sys.executable, "-m", "contagent"]
    print(
        f"{'reading ' + f'{mb:.0f} MB':34}{'MB/s':>8}{'x plain':>9}{'MB/CPU-s':>10}"
        f"{'x plain':>9}{'RSS MiB':>9}"
    )
    for what in ("export", "validate"):
        best: dict[str, tuple[float, float, float]] = {}
        for _ in range(repeat):  # interleaved, best of each: the machine is shared
            for form, src in (("plain", corpus), ("compacted", packed)):
                out = scratch / f"out-{form}"
                if what == "export":
                    shutil.rmtree(out, ignore_errors=True)
                    cmd = [*me, "export", str(src), "--out", str(out), "--filter", "all"]
                    cmd += ["--jobs", "1"]
                else:
                    cmd = [*me, "validate", str(out / "results.jsonl")]
                wall, cpu, rss, _ = timed(cmd)
                if form not in best or cpu < best[form][1]:
                    best[form] = (wall, cpu, rss)
        for form in ("plain", "compacted"):
            wall, cpu, rss = best[form]
            label = f"{what}, {form}" + (" (baseline)" if form == "plain" else "")
            print(
                f"{label:34}{mb / wall:8.1f}{best['plain'][0] / wall:9.2f}{mb / cpu:10.1f}"
                f"{best['plain'][1] / cpu:9.2f}{rss:9.0f}"
            )
    print(
        "target: compacted at least 0.90x plain, with the same RSS bound (export --jobs 1; "
        "each process's start-up included, best of --repeat by CPU seconds)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=8, help="corpus rollouts (default 8)")
    parser.add_argument("--steps", type=int, default=100, help="steps per rollout (default 100)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each reading (best kept)")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the corpus")
    args = parser.parse_args()
    _one_core()
    work = Path(args.dir or tempfile.mkdtemp(prefix="contagent-compact-bench-"))
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    sizes(work)
    corpus = work / "corpus"
    rng = random.Random(1234)
    for n in range(args.rollouts):
        make_rollout(corpus, n, args.steps, rng)
    speed(corpus, work)
    reading(corpus, work, args.repeat)
    if args.dir is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

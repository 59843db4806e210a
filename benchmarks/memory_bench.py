"""Peak memory of an export on the largest raw logs a reader takes, beside its goal.

In one run, each in a fresh process (``ru_maxrss``), medians of ``--repeat``:

* a decompression bomb: a compacted log whose one frame declares no size and
  decompresses to 2 GiB (zeros), refused at the default 1 GiB limit;
* a 1 GB raw log of one 200-step OpenHands-like rollout (the whole history resent
  every step; its largest line about 10 MB), exported with the default options;
* the baseline: the export of one tiny rollout (the process's own memory).

Goal: under 256 MB for each. With ``--baseline-src DIR`` the same exports run with the
contagent of another source tree too. Usage: ``python benchmarks/memory_bench.py
[--repeat 5] [--dir DIR] [--baseline-src DIR]``.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import zstandard

# the repository's tools/ (the corpus generator) is not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from measure import REPO, bytecode_env, load, timed

from tools.corpus import make_rollout

GOAL_MB = 256


def make_tiny(root: Path) -> None:
    make_rollout(root, 0, 2, random.Random(0))


def make_bomb(root: Path) -> Path:
    """A rollout whose compacted log decompresses to 2 GiB of zeros, size undeclared."""
    paths = make_rollout(root, 0, 2, random.Random(0))
    target = paths.exchanges.with_suffix(".jsonl.zst")
    zeros = bytes(64 << 20)
    with target.open("wb") as fh, zstandard.ZstdCompressor(level=3).stream_writer(fh) as w:
        for _ in range(32):
            w.write(zeros)
    paths.exchanges.unlink()
    return root


def make_big(root: Path) -> Path:
    """One 200-step rollout of about 1 GB (tool outputs 32 times the corpus' usual)."""
    make_rollout(root, 0, 200, random.Random(7), scale=32)
    return root


#: The logs memory is measured on: label, folder under the work folder, builder.
LOGS = (
    ("tiny rollout (baseline)", "tiny", make_tiny),
    ("2 GiB bomb, refused at 1 GiB", "bomb", make_bomb),
    ("1 GB log, 200 steps", "big", make_big),
)


def build_logs(work: Path, keys: tuple[str, ...]) -> dict[str, Path]:
    """Each log of ``LOGS`` named in ``keys``, built under ``work`` unless already there."""
    made = {}
    for _, key, build in LOGS:
        if key not in keys:
            continue
        made[key] = root = work / key
        if not root.is_dir():  # in a child: a parent that held the log would raise its RSS
            child = multiprocessing.get_context("spawn").Process(target=build, args=(root,))
            child.start()
            child.join()
    return made


def export_peak(
    root: Path, out: Path, env: dict[str, str], repeat: int
) -> tuple[float, float, float, list[int]]:
    """Median wall s, CPU s and peak RSS (MB) of ``repeat`` exports of ``root``, and the
    exit statuses they had."""
    runs = []
    for _ in range(repeat):
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "contagent", "export", str(root), "--out", str(out)]
        runs.append(timed(cmd, env, check=False))
    wall, cpu, rss = (statistics.median(r[i] for r in runs) for i in range(3))
    return wall, cpu, rss * 1.048576, sorted({r[3] for r in runs})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=None, help="where to build the logs")
    parser.add_argument("--baseline-src", type=Path, default=None)
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="contagent-memory-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    made = build_logs(work, tuple(key for _, key, _ in LOGS))
    big = next(made["big"].rglob("exchanges.jsonl"))
    largest = max(len(line) for line in big.open("rb"))
    print(f"1 GB log: {big.stat().st_size / 1e6:.0f} MB, largest line {largest / 1e6:.1f} MB")
    trees = [("contagent", REPO)]
    if args.baseline_src is not None:
        trees.append(("baseline", args.baseline_src.resolve()))
    print(f"{'peak RSS of contagent export':44}{'MB':>8}{'CPU s':>8}{'goal MB':>9}")
    for label, src in trees:
        env = bytecode_env(src, work)
        for name, key, _ in LOGS:
            _, cpu, rss, status = export_peak(made[key], work / f"out-{label}", env, args.repeat)
            goal = "" if key == "tiny" else f"{GOAL_MB:9d}"
            print(f"{label + ': ' + name:44}{rss:8.0f}{cpu:8.2f}{goal:>9}  exit {status}  {load()}")
    if args.dir is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

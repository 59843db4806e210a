"""Export and validate start-up, and a default export end to end, each beside its baseline.

Each command runs in a fresh process, ``--repeat`` times, interleaved with its
baseline; the best wall time is kept (the machine may be shared) and CPU seconds
are shown beside it:

* ``contagent export data/rollouts --out OUT --filter all`` (target <= 1.0 s) and
  ``contagent validate OUT/results.jsonl`` (target <= 0.6 s);
* start-up: the export of a run dir holding one tiny rollout (target <= 0.5 s);
* end to end: a 105 MB corpus (24 OpenHands-like rollouts of 60 steps) exported with
  the default options, against a bare ``orjson`` parse of the same bytes on one core,
  process start included (target >= 0.35x).

Commands run from compiled bytecode, as an installed package does (pip compiles it):
a cache under the work folder, filled by one unmeasured run, even where
``PYTHONDONTWRITEBYTECODE`` is set; ``--no-bytecode-cache`` measures every module
compiled from source instead.

Baselines: a bare interpreter start, the bare parse, and with ``--baseline-src DIR``
the same commands run by the contagent of another source tree (e.g. a worktree of an
earlier commit). Also lists the heavy packages each command imports.

Usage: ``python benchmarks/startup_bench.py [--repeat 5] [--baseline-src DIR]
[--no-bytecode-cache]``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# the repository's tools/ (the corpus generator) is not part of the installed package
sys.path.insert(0, str(REPO))
from measure import timed  # noqa: E402

from tools.corpus import generate, make_rollout  # noqa: E402

HEAVY = (
    "numpy",
    "pandas",
    "datasets",
    "matplotlib",
    "pyarrow.dataset",
    "huggingface_hub",
    "aiohttp",
)
BARE = """
import sys, orjson, pathlib
for p in sorted(pathlib.Path(sys.argv[1]).rglob('exchanges.jsonl')):
    for line in p.read_bytes().splitlines():
        orjson.loads(line)
"""
AUDIT = """
import runpy, sys
sys.argv = ["contagent", *sys.argv[1:]]
try:
    runpy.run_module("contagent", run_name="__main__")
except SystemExit:
    pass
print("heavy:" + ",".join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)
"""


def best(cmd: list[str], env: dict[str, str], repeat: int, prepare: object = None) -> tuple:
    runs = []
    for _ in range(repeat):
        if callable(prepare):
            prepare()
        runs.append(timed(cmd, env)[:2])
    return min(runs)


def imports(args: list[str], env: dict[str, str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", AUDIT.format(heavy=HEAVY), *args],
        env=env,
        capture_output=True,
        text=True,
        cwd="/",
    )
    marked = [line for line in proc.stderr.splitlines() if line.startswith("heavy:")]
    return marked[-1].removeprefix("heavy:") if marked else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (best kept)")
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--dir", type=Path, default=None, help="where to build the corpus")
    parser.add_argument(
        "--no-bytecode-cache", action="store_true", help="compile every module from source"
    )
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="contagent-startup-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    tiny = work / "tiny"
    shutil.rmtree(tiny, ignore_errors=True)
    make_rollout(tiny, 0, 2, random.Random(0))
    corpus = work / "corpus"
    if not corpus.is_dir():
        generate(corpus, 105_000_000, 60)
    raw = sum(p.stat().st_size for p in corpus.rglob("exchanges.jsonl"))
    trees = [("contagent", REPO)]
    if args.baseline_src is not None:
        trees.append(("baseline", args.baseline_src.resolve()))
    py = sys.executable

    def env_of(src: Path) -> dict[str, str]:
        env = {**os.environ, "PYTHONPATH": str(src)}
        if not args.no_bytecode_cache:
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(work / "pycache")
        return env

    for _, src in trees:  # fills the bytecode cache (unmeasured)
        subprocess.run(
            [py, "-m", "contagent", "export", str(tiny), "--out", str(work / "warm")],
            env=env_of(src),
            cwd="/",
            capture_output=True,
            check=True,
        )

    print(f"{'':44}{'wall s':>8}{'CPU s':>8}{'target':>9}   heavy imports")
    wall, cpu = best([py, "-c", "pass"], dict(os.environ), args.repeat)
    print(f"{'python -c pass (interpreter start)':44}{wall:8.2f}{cpu:8.2f}")
    for label, src in trees:
        env = env_of(src)
        out, tout = work / f"out-{label}", work / f"tiny-{label}"
        export = ["export", str(REPO / "data" / "rollouts"), "--out", str(out), "--filter", "all"]
        rows = [
            ("export data/rollouts --filter all", export, 1.0),
            ("validate of it", ["validate", str(out / "results.jsonl")], 0.6),
            (
                "start-up: export of one tiny rollout",
                ["export", str(tiny), "--out", str(tout)],
                0.5,
            ),
        ]
        for name, cmd, target in rows:
            wall, cpu = best([py, "-m", "contagent", *cmd], env, args.repeat)
            heavy = imports(cmd, env)
            print(f"{label + ': ' + name:44}{wall:8.2f}{cpu:8.2f}{target:9.2f}   {heavy or '-'}")
    mb = raw / 1e6
    print(
        f"\nend to end, {mb:.0f} MB corpus{'':18}{'wall s':>8}{'CPU s':>8}{'MB/s':>8}{'x bare':>8}"
    )
    bare = best(
        ["taskset", "-c", "0", py, "-c", BARE, str(corpus)]
        if shutil.which("taskset")
        else [py, "-c", BARE, str(corpus)],
        dict(os.environ),
        args.repeat,
    )
    print(
        f"{'bare orjson parse, one core (baseline)':44}{bare[0]:8.2f}{bare[1]:8.2f}{mb / bare[0]:8.1f}"
    )
    for label, src in trees:
        out = work / f"big-{label}"
        wall, cpu = best(
            [py, "-m", "contagent", "export", str(corpus), "--out", str(out)],
            env_of(src),
            args.repeat,
            lambda out=out: shutil.rmtree(out, ignore_errors=True),
        )
        print(
            f"{label + ': export, default options':44}{wall:8.2f}{cpu:8.2f}{mb / wall:8.1f}"
            f"{bare[0] / wall:8.2f}"
        )
    cache = "none (every module compiled)" if args.no_bytecode_cache else "cached"
    print(f"target: export >= 0.35x bare; machine: {os.cpu_count()} CPUs; bytecode: {cache}")
    if args.dir is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Every start-up, throughput, compaction and memory figure beside its goal and baseline, in one run.

Each command runs in a fresh process from outside the source tree, from compiled
bytecode as an installed package runs (a cache under the work folder, filled by one
unmeasured run, even where ``PYTHONDONTWRITEBYTECODE`` is set); each figure is the
median of ``--repeat`` runs, wall seconds and CPU seconds (the child's user + system
time) side by side, with the machine's load average printed beside it:

* start-up: the export of one tiny (2-step) rollout, and ``contagent proxy --tokens off``
  from its start to the line with its URL (goal <= 0.4 s each; baseline: the
  interpreter's own start);
* ``contagent export data/rollouts --out OUT --filter all`` (goal <= 0.7 s) and
  ``contagent validate OUT/results.jsonl`` (goal <= 0.5 s);
* throughput: the default export of a 105 MB corpus (21 OpenHands-like rollouts of 60
  steps) against a bare ``orjson`` parse of every line of the same files, process start
  included (goal >= 0.8x the bare parse), and the floor: a process that only imports the
  libraries the export's outputs need and hashes every log, as each row records its log's
  SHA-256 (the ratio no export writing these outputs can pass);
* compaction: ``contagent compact`` of a copy of that corpus, MB/s of plain input (goal
  >= 100 MB/s; baseline: a plain copy with fsync), and the ratio it reaches;
* memory: peak RSS of the export of a 2 GiB compacted bomb (refused at 1 GiB) and of a
  1 GB log of one 200-step rollout (goal < 256 MB each; baseline: the tiny export).

``--baseline-src DIR`` adds each command as run by the contagent of another source tree
(e.g. a worktree of an earlier commit), interleaved. ``--quick`` leaves out the 1 GB log.

Usage: ``python benchmarks/figures.py [--repeat 5] [--dir DIR] [--baseline-src DIR] [--quick]``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# the repository's tools/ (the corpus generator) is not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from measure import REPO, bytecode_env, load, timed
from memory_bench import GOAL_MB, LOGS, build_logs, export_peak
from proxy_load import cpu_s

from tools.corpus import generate

BARE = """
import sys, orjson, pathlib
for p in sorted(pathlib.Path(sys.argv[1]).rglob('exchanges.jsonl')):
    for line in p.read_bytes().splitlines():
        orjson.loads(line)
"""
COPY = """
import os, pathlib, shutil, sys
for p in sorted(pathlib.Path(sys.argv[1]).rglob('exchanges.jsonl')):
    with open(p, 'rb') as src, open(p.with_suffix('.copy'), 'wb') as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
        dst.flush()
        os.fsync(dst.fileno())
"""
#: The least any export writing these outputs spends: the interpreter, the libraries its
#: outputs need (pyarrow without numpy and pandas, as the export loads it, and its Parquet
#: writer; Pillow's PNG writer for the card's charts; PyYAML for its front matter; orjson,
#: zstandard) and the SHA-256 of every log each row records, read in the export's chunks.
FLOOR = """
import hashlib, io, pathlib, sys
sys.modules['numpy'] = sys.modules['pandas'] = None
import orjson, pyarrow, pyarrow.parquet, yaml, zstandard
from PIL import Image, ImageDraw, ImageFont
pyarrow.array([0])
Image.new('RGB', (1, 1)).save(io.BytesIO(), 'PNG')
for p in sorted(pathlib.Path(sys.argv[1]).rglob('exchanges.jsonl')):
    digest = hashlib.sha256()
    with p.open('rb') as fh:
        while chunk := fh.read(4 << 20):
            digest.update(chunk)
"""
HEAD = f"{'':52}{'wall s':>8}{'CPU s':>8}{'goal':>10}  {'met':5}"
Run = tuple[float, float, float]  # wall s, CPU s, peak RSS MiB


def median_of(runs: list[Run]) -> Run:
    return tuple(statistics.median(r[i] for r in runs) for i in range(3))  # type: ignore[return-value]


def repeat(n: int, once: Callable[[], Run], prepare: Callable[[], object] | None = None) -> Run:
    runs = []
    for _ in range(n):
        if prepare is not None:
            prepare()
        runs.append(once())
    return median_of(runs)


def command(cmd: list[str], env: dict[str, str] | None = None, check: bool = True) -> Run:
    wall, cpu, rss, _ = timed(cmd, env, check)
    return wall, cpu, rss


def proxy_start(env: dict[str, str], work: Path) -> Run:
    """``contagent proxy --tokens off`` from its start to the line with its URL."""
    cmd = [sys.executable, "-m", "contagent", "proxy", "--upstream", "http://127.0.0.1:9"]
    cmd += ["--record-dir", str(work / "proxy-records"), "--tokens", "off"]
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd="/", text=True
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        wall = time.perf_counter() - start
        cpu = cpu_s(proc.pid)
        if "listening on" not in line:
            raise RuntimeError(f"contagent proxy said {line!r}")
    finally:
        proc.terminate()
        proc.wait()
    return wall, cpu, 0.0


def row(name: str, run: Run, goal: str, met: bool | None, note: str = "") -> None:
    verdict = "" if met is None else ("yes" if met else "NO")
    print(f"{name:52}{run[0]:8.3f}{run[1]:8.3f}{goal:>10}  {verdict:5}{note}")


def build(work: Path, quick: bool) -> dict[str, Path]:
    """The inputs, built once under ``work`` (kept with ``--dir`` for the next run)."""
    made = build_logs(work, ("tiny", "bomb") if quick else ("tiny", "bomb", "big"))
    made["corpus"] = work / "corpus"
    if not made["corpus"].is_dir():
        generate(made["corpus"], 105_000_000, 60)
    return made


def interleaved(
    n: int, onces: dict[str, Callable[[], Run]], prepare: Callable[[], object] | None = None
) -> dict[str, Run]:
    """Each of ``onces`` run ``n`` times in turn (the load moves less between a figure and its
    baseline than between two blocks of runs); the median of each."""
    runs: dict[str, list[Run]] = {label: [] for label in onces}
    for _ in range(n):
        for label, once in onces.items():
            if prepare is not None:
                prepare()
            runs[label].append(once())
    return {label: median_of(r) for label, r in runs.items()}


def startup(trees: list[tuple[str, dict[str, str]]], made: dict[str, Path], n: int) -> None:
    py, work = sys.executable, made["tiny"].parent
    row(
        "python -c pass (baseline: interpreter start)",
        repeat(n, lambda: command([py, "-c", "pass"])),
        "",
        None,
    )
    me = [py, "-m", "contagent"]

    def commands(label: str) -> list[list[str]]:
        out = work / f"out-{label}"
        return [
            [*me, "export", str(made["tiny"]), "--out", str(work / f"tiny-{label}")],
            [*me, "export", str(REPO / "data" / "rollouts"), "--out", str(out), "--filter", "all"],
            [*me, "validate", str(out / "results.jsonl")],
        ]

    names = ("start-up: export of one tiny rollout", "export data/rollouts --filter all")
    names += ("validate of it",)
    cmds = {label: commands(label) for label, _ in trees}
    for k, (name, goal) in enumerate(zip(names, (0.4, 0.7, 0.5), strict=True)):
        onces = {
            label: (lambda cmd=cmds[label][k], env=env: command(cmd, env)) for label, env in trees
        }
        for label, run in interleaved(n, onces).items():
            row(f"{label}: {name}", run, f"<= {goal}", run[1] <= goal, f"  {load()}")
    onces = {label: (lambda env=env: proxy_start(env, work)) for label, env in trees}
    for label, run in interleaved(n, onces).items():
        name = f"{label}: start-up: proxy --tokens off to its URL"
        row(name, run, "<= 0.4", run[1] <= 0.4, f"  {load()}")


def throughput(trees: list[tuple[str, dict[str, str]]], made: dict[str, Path], n: int) -> None:
    corpus, work = made["corpus"], made["corpus"].parent
    mb = sum(p.stat().st_size for p in corpus.rglob("exchanges.jsonl")) / 1e6
    rollouts = sum(1 for _ in corpus.rglob("exchanges.jsonl"))
    print(f"\n{mb:.0f} MB corpus, {rollouts} rollouts{'':22}{'wall s':>8}{'CPU s':>8}"
          f"{'goal':>10}  {'met':5}{'x bare (wall / CPU)':>20}")  # fmt: skip
    outs = [work / f"big-out-{label}" for label, _ in trees]
    onces = {
        "bare": lambda: command([sys.executable, "-c", BARE, str(corpus)]),
        "floor": lambda: command([sys.executable, "-c", FLOOR, str(corpus)]),
    }
    for (label, env), out in zip(trees, outs, strict=True):
        cmd = [sys.executable, "-m", "contagent", "export", str(corpus), "--out", str(out)]
        onces[label] = lambda cmd=cmd, env=env: command(cmd, env)
    runs = interleaved(n, onces, lambda: [shutil.rmtree(out, True) for out in outs])
    bare, floor = runs.pop("bare"), runs.pop("floor")
    row("bare orjson parse (baseline)", bare, "", None, f"{mb / bare[0]:8.0f} MB/s")
    row("floor: output libraries' imports + SHA-256 only", floor, "", None,
        f"{bare[0] / floor[0]:9.2f} / {bare[1] / floor[1]:.2f}  (the most any export reaches)")  # fmt: skip
    for label, run in runs.items():
        x_wall, x_cpu = bare[0] / run[0], bare[1] / run[1]
        row(f"{label}: export, default options", run, ">= 0.8x", x_cpu >= 0.8,
            f"{x_wall:9.2f} / {x_cpu:.2f}  {mb / run[0]:.0f} MB/s  {load()}")  # fmt: skip


def compaction(trees: list[tuple[str, dict[str, str]]], made: dict[str, Path], n: int) -> None:
    corpus, work = made["corpus"], made["corpus"].parent
    plain = sum(p.stat().st_size for p in corpus.rglob("exchanges.jsonl"))
    mb = plain / 1e6
    print(f"\ncompaction of the {mb:.0f} MB corpus{'':24}{'wall s':>8}{'CPU s':>8}{'goal':>10}"
          f"  {'met':5}{'MB/s (wall / CPU)':>19}  ratio")  # fmt: skip
    copy = work / "compact-copy"

    def fresh() -> None:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(corpus, copy)

    base = repeat(n, lambda: command([sys.executable, "-c", COPY, str(copy)]), fresh)
    row("plain copy with fsync (baseline)", base, "", None, f"{mb / base[0]:8.0f} / {mb / base[1]:.0f}")  # fmt: skip
    for label, env in trees:
        cmd = [sys.executable, "-m", "contagent", "compact", str(copy)]
        run = repeat(n, lambda cmd=cmd, env=env: command(cmd, env), fresh)
        stored = sum(p.stat().st_size for p in copy.rglob("exchanges.jsonl.zst"))
        row(f"{label}: contagent compact", run, ">= 100", mb / run[1] >= 100,
            f"{mb / run[0]:8.0f} / {mb / run[1]:.0f}  {stored / plain:.2%}  {load()}")  # fmt: skip
    shutil.rmtree(copy, ignore_errors=True)


def memory(trees: list[tuple[str, dict[str, str]]], made: dict[str, Path], n: int) -> None:
    work = made["tiny"].parent
    print(f"\npeak RSS of contagent export{'':24}{'wall s':>8}{'CPU s':>8}{'goal MB':>10}"
          f"  {'met':5}{'MB':>6}")  # fmt: skip
    for label, env in trees:
        for name, key, _ in LOGS:
            if key not in made:
                continue
            wall, cpu, mb, _ = export_peak(made[key], work / f"mem-out-{label}", env, n)
            goal, met = ("", None) if key == "tiny" else (f"< {GOAL_MB}", mb < GOAL_MB)
            row(f"{label}: {name}", (wall, cpu, mb), goal, met, f"{mb:6.0f}  {load()}")


def _self_times(stderr: str) -> dict[str, int]:
    """Each module's own import time (microseconds) from ``-X importtime``'s report."""
    times = {}
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, _, name = line.removeprefix("import time:").split("|")
            times[name.strip()] = int(own)
    return times


def breakdown(env: dict[str, str], made: dict[str, Path], n: int) -> None:
    """Where the start-up's imports go: ``-X importtime`` of the tiny export, each module's
    own time (its lowest of ``n`` runs: the report is wall time) summed by package."""
    out = made["tiny"].parent / "breakdown-out"
    cmd = [sys.executable, "-X", "importtime", "-m", "contagent", "export", str(made["tiny"])]
    runs = []
    for _ in range(n):
        proc = subprocess.run(
            [*cmd, "--out", str(out)], env=env, cwd="/", capture_output=True, text=True
        )
        runs.append(_self_times(proc.stderr))
    lowest = {m: min(r.get(m, 0) for r in runs) for m in runs[0]}
    groups: dict[str, int] = {}
    for name, us in lowest.items():
        root = name.split(".")[0].lstrip("_")
        key = "standard library" if root in sys.stdlib_module_names else root
        groups[key] = groups.get(key, 0) + us
    total = sum(groups.values())
    print(
        f"\nimports of the tiny export's start-up (-X importtime, lowest of {n}): {total / 1e3:.0f} ms"
    )
    for key, us in sorted(groups.items(), key=lambda kv: -kv[1])[:14]:
        print(f"  {key:30}{us / 1e3:8.1f} ms")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5, help="runs of each command (median)")
    parser.add_argument("--dir", type=Path, default=None, help="where to build the inputs")
    parser.add_argument("--baseline-src", type=Path, default=None)
    parser.add_argument("--quick", action="store_true", help="leave out the 1 GB log")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="contagent-figures-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    made = build(work, args.quick)
    trees = [("contagent", bytecode_env(REPO, work))]
    if args.baseline_src is not None:
        trees.append(("baseline", bytecode_env(args.baseline_src.resolve(), work / "base")))
    for _, env in trees:  # fills each tree's bytecode cache (unmeasured)
        me = [sys.executable, "-m", "contagent"]
        command([*me, "export", str(made["tiny"]), "--out", str(work / "warm")], env)
        command([*me, "validate", str(work / "warm" / "results.jsonl")], env)
        proxy_start(env, work)
    print(
        f"{os.cpu_count()} CPUs, {load()}; goals are judged on CPU seconds (see docs/benchmarks.md)"
    )
    print(HEAD)
    startup(trees, made, args.repeat)
    throughput(trees, made, args.repeat)
    compaction(trees, made, args.repeat)
    memory(trees, made, args.repeat)
    breakdown(trees[0][1], made, args.repeat)
    print(f"\nfinished, {load()}")
    if args.dir is None:
        shutil.rmtree(work)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Export throughput vs a bare orjson parse of the same bytes, in one run.

Generates a synthetic corpus of OpenHands-like rollouts (a ~15k-character
system prompt, 60+ exchanges each, the full history resent every step, tool
outputs with code-like text), then measures, each in a fresh process:

* bare parse: read every exchanges.jsonl and ``orjson.loads`` each line;
* ``contagent export --jobs 1`` and ``--jobs 2`` (results.jsonl + Prime-SFT Parquet).

Then, on a second corpus whose raw logs carry token data as a vLLM server gives it
(prompt ids on every exchange, sampled ids and logprobs), ``--format tokens`` and
``--format atif`` beside ``--format prime-sft`` on the same bytes (``--token-gb`` sets
its size; 0 skips it).

Prints MB/s of raw input, peak RSS, and the size of results.jsonl against the
raw bytes. Usage: ``python benchmarks/export_bench.py [--gb 1.0] [--dir DIR]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson
import pyarrow.parquet as pq

# the repository's tools/ (the rollout builders) is not part of the installed package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from measure import bytecode_env, timed

from tools.corpus import generate

BARE = """
import sys, orjson, pathlib
for p in sorted(pathlib.Path(sys.argv[1]).rglob('exchanges.jsonl')):
    for line in p.read_bytes().splitlines():
        orjson.loads(line)
"""


REPO = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=1.0, help="corpus size (default 1.0 GB)")
    parser.add_argument("--steps", type=int, default=60, help="exchanges per rollout (default 60)")
    parser.add_argument(
        "--token-gb", type=float, default=0.25, help="token corpus size (default 0.25 GB)"
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to build the corpus")
    parser.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also export with the contagent package of this source tree (e.g. a git worktree "
        "of an earlier commit), each job count right after this tree's run",
    )
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="contagent-bench-")).resolve()
    corpus = work / "corpus"
    if corpus.exists():
        shutil.rmtree(corpus)
    t = time.perf_counter()
    raw, rollouts, largest = generate(corpus, int(args.gb * 1e9), args.steps)
    print(
        f"corpus: {rollouts} rollouts, {raw / 1e6:.0f} MB raw, largest rollout {largest / 1e6:.1f} MB "
        f"(generated in {time.perf_counter() - t:.0f} s)"
    )
    mb = raw / 1e6
    # a one-rollout export measures the fixed start-up cost: imports, option parsing,
    # the dataset card and its charts
    tiny = work / "tiny"
    shutil.rmtree(tiny, ignore_errors=True)
    shutil.copytree(next(corpus.iterdir()), tiny / "one")
    rows = []
    wall, cpu, rss, _ = timed([sys.executable, "-c", BARE, str(corpus)])
    rows.append(("bare orjson parse (baseline)", wall, cpu, rss, None, 0.0))

    sources = [("contagent export", bytecode_env(REPO, work))]
    if args.baseline_src is not None:
        sources.append(("baseline export", bytecode_env(args.baseline_src.resolve(), work)))
    for jobs in (1, 2):

        def export_cmd(src: Path, dst: Path, jobs: int = jobs) -> list[str]:
            return [
                sys.executable,
                "-m",
                "contagent",
                "export",
                str(src),
                "--out",
                str(dst),
                "--filter",
                "all",
                "--jobs",
                str(jobs),
            ]

        for label, env in sources:
            timed(export_cmd(tiny, work / "tiny-out"), env)  # fills the bytecode cache
            fixed = timed(export_cmd(tiny, work / "tiny-out"), env)[0]
            out = work / f"out-{label.split()[0]}-{jobs}"
            shutil.rmtree(out, ignore_errors=True)
            wall, cpu, rss, _ = timed(export_cmd(corpus, out), env)
            rows.append((f"{label} --jobs {jobs}", wall, cpu, rss, out, fixed))
    bare_wall, bare_cpu = mb / rows[0][1], mb / rows[0][2]
    print(
        f"\n{'':30}{'MB/s':>8}{'x bare':>8}{'MB/CPU-s':>10}{'x bare':>8}{'start-up s':>12}"
        f"{'MB/s after':>12}{'x bare':>8}{'RSS MiB':>9}{'results/raw':>13}"
    )
    for name, wall, cpu, rss, out, fixed in rows:
        ratio = f"{(out / 'results.jsonl').stat().st_size / raw:.4f}" if out is not None else ""
        steady = mb / max(wall - fixed, 1e-9)
        print(
            f"{name:30}{mb / wall:8.1f}{mb / wall / bare_wall:8.2f}{mb / cpu:10.1f}"
            f"{mb / cpu / bare_cpu:8.2f}{fixed:12.2f}{steady:12.1f}{steady / bare_wall:8.2f}"
            f"{rss:9.0f}{ratio:>13}"
        )
    print(
        "\nMB/s after: throughput once the start-up cost is paid (wall minus a one-rollout export)."
        "\nreference: a widely used exporter writes ~1.5 MB/s, >200x slower than a bare"
        " parse, with rows nearly as large as the raw logs; targets: >= 0.5x bare on one core,"
        " near-linear with --jobs 2, RSS bounded by the largest rollout, results <= 0.1 of raw."
    )
    if args.token_gb > 0:
        token_formats(work, int(args.token_gb * 1e9), args.steps)
    if args.dir is None:
        shutil.rmtree(work)
    return 0


def token_formats(work: Path, target_bytes: int, steps: int) -> None:
    """``--format tokens`` beside ``--format prime-sft`` on one corpus with token data."""
    corpus = work / "token-corpus"
    shutil.rmtree(corpus, ignore_errors=True)
    raw, rollouts, largest = generate(corpus, target_bytes, steps // 2, tokens=True)
    mb = raw / 1e6
    print(
        f"\ntoken corpus: {rollouts} rollouts, {mb:.0f} MB raw with token data, largest "
        f"rollout {largest / 1e6:.1f} MB"
    )
    print(f"{'':30}{'MB/s':>8}{'MB/CPU-s':>10}{'x prime-sft':>13}{'RSS MiB':>9}{'rows':>8}")
    base = None
    for fmt in ("prime-sft", "tokens", "atif"):
        out = work / f"token-out-{fmt}"
        shutil.rmtree(out, ignore_errors=True)
        cmd = [sys.executable, "-m", "contagent", "export", str(corpus), "--out", str(out)]
        args = [*cmd, "--filter", "all", "--format", fmt, "--jobs", "1"]
        wall, cpu, rss, _ = timed(args, bytecode_env(REPO, work))
        if fmt == "atif":  # a document per rollout, listed in the folder's index
            rows = len(orjson.loads((out / fmt / "_index.json").read_bytes())["written"])
        else:
            shards = sorted((out / fmt / "data").glob("*.parquet"))
            rows = sum(pq.read_metadata(p).num_rows for p in shards)
        base = base or mb / cpu
        print(
            f"{'export --format ' + fmt:30}{mb / wall:8.1f}{mb / cpu:10.1f}"
            f"{mb / cpu / base:13.2f}{rss:9.0f}{rows:8}"
        )
    print("target: --format tokens >= 0.8x prime-sft's MB per CPU-second on the same corpus.")
    print("target: --format atif (token ids and logprobs on every step) >= 0.8x prime-sft's.")


if __name__ == "__main__":
    sys.exit(main())

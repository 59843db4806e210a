"""Recording proxy overhead: the same workload direct to a stub upstream and through the proxy.

Usage::

    python benchmarks/proxy_bench.py [--quick] [--litellm PATH_TO_litellm_EXECUTABLE]

Everything runs on loopback, in separate processes so that each one's cost is
visible: the scripted upstream (``python -m contagent.testing.llm_stub``), the
proxy (``contagent proxy``), two minimal pass-throughs for reference (on
aiohttp, the original reference point, and on the proxy's own HTTP stack: the gap to the
latter is the price of the record), that second one again with the least
record the contract requires (request body parsed and appended before forwarding:
a bound on what any recorder on this stack can keep), optionally the LiteLLM
proxy, and this load generator (aiohttp). Requests to the targets are
interleaved so that machine noise hits all of them alike. Workloads:

* non-streaming chat completions with 32 KB request bodies;
* streaming responses of 500 chunks (32 KB request bodies too);

each also through a second proxy with ``--tokens on``: it asks the upstream for token
data, and the stub (which says it is vLLM) then answers with a 2000-token prompt's ids
and an id and a logprob per sampled token (500 in the stream), which that proxy records
and strips; the main proxy runs ``--tokens off``, so its figures are those of the same
exchange without token capture;

each at concurrency 1 (latency, time to first chunk) and 64 (throughput).
The proxy's RSS is sampled throughout to show that memory stays flat.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from proxy_load import (
    BENCH_KEY,
    RssSampler,
    concurrent,
    cpu_s,
    free_port,
    openhands_like_body,
    pct,
    rss_mb,
    sequential,
    start_process,
    wait_http,
)
from proxy_report import report

HERE = Path(__file__).resolve().parent
#: the minimal pass-throughs measured for reference: name, script, extra arguments
REFERENCES = [
    ("passthrough", "passthrough.py", []),
    ("llhttp", "passthrough_llhttp.py", []),
    ("floor", "passthrough_llhttp.py", ["--record-requests"]),
]


async def run(
    urls: dict[str, str],
    quick: bool,
    rounds: int,
    proxy_pid: int,
    phases: list[tuple[str, float]],
    pids: dict[str, int],
) -> dict[str, dict[str, float]]:
    n1 = {"json": 150 if quick else 600, "stream": 40 if quick else 150}
    n64 = {"json": 500 if quick else 2000, "stream": 128 if quick else 512}
    bodies = {"json": openhands_like_body(), "stream": openhands_like_body(stream=True)}
    conn = aiohttp.TCPConnector(limit=0)
    results: dict[str, dict[str, float]] = {name: {} for name in urls}
    async with aiohttp.ClientSession(
        connector=conn, timeout=aiohttp.ClientTimeout(total=120)
    ) as session:
        for kind in ("json", "stream"):  # warm-up: connections, caches, import paths
            await sequential(session, urls, bodies[kind], kind == "stream", 10)
        phases.append(("warm-up", rss_mb(proxy_pid)))
        for kind in ("json", "stream"):
            seq = await sequential(session, urls, bodies[kind], kind == "stream", n1[kind])
            for name, s in seq.items():
                r = results[name]
                r[f"{kind}_p50"], r[f"{kind}_p99"] = pct(s.latency, 50), pct(s.latency, 99)
                r[f"{kind}_errors"] = s.errors
                if kind == "stream":
                    r["ttfb_p50"], r["ttfb_p99"] = pct(s.ttfb, 50), pct(s.ttfb, 99)
            phases.append((f"{kind} c1", rss_mb(proxy_pid)))
            thr: dict[str, list[float]] = {name: [] for name in urls}
            cpu: dict[str, list[float]] = {name: [] for name in urls}
            for _ in range(rounds):  # interleaved rounds of the whole batch
                for name, url in urls.items():
                    c0 = cpu_s(pids[name]) if name in pids else 0.0
                    s = await concurrent(
                        session, url, bodies[kind], kind == "stream", n64[kind], 64
                    )
                    thr[name].append(s.count / s.wall)
                    if name in pids:  # CPU per exchange: the figure machine noise moves least
                        cpu[name].append(1000 * (cpu_s(pids[name]) - c0) / s.count)
                    results[name][f"{kind}_errors"] += s.errors
                phases.append((f"{kind} c64 #{len(thr['direct'])}", rss_mb(proxy_pid)))
            for name in urls:
                results[name][f"{kind}_rps64"] = statistics.median(thr[name])
                if cpu[name]:
                    results[name][f"{kind}_cpu_ms"] = statistics.median(cpu[name])
    return results


def litellm_config(upstream: str, path: Path) -> Path:
    path.write_text(
        "model_list:\n  - model_name: stub\n    litellm_params:\n"
        f"      model: openai/stub\n      api_base: {upstream}/v1\n      api_key: k\n"
        f"general_settings:\n  master_key: {BENCH_KEY}\n  disable_spend_logs: true\n"
        "litellm_settings:\n  telemetry: false\n"
    )
    return path


def _proxy(
    stub_url: str, record_dir: Path, *extra: str, **popen: Any
) -> tuple[subprocess.Popen[str], str]:
    """``contagent proxy`` in front of the stub, recording under ``record_dir``."""
    return start_process(
        [sys.executable, "-c", "from contagent.cli import main; main()", "proxy",
         "--upstream", stub_url, "--record-dir", str(record_dir), *extra],
        "listening on ", **popen,
    )  # fmt: skip


def _start_litellm(exe: str, stub_url: str, tmp: Path, procs: list) -> tuple[str | None, str]:
    """LiteLLM's proxy in front of the stub: its URL (None when it did not start) and a note."""
    port = free_port()
    cfg = litellm_config(stub_url, tmp / "litellm.yaml")
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_LOG": "ERROR"}
    try:
        lp = subprocess.Popen([shutil.which(exe) or exe, "--config", str(cfg), "--port", str(port), "--num_workers", "1", "--host", "127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)  # fmt: skip
        procs.append(lp)
        wait_http(f"http://127.0.0.1:{port}/health/liveliness", 180)
    except Exception as exc:  # report and carry on without it
        return None, f"could not start: {exc}"
    return f"http://127.0.0.1:{port}/v1/chat/completions", "measured in this run"


def start_targets(
    args: argparse.Namespace, tmp: Path, procs: list
) -> tuple[dict[str, str], dict[str, int], str]:
    """Start the stub and every target (each appended to ``procs``): the targets' URLs, the
    PIDs of the proxies whose CPU is measured (``contagent`` first), and LiteLLM's note."""
    stub, stub_url = start_process(
        [sys.executable, "-m", "contagent.testing.llm_stub"], "listening on "
    )
    procs.append(stub)
    urls = {"direct": f"{stub_url}/v1/chat/completions"}
    pids: dict[str, int] = {}
    proxies = [
        ("contagent", (tmp / "records", "--tokens", "off"), {}),
        ("tokens", (tmp / "token-records", "--tokens", "on"), {}),
    ]
    if args.baseline_src:
        src = str(Path(args.baseline_src).resolve())
        popen = {"env": {**os.environ, "PYTHONPATH": src}, "cwd": src}
        # each mode beside its own: the baseline's CPU per exchange is the before of a change
        proxies.append(("baseline", (tmp / "baseline-records", "--tokens", "off"), popen))
        proxies.append(("baseline-tokens", (tmp / "baseline-tokens", "--tokens", "on"), popen))
    for name, (record_dir, *extra), popen in proxies:
        proc, url = _proxy(stub_url, record_dir, *extra, **popen)
        procs.append(proc)
        pids[name] = proc.pid
        urls[name] = f"{url}/r/bench/v1/chat/completions"
    for name, script, more in [] if args.no_passthrough else REFERENCES:
        ref, ref_url = start_process(
            [sys.executable, str(HERE / script), stub_url, str(tmp / f"{name}.jsonl"), *more],
            "listening on ",
        )
        procs.append(ref)
        pids[name] = ref.pid
        urls[name] = f"{ref_url}/r/bench/v1/chat/completions"
    litellm_note = "not measured (pass --litellm PATH)"
    if args.litellm:
        litellm_url, litellm_note = _start_litellm(args.litellm, stub_url, tmp, procs)
        if litellm_url is not None:
            urls["litellm"] = litellm_url
    return urls, pids, litellm_note


def _arguments() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--quick", action="store_true", help="fewer requests (a smoke run)")
    ap.add_argument(
        "--rounds", type=int, default=3, help="interleaved throughput rounds per target"
    )
    ap.add_argument(
        "--no-passthrough",
        action="store_true",
        help="skip the minimal pass-through references (aiohttp, the proxy's HTTP stack, and "
        "that stack with the least record)",
    )
    ap.add_argument(
        "--baseline-src",
        help="also run the proxy from this source tree (a folder holding a `contagent` "
        "package, e.g. `git archive main contagent | tar -x -C DIR`), with --tokens off and "
        "on, for before/after",
    )
    ap.add_argument(
        "--litellm",
        help="path to a `litellm` executable (pip install 'litellm[proxy]' in its own venv)",
    )
    return ap.parse_args()


def main() -> None:
    args = _arguments()
    try:
        import uvloop

        loop_name = f"uvloop {uvloop.__version__}"
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        loop_name = "asyncio"
    tmp = Path(tempfile.mkdtemp(prefix="contagent-bench-"))
    procs: list[subprocess.Popen[str]] = []
    try:
        urls, pids, litellm_note = start_targets(args, tmp, procs)
        proxy_pid = pids["contagent"]
        sampler = RssSampler(proxy_pid)
        t0 = time.monotonic()
        phases: list[tuple[str, float]] = []
        results = asyncio.run(run(urls, args.quick, args.rounds, proxy_pid, phases, pids))
        samples = sampler.stop()
        records = tmp / "records" / "bench" / "exchanges.jsonl"
        log_mb = records.stat().st_size / 1e6 if records.exists() else 0.0
        report(results, samples, t0, loop_name, litellm_note, log_mb)
        print("proxy RSS (MB) after each phase: " + ", ".join(f"{k} {v:.1f}" for k, v in phases))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Which client for the proxy's upstream hop: CPU per JSON exchange, measured in one run.

Usage::

    python benchmarks/upstream_client_bench.py [--n 3000] [--rounds 3] [--proxy-src DIR]

Against the scripted upstream (``python -m contagent.testing.llm_stub``, its own
process), this process sends the same 32 KB OpenHands-shaped JSON requests at
concurrency 64 with the proxy's own upstream client (``UpstreamPool``) and with
an aiohttp ``ClientSession``, interleaved, and reads its CPU time per exchange.
It also drives a ``contagent proxy`` process with the same load and reads that
process's CPU per exchange: swapping the own client for aiohttp would cost the
proxy the difference between the two clients, so the ratio printed is
``(proxy + aiohttp - own) / proxy``. The rule it decides: keep an aiohttp
client unless it costs more than 1.5x today's proxy CPU per JSON exchange;
``--proxy-src`` runs the proxy from another source tree (``git archive REV contagent``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_load import concurrent, cpu_s, openhands_like_body, start_process

from contagent.proxy.pool import UpstreamPool

LIMIT = 1.5


class _Sink:
    """The least an exchange does with an upstream answer: keep the body."""

    __slots__ = ("body", "done", "gone", "head_only", "status", "upstream")

    def __init__(self, done: asyncio.Future[None]) -> None:
        self.upstream = None
        self.gone = False
        self.head_only = False
        self.status = 0
        self.body: list[bytes] = []
        self.done = done

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status = status

    def on_body(self, data: bytes) -> None:
        self.body.append(data)

    def on_end(self) -> None:
        self.done.set_result(None)

    def on_fail(self, message: str, timed_out: bool) -> None:
        self.done.set_exception(RuntimeError(message))


async def _own(base: str, body: bytes, n: int) -> float:
    pool = UpstreamPool(base, connect_timeout=None, read_timeout=None, limit=64)
    loop = asyncio.get_running_loop()
    head = (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
        b"Accept-Encoding: identity\r\nContent-Length: %d\r\n\r\n" % (pool.host_header, len(body))
    )
    todo = iter(range(n))

    async def worker() -> None:
        for _ in todo:
            done: asyncio.Future[None] = loop.create_future()
            sink = _Sink(done)
            pool.send(sink, head + body)  # type: ignore[arg-type]
            await done
            b"".join(sink.body)

    c0 = time.process_time()
    await asyncio.gather(*(worker() for _ in range(64)))
    cpu = time.process_time() - c0
    pool.close()
    return 1000 * cpu / n


async def _aiohttp(base: str, body: bytes, n: int) -> float:
    todo = iter(range(n))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=64)) as session:

        async def worker() -> None:
            for _ in todo:
                async with session.post(
                    base + "/v1/chat/completions",
                    data=body,
                    headers={"Content-Type": "application/json", "Accept-Encoding": "identity"},
                ) as r:
                    await r.read()

        c0 = time.process_time()
        await asyncio.gather(*(worker() for _ in range(64)))
        return 1000 * (time.process_time() - c0) / n


async def _proxy(url: str, pid: int, body: bytes, n: int) -> float:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        c0 = cpu_s(pid)
        s = await concurrent(session, url, body, False, n, 64)
        return 1000 * (cpu_s(pid) - c0) / s.count


async def _run(stub: str, proxy_url: str, proxy_pid: int, n: int, rounds: int) -> None:
    body = openhands_like_body()
    await _own(stub, body, 200)  # warm-up: connections, import paths
    await _aiohttp(stub, body, 200)
    await _proxy(proxy_url, proxy_pid, body, 200)
    own, aio, prx = [], [], []
    for _ in range(rounds):
        own.append(await _own(stub, body, n))
        aio.append(await _aiohttp(stub, body, n))
        prx.append(await _proxy(proxy_url, proxy_pid, body, n))
    o, a, p = statistics.median(own), statistics.median(aio), statistics.median(prx)
    ratio = (p + a - o) / p
    print(f"CPU per JSON exchange at concurrency 64, median of {rounds} rounds of {n}:")
    print(f"  own upstream client (UpstreamPool)   {o:.3f} ms")
    print(f"  aiohttp ClientSession                {a:.3f} ms")
    print(f"  contagent proxy process (today)      {p:.3f} ms")
    verdict = "keep the own client" if ratio > LIMIT else "switch to aiohttp"
    print(f"proxy with an aiohttp upstream: {ratio:.2f}x today's CPU (limit {LIMIT}x): {verdict}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--proxy-src", help="run the proxy from this source tree (holds contagent/)")
    args = ap.parse_args()
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    procs = []
    try:
        stub, stub_url = start_process(
            [sys.executable, "-m", "contagent.testing.llm_stub"], "listening on "
        )
        procs.append(stub)
        tmp = tempfile.mkdtemp(prefix="contagent-upbench-")
        src = str(Path(args.proxy_src).resolve()) if args.proxy_src else None
        proxy, proxy_url = start_process(
            [sys.executable, "-c", "from contagent.cli import main; main()", "proxy",
             "--upstream", stub_url, "--record-dir", tmp],
            "listening on ",
            env={**os.environ, "PYTHONPATH": src} if src else None, cwd=src,
        )  # fmt: skip
        procs.append(proxy)
        url = f"{proxy_url}/r/bench/v1/chat/completions"
        asyncio.run(_run(stub_url, url, proxy.pid, args.n, args.rounds))
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)


if __name__ == "__main__":
    main()

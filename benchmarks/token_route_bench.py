"""The token route's CPU: a streamed Messages answer through the proxy on either route.

Usage::

    python benchmarks/token_route_bench.py [--tokens 500] [--rounds 5] [--requests 20]

Two ``contagent proxy`` processes with ``--tokens on`` forward to one scripted upstream (the
stand-in, in this process, saying it is vLLM): one with ``--messages-route native`` (the
client's Messages stream relayed as the upstream sent it: no token ids there), one with
``--messages-route chat`` (the token route: the request translated to chat completions with
token ids and logprobs asked, each chunk recorded and translated into the client's Messages
events). Each answer is ``--tokens`` tokens streamed one per chunk. Requests go to the two
proxies interleaved, in rounds; each proxy's CPU (user + system, from /proc) is read around
every round, and the figure is the median over rounds of CPU per answer.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
from pathlib import Path

import aiohttp
from measure import load
from proxy_load import Sample, cpu_s, one, start_process

from contagent.testing.llm_stub import Reply, StubRequest, start_stub_in_thread

ROUTES = ("native", "chat")


def answer(tokens: int) -> Reply:
    """An answer of ``tokens`` tokens (the stand-in's ids are bytes), one per chunk."""
    return Reply(content="x" * tokens, chunks=tokens)


def body(tokens: int) -> bytes:
    import orjson

    return orjson.dumps(
        {
            "model": "stub",
            "max_tokens": tokens * 2,
            "system": "You are an agent.",
            "messages": [{"role": "user", "content": "Write the answer."}],
            "stream": True,
        }
    )


async def _round(urls: dict[str, str], sent: bytes, n: int) -> dict[str, Sample]:
    out = {route: Sample() for route in urls}
    async with aiohttp.ClientSession() as session:
        for _ in range(n):
            for route, url in urls.items():
                await one(session, url, sent, True, out[route])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=20, help="per proxy per round")
    args = parser.parse_args()
    reply = answer(args.tokens)

    def script(_req: StubRequest) -> Reply:
        return reply

    stub = start_stub_in_thread(script)
    procs = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for route in ROUTES:
                cmd = [sys.executable, "-m", "contagent", "proxy", "--upstream", stub.url,
                       "--record-dir", str(Path(tmp) / route), "--tokens", "on",
                       "--messages-route", route]  # fmt: skip
                procs[route] = start_process(cmd, "listening on ")
            urls = {r: f"{url}/r/bench/v1/messages" for r, (_, url) in procs.items()}
            sent = body(args.tokens)
            asyncio.run(_round(urls, sent, 3))  # warm up
            per: dict[str, list[float]] = {r: [] for r in ROUTES}
            for _ in range(args.rounds):
                before = {r: cpu_s(p.pid) for r, (p, _) in procs.items()}
                samples = asyncio.run(_round(urls, sent, args.requests))
                for r, (p, _) in procs.items():
                    assert samples[r].errors == 0, f"{r}: {samples[r].errors} errors"
                    per[r].append((cpu_s(p.pid) - before[r]) * 1000 / args.requests)
    finally:
        for proc, _ in procs.values():
            proc.terminate()
            proc.wait(30)
        stub.stop()
    med = {r: statistics.median(v) for r, v in per.items()}
    print(f"proxy CPU per streamed {args.tokens}-token Messages answer ({load()}), "
          f"median of {args.rounds} rounds of {args.requests}:")  # fmt: skip
    for r in ROUTES:
        spread = f"{min(per[r]):.2f}-{max(per[r]):.2f}"
        print(f"  --messages-route {r:6}: {med[r]:.2f} ms (rounds {spread})")
    print(f"  token route adds {med['chat'] - med['native']:+.2f} ms per answer")


if __name__ == "__main__":
    main()

"""The proxy benchmarks' load generator and process probes (aiohttp, /proc).

Shared by ``proxy_bench.py`` and ``upstream_client_bench.py``: the request body shaped
like OpenHands', the targets started as processes, their CPU and RSS read from /proc,
and requests sent one at a time or at a given concurrency.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import threading
import time
import urllib.request
from dataclasses import dataclass, field

import aiohttp
import orjson

BENCH_KEY = "sk-bench-local-only"  # LiteLLM refuses to start without a master key


def openhands_like_body(size: int = 32 * 1024, stream: bool = False) -> bytes:
    """A ~32 KB chat request shaped like OpenHands' first request."""
    system = "You are OpenHands agent. " * 10
    tools = [
        {"type": "function", "function": {"name": n, "description": "d" * 200,
         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}
        for n in ("terminal", "file_editor", "task_tracker", "finish", "think")
    ]  # fmt: skip
    body = {
        "messages": [
            {"role": "system", "content": [{"type": "text", "text": system}]},
            {"role": "user", "content": [{"type": "text", "text": ""}]},
        ],
        "model": "stub",
        "tools": tools,
        "prompt_cache_key": "bench",
    }
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # as OpenHands sends it: no proxy change
    pad = size - len(orjson.dumps(body))
    body["messages"][1]["content"][0]["text"] = "x" * max(0, pad)
    return orjson.dumps(body)


def start_process(
    cmd: list[str],
    prefix: str,
    env: dict[str, str] | None = None,
    timeout: float = 120,
    cwd: str | None = None,
) -> tuple[subprocess.Popen[str], str]:
    """Start ``cmd``; return it and the URL from its first stdout line starting with ``prefix``."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=cwd
    )
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if prefix in line:
            url = line.split(prefix, 1)[1].split()[0]
            return proc, url
    proc.kill()
    raise RuntimeError(f"{cmd[0]} did not start")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


class RssSampler:
    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.pid, self.every, self.samples = pid, every, []  # type: ignore[var-annotated]
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), rss_mb(self.pid)))
            except OSError:
                return
            self._stop.wait(self.every)

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._t.join()
        return self.samples


@dataclass
class Sample:
    latency: list[float] = field(default_factory=list)  # ms
    ttfb: list[float] = field(default_factory=list)  # ms
    errors: int = 0
    wall: float = 0.0  # s, for throughput runs
    count: int = 0


async def one(
    session: aiohttp.ClientSession, url: str, body: bytes, stream: bool, s: Sample
) -> None:
    t0 = time.perf_counter()
    async with session.post(
        url,
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {BENCH_KEY}"},
    ) as r:
        if stream:
            first = True
            async for _ in r.content.iter_any():
                if first:
                    s.ttfb.append((time.perf_counter() - t0) * 1000)
                    first = False
        else:
            await r.read()
        if r.status != 200:
            s.errors += 1
    s.latency.append((time.perf_counter() - t0) * 1000)


async def sequential(
    session, urls: dict[str, str], body: bytes, stream: bool, n: int
) -> dict[str, Sample]:
    out = {name: Sample() for name in urls}
    for _ in range(n):
        for name, url in urls.items():  # interleaved, one request each
            await one(session, url, body, stream, out[name])
    return out


async def concurrent(session, url: str, body: bytes, stream: bool, n: int, conc: int) -> Sample:
    s = Sample()
    todo = iter(range(n))

    async def worker() -> None:
        for _ in todo:
            await one(session, url, body, stream, s)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(conc)))
    s.wall, s.count = time.perf_counter() - t0, n
    return s


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q / 100 * len(values)))]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2).read()
            return
        except Exception:
            time.sleep(0.5)
    raise RuntimeError(f"{url} did not answer in {timeout:.0f} s")

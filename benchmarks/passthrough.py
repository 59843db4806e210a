"""A minimal aiohttp pass-through that appends one JSON line per exchange: the issue's reference point.

``python benchmarks/passthrough.py UPSTREAM LOGFILE`` prints ``listening on URL``.
It forwards ``/r/<id>/<path>`` like the proxy but records only method, path
and status, with none of the proxy's guarantees; the benchmark runs it beside
the proxy so the cost of an extra HTTP hop on this machine is visible.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time

import aiohttp
import orjson
from aiohttp import web


async def serve(upstream: str, log_path: str) -> None:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    async def handle(request: web.BaseRequest) -> web.StreamResponse:
        body = await request.read()
        path = "/" + request.raw_path.split("/", 3)[3]
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length")
        }
        async with session.request(
            request.method, upstream + path, data=body, headers=headers
        ) as up:
            resp = web.StreamResponse(
                status=up.status, headers={"Content-Type": up.headers.get("Content-Type", "")}
            )
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
        os.write(fd, orjson.dumps({"t": time.time(), "path": path, "status": up.status}) + b"\n")
        return resp

    runner = web.ServerRunner(web.Server(handle))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    await session.close()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))

"""The reward control route of ``contagent proxy`` alone: ``POST /reward`` on its own port.

No agent can reach it: the agents' routes are the proxy's ``/r/<rollout_id>/...``, all
forwarded upstream, and this route listens on a port of its own (``--reward-port``, on
``--reward-host``, 127.0.0.1 by default) that a harness reaches and an agent is never given.
The body is ``{"rollout_id", "reward", "passed"?, "group"?}``; it is written to
``<record-dir>/<rollout_id>/reward.json`` (:mod:`contagent.rawlog.reward`) before the answer,
a 200 echoing the record. A bad body gets a 4xx whose JSON ``error.message`` is one line.
``contagent run`` never starts it: a run's reward is its verdict.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from contagent.errors import ContagentError
from contagent.http_site import HttpSite
from contagent.rawlog.reward import parse_post, write_reward

if TYPE_CHECKING:  # imported when the route starts: a proxy without it starts without aiohttp
    from aiohttp import web

log = logging.getLogger(__name__)

#: the route's one path
REWARD_PATH = "/reward"
#: the largest body taken (a reward post is a few dozen bytes)
MAX_REWARD_BODY = 64 * 1024


def _error(status: int, message: str) -> web.Response:
    from aiohttp import web

    body = {"error": {"message": message, "type": "invalid_request_error"}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


class RewardRoute(HttpSite):
    """The control route's server, on the proxy's event loop."""

    def __init__(self, record_dir: Path, host: str = "127.0.0.1", port: int = 0) -> None:
        super().__init__(host, port)
        self.record_dir = Path(record_dir)

    @property
    def url(self) -> str:
        return self.origin + REWARD_PATH

    async def start(self) -> None:
        from aiohttp import web

        server = web.Server(self._handle)
        await self.listen(web.ServerRunner(server, shutdown_timeout=2.0), "--reward-port: ")

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        if request.path != REWARD_PATH:
            return _error(404, f"no such route: the reward route is POST {REWARD_PATH}")
        if request.method != "POST":
            return _error(405, f"use POST {REWARD_PATH}")
        if request.content_length is not None and request.content_length > MAX_REWARD_BODY:
            return _error(413, f"the body is larger than {MAX_REWARD_BODY} bytes")
        raw = await request.content.read(MAX_REWARD_BODY + 1)
        if len(raw) > MAX_REWARD_BODY:
            return _error(413, f"the body is larger than {MAX_REWARD_BODY} bytes")
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return _error(400, "the body is not JSON")
        try:
            post = parse_post(data)
        except ContagentError as exc:
            return _error(400, str(exc))
        folder = self.record_dir / post.rollout_id
        if not folder.is_dir():
            return _error(404, f"no rollout {post.rollout_id!r} in {self.record_dir}")
        loop = asyncio.get_running_loop()
        try:
            record = await loop.run_in_executor(None, write_reward, folder, post)
        except ContagentError as exc:
            log.error("reward of %s not recorded: %s", post.rollout_id, exc)
            return _error(500, f"the reward could not be recorded: {exc}")
        from aiohttp import web

        body = orjson.dumps(record.model_dump(mode="json"))
        return web.Response(body=body, content_type="application/json")

"""The recording proxy: ``/r/<rollout_id>/<path>`` is forwarded to ``UPSTREAM/<path>``.

Per exchange, in this order: the request record is appended (index assigned
in the same synchronous step), the request goes upstream, the response goes
to the client (streams chunk by chunk as they arrive), and the outcome record
is appended before the client can see the end of the exchange
(:mod:`contagent.proxy.exchange`).

Both HTTP hops are asyncio protocols (:mod:`~contagent.proxy.downstream`,
:mod:`~contagent.proxy.upstream`) driving an :class:`Exchange` by callbacks.
The proxy never retries. A client that goes away closes the upstream
connection at once, so the server stops generating.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import ipaddress
import logging
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from contagent.errors import ContagentError
from contagent.layout import safe_segment
from contagent.proxy.addons import Hooks, ProxyAddon, make_addons
from contagent.proxy.admission import Denial, admit, client_api
from contagent.proxy.downstream import ClientConnection
from contagent.proxy.exchange import Exchange
from contagent.proxy.http1 import (
    DROP_REQUEST,
    Limits,
    credential_header,
    redact_query,
    upstream_request_head,
)
from contagent.proxy.identify import TokenPlan, plan_tokens
from contagent.proxy.late_plan import LatePlan
from contagent.proxy.pool import UpstreamPool
from contagent.proxy.proxy_options import ProxyOptions
from contagent.proxy.recorder import Recorder, RecordError, verbatim
from contagent.proxy.request import Request
from contagent.proxy.token_route import RouteChoice, check_route_mode, route_request
from contagent.proxy.upstream import tls_context
from contagent.rawlog.records import SAFE_HEADERS, request_record
from contagent.wire import server_root

log = logging.getLogger(__name__)

_SAFE = {name.encode(): name for name in SAFE_HEADERS}
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class RecordingProxy:
    """A server that forwards to ``upstream`` and records every exchange.

    Use from async code::

        proxy = RecordingProxy("http://127.0.0.1:8000", Path("records"))
        await proxy.start()
        client_base_url = proxy.rollout_base_url("rollout-1")  # .../r/rollout-1/v1
        ...
        await proxy.stop()   # finishes the records of requests in flight

    Its options (:class:`ProxyOptions`) are described there.
    """

    def __init__(
        self,
        upstream: str,
        record_dir: Path,
        options: ProxyOptions | None = None,
        **given: Any,
    ) -> None:
        """``options``, or the :class:`ProxyOptions` fields as keywords (over ``options``)."""
        opts = ProxyOptions(**given) if options is None else replace(options, **given)
        base = server_root(upstream)  # the client adds /v1 itself: accept either spelling
        if not base.startswith(("http://", "https://")):
            raise ContagentError(f"upstream {upstream!r} is not an http(s) URL")
        self.upstream = base
        if opts.upstream_ca is not None and not base.startswith("https://"):
            raise ContagentError("an upstream CA only applies to an https:// upstream")
        self._tls = tls_context(opts.upstream_ca) if base.startswith("https://") else None
        self._only_rollout = (
            None if opts.only_rollout is None else safe_segment(opts.only_rollout, "rollout id")
        )
        try:
            self._clients = (
                None if opts.allowed_clients is None else ipaddress.ip_network(opts.allowed_clients)
            )
        except ValueError as exc:
            raise ContagentError(f"allowed clients {opts.allowed_clients!r}: {exc}") from None
        self.record_dir = Path(record_dir)
        self.host = opts.host
        self.port = opts.port
        try:
            self._auth, auth_name = credential_header(
                opts.upstream_auth_header, opts.upstream_api_key, SAFE_HEADERS
            )
        except ValueError as exc:
            raise ContagentError(str(exc)) from None
        self._drop = DROP_REQUEST | {auth_name}  # the client's key never goes up in it either
        self._extra_head = b""  # header lines the proxy adds upstream, set by start()
        self._timeout = opts.upstream_timeout
        self._max_connections = opts.max_connections
        self.limits = opts.limits or Limits()
        self._stop_grace = opts.stop_grace
        self.recorder = Recorder(self.record_dir)
        #: the proxy's features, each an addon (:mod:`contagent.proxy.addons`)
        self.addons: list[ProxyAddon] = []
        self.hooks = Hooks([])
        self.set_addons(make_addons(opts))
        self._tokens_asked = opts.tokens
        self.server = opts.server
        #: which client APIs go upstream as chat completions (the token route)
        self.routes = RouteChoice(
            check_route_mode(opts.messages_route, "--messages-route"),
            check_route_mode(opts.responses_route, "--responses-route"),
        )
        self._chat_template = opts.chat_template
        #: ``--tokens auto`` still to decide, at the first contact (:mod:`.late_plan`)
        self.late: LatePlan | None = None
        self.counts: Counter[str] = Counter()
        #: every record that could not be written (a full disk, say): the log is incomplete
        self.record_errors: list[str] = []
        self._pool: UpstreamPool | None = None
        self._server: asyncio.AbstractServer | None = None
        self._conns: set[ClientConnection] = set()
        self._inflight: set[Exchange] = set()
        self._drained: asyncio.Event | None = None
        self._sweeper: asyncio.TimerHandle | None = None
        self.stopping = False

    def plan_tokens(self, mode: str) -> TokenPlan:
        """Resolve ``--tokens`` against the upstream and apply it (raises for ``on`` when
        the upstream is not vLLM)."""
        plan = self.check_tokens(mode)
        self.apply_plan(plan)
        return plan

    def check_tokens(self, mode: str) -> TokenPlan:
        """What ``--tokens`` resolves to against the upstream now (blocking; changes nothing)."""
        name, _, value = self._auth.decode("latin-1").rstrip("\r\n").partition(": ")
        plan = plan_tokens(
            mode, self.upstream, None, self._tls, headers={name: value} if name else {},
            chat_template=self._chat_template,
        )  # fmt: skip
        return replace(plan, line=self.routes.start_line(plan.line, plan.record))

    def set_addons(self, addons: list[ProxyAddon]) -> None:
        """The addons this proxy runs (before it serves: the hooks are sorted out once)."""
        self.addons = list(addons)
        self.hooks = Hooks(self.addons)

    def apply_plan(self, plan: TokenPlan) -> None:
        """The server ``plan`` found goes into every request record, and every addon hears
        what it said (token capture on or off, the server's default sampling)."""
        self._tokens_asked = plan.record
        self.server = plan.server
        for addon in self.hooks.planned:
            addon.planned(plan)

    @property
    def tokens(self) -> bool:
        """Token data is asked for and recorded (``--tokens`` as resolved)."""
        return self._tokens_asked

    @property
    def url(self) -> str:
        """Base URL the proxy listens on, e.g. ``http://127.0.0.1:8123``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def pool(self) -> UpstreamPool:
        assert self._pool is not None, "the proxy is not started"
        return self._pool

    def rollout_base_url(self, rollout_id: str) -> str:
        """The OpenAI ``base_url`` an agent of ``rollout_id`` should use."""
        return f"{self.url}/r/{safe_segment(rollout_id, 'rollout id')}/v1"

    async def start(self) -> None:
        """Bind and start serving; ``url`` then holds the real port."""
        self.record_dir.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        self._pool = UpstreamPool(
            self.upstream, connect_timeout=self._timeout, read_timeout=self._timeout,
            limit=self._max_connections, tls=self._tls,
        )  # fmt: skip
        self._drained = asyncio.Event()
        self._extra_head = self._auth + self._pool.proxy_auth
        try:
            self._server = await loop.create_server(
                lambda: ClientConnection(self, self.limits), self.host, self.port, backlog=1024
            )
        except OSError as exc:
            raise ContagentError(
                f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from exc
        sockets = self._server.sockets
        if sockets:
            self.port = sockets[0].getsockname()[1]
        self._sweeper = loop.call_later(self.limits.idle_timeout / 2, self._sweep_idle)
        log.info(
            "recording proxy on %s -> %s, records in %s", self.url, self.upstream, self.record_dir
        )

    async def stop(self) -> None:
        """Stop listening, let in-flight exchanges finish (up to ``stop_grace``), record the rest."""
        self.stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self._conns):
            conn.close_if_idle()
        if self._inflight and self._drained is not None:
            try:
                await asyncio.wait_for(self._drained.wait(), self._stop_grace)
            except TimeoutError:
                for ex in list(self._inflight):
                    ex.cut()
        for conn in list(self._conns):
            if conn.busy:  # cut above: the client must see a cut, not a clean end
                conn.abort()
            else:
                conn.close_if_idle()  # flushes what was written first
        if self._pool is not None:
            self._pool.close()
        await asyncio.sleep(0)  # let the transports run their connection_lost callbacks
        self.recorder.close()

    # -- the hot path: called by the client connections --------------------------------

    def admit(self, conn: ClientConnection) -> bool:
        if len(self._conns) >= self.limits.max_clients:
            return False
        self._conns.add(conn)
        return True

    def release(self, conn: ClientConnection) -> None:
        self._conns.discard(conn)

    def _sweep_idle(self) -> None:
        loop = asyncio.get_running_loop()
        now = loop.time()
        idle = self.limits.idle_timeout
        for conn in list(self._conns):
            if conn.idle_for(now) >= idle:
                conn.close_if_idle()
        self._sweeper = loop.call_later(idle / 2, self._sweep_idle)

    def cancel_waiting(self, ex: Exchange) -> None:
        self.pool.cancel(ex)

    def over(self, ex: Exchange) -> None:
        """``ex`` needs nothing more from upstream (it may still be writing to its client)."""
        if ex in self._inflight and self.hooks.left:
            ex.marks = {id(addon): addon.left() for addon in self.hooks.left}
        self._inflight.discard(ex)
        if self.stopping and not self._inflight and self._drained is not None:
            self._drained.set()

    def handle(self, conn: ClientConnection, req: Request) -> None:
        taken = admit(req.target, conn.peer, self._only_rollout, self._clients, self.recorder.known)
        if isinstance(taken, Denial):
            conn.respond_error(taken.status, taken.message, taken.kind, client_api(req.target))
            return
        rollout_id, path = taken.rollout_id, taken.path
        if self.late is not None and not self.late.decided:
            self.late.hold(lambda: self._admit(conn, req, rollout_id, path))
            return
        self._admit(conn, req, rollout_id, path)

    def _admit(
        self, conn: ClientConnection, req: Request, rollout_id: str, raw: bytes, start: int = 0
    ) -> None:
        """Forward now, or hold while an addon says so (from the ``start``-th admitting one)."""
        admitters = self.hooks.admit
        for i in range(start, len(admitters)):
            go = functools.partial(self._after_hold, conn, req, rollout_id, raw, i)
            if not admitters[i].admit(go):
                return  # held: the addon sends it on
        self._exchange(conn, req, rollout_id, raw)

    def _after_hold(
        self, conn: ClientConnection, req: Request, rollout_id: str, raw: bytes, held: int
    ) -> None:
        """A request the ``held``-th admitting addon held goes on, unless its client left."""
        if conn.closed or self.stopping:
            self._left()
            if not conn.closed:
                conn.respond_error(503, "the proxy is stopping", "proxy_error", client_api(raw))
            return
        self._admit(conn, req, rollout_id, raw, held + 1)

    def _left(self) -> None:
        """An admitted request is dropped before it went upstream."""
        for addon in self.hooks.left:
            addon.left()

    def _exchange(self, conn: ClientConnection, req: Request, rollout_id: str, raw: bytes) -> None:
        if conn.closed:  # gone while its request waited for the late --tokens decision
            return
        body = req.body
        received = time.time()
        # credentials in the query go upstream, not to disk
        recorded_path = redact_query(raw.decode("latin-1"))
        parsed: Any = None
        body_text = None
        if body:
            try:
                parsed = orjson.loads(body)
            except orjson.JSONDecodeError:
                body_text = body.decode("utf-8", "replace")
        sent = route_request(
            parsed, raw, req.method, self.hooks.request, self.routes, self.tokens, self.server
        )
        flow = sent.flow
        changes = flow.changes if flow is not None else []
        forward_body = orjson.dumps(flow.body) if flow is not None and sent.changed else body

        pool = self.pool
        head, safe = upstream_request_head(
            req.method, pool.target_prefix + pool.base_path + sent.raw, pool.host_header,
            req.headers, _SAFE, self._extra_head,
            len(forward_body) if forward_body or req.method in _BODY_METHODS else None, self._drop,
        )  # fmt: skip

        recorder = self.recorder
        index = -1
        try:
            index = recorder.next_index(rollout_id)
            record = request_record(
                index=index, rollout_id=rollout_id, time=received, method=req.method,
                path=recorded_path, headers=safe, body=verbatim(body, parsed), body_text=body_text,
                body_sha256=hashlib.sha256(body).hexdigest(), body_bytes=len(body),
                stream=sent.stream,
                upstream_changes=changes, server=self.server,
                **(flow.record if flow is not None else {}), **sent.record,
            )  # fmt: skip
            for addon in self.hooks.stamp:
                addon.stamp(record)
            recorder.append(rollout_id, record)
        except RecordError as exc:
            self._left()
            if index >= 0:
                recorder.release(rollout_id, index)
            log.error("%s", exc)
            self.record_errors.append(str(exc))
            message = f"contagent proxy could not record the request: {exc}"
            conn.respond_error(500, message, "proxy_error", client_api(raw))
            return
        if sent.refusal is not None:  # recorded as refused, answered in one line
            self._left()
            sent.refuse(conn, self.finish, record, client_api(raw))
            return
        ex = Exchange(
            self, conn, rollout_id, index, head_only=req.method == "HEAD",
            watch=flow.watch if flow is not None else None, translation=sent.translation,
            api=client_api(raw),
        )  # fmt: skip
        conn.responder = ex
        self._inflight.add(ex)
        # One buffer, one write: uvloop's writelines defers the send to the end of the loop
        # iteration (0.25-0.5 ms more to a stream's first chunk); the copy costs ~1 us.
        pool.send(ex, head + forward_body)

    def finish(self, record: dict[str, Any], marks: dict[int, Any] | None = None) -> bool:
        """Append an outcome record; False (and logged) when it could not be written.
        ``marks``: what each addon's ``left`` said when the exchange left upstream, if it has."""
        self.counts[record["outcome"]] += 1
        for addon in self.hooks.outcome:
            addon.outcome(record, marks.get(id(addon)) if marks else None)
        try:
            self.recorder.append(record["rollout_id"], record)
        except RecordError as exc:
            log.error("outcome of %s #%d lost: %s", record["rollout_id"], record["index"], exc)
            self.record_errors.append(str(exc))
            return False
        return True

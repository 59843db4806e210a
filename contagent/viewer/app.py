"""The read-only web app: aiohttp routes rendering Jinja2 templates with autoescape on.

Safety: only GET/HEAD routes; no URL is ever mapped onto a file path (static
files are a fixed in-memory set, rollouts are looked up by id, run files by a
fixed kind); every page is autoescaped and sent with a Content-Security-Policy
that allows the package's own script and style only, so agent output shown
on a page stays text. When bound to loopback, requests naming another host
(DNS rebinding) are refused.
"""

from __future__ import annotations

import asyncio
import ipaddress
import signal
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from jinja2 import Environment, PackageLoader, StrictUndefined

from contagent.charts import export_charts as charts
from contagent.errors import ContagentError
from contagent.http_site import HttpSite
from contagent.rawlog.read import MAX_RAW_LOG_BYTES
from contagent.viewer import listing, rollout_view
from contagent.viewer.source import Source, open_source

HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
_STATIC_TYPES = {".css": "text/css", ".js": "text/javascript"}
SOURCE_KEY = web.AppKey("source", Source)
CHARTS_KEY = web.AppKey("charts", dict)
CACHE_KEY = web.AppKey("cache", dict)


def _static_files() -> dict[str, tuple[bytes, str]]:
    files: dict[str, tuple[bytes, str]] = {}
    for entry in resources.files("contagent.viewer").joinpath("static").iterdir():
        suffix = Path(entry.name).suffix
        if suffix in _STATIC_TYPES:
            files[entry.name] = (entry.read_bytes(), _STATIC_TYPES[suffix])
    return files


def _templates() -> Environment:
    env = Environment(
        loader=PackageLoader("contagent.viewer", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["shown"] = listing.shown
    env.filters["pretty"] = rollout_view.pretty
    env.filters["qs"] = lambda params: urlencode(params)
    env.filters["count"] = lambda n: f"{n:,}" if isinstance(n, int) else listing.shown(n)
    return env


TEMPLATES = _templates()


def _render(request: web.Request, template: str, **context: Any) -> web.Response:
    source = request.app[SOURCE_KEY]
    html = TEMPLATES.get_template(template).render(source=source, path=str(source.root), **context)
    return web.Response(text=html, content_type="text/html", charset="utf-8")


def _source(request: web.Request) -> Source:
    source = request.app[SOURCE_KEY]
    try:
        source.refresh()
    except ContagentError as exc:
        raise _problem(request, 503, str(exc)) from None
    return source


def _problem(request: web.Request, status: int, text: str) -> web.HTTPException:
    html = TEMPLATES.get_template("problem.html").render(
        source=request.app[SOURCE_KEY], path=str(request.app[SOURCE_KEY].root), message=text
    )
    kind = {404: web.HTTPNotFound, 503: web.HTTPServiceUnavailable}[status]
    return kind(text=html, content_type="text/html")


async def summary_page(request: web.Request) -> web.Response:
    source = _source(request)
    made = charts.summary_charts(source.summary)
    request.app[CHARTS_KEY].clear()
    request.app[CHARTS_KEY].update({(source.generation, c.slug): c for c in made})
    return _render(
        request,
        "summary.html",
        s=source.summary,
        unreadable=source.unreadable,
        charts=made,
        generation=source.generation,
    )


async def chart_svg(request: web.Request) -> web.Response:
    source = _source(request)
    key = (int(request.match_info["generation"]), request.match_info["slug"])
    if key[0] != source.generation or key not in request.app[CHARTS_KEY]:
        # charts of an older generation are gone; draw the current ones
        found = {c.slug: c for c in charts.summary_charts(source.summary)}
        if key[1] not in found:
            raise web.HTTPNotFound()
        chart = found[key[1]]
    else:
        chart = request.app[CHARTS_KEY][key]
    loop = asyncio.get_running_loop()
    body = await loop.run_in_executor(None, charts.render, chart, "svg")
    return web.Response(body=body, content_type="image/svg+xml")


def _cached(request: web.Request, name: str, make: Callable[[], Any]) -> Any:
    """``make()``, computed once per generation of the rows."""
    cache = request.app[CACHE_KEY]
    generation = request.app[SOURCE_KEY].generation
    if cache.get("generation") != generation:
        cache.clear()
        cache["generation"] = generation
    if name not in cache:
        cache[name] = make()
    return cache[name]


async def list_page(request: web.Request) -> web.Response:
    source = _source(request)
    query = listing.Query.parse(request.query)
    page = listing.select(source.entries, query)
    return _render(
        request,
        "list.html",
        page=page,
        columns=listing.COLUMNS,
        options=_cached(request, "options", lambda: listing.options(source.entries)),
        generation=source.generation,
    )


def _row(request: web.Request) -> tuple[str, dict[str, Any]]:
    source = _source(request)
    rid = request.match_info["rid"]
    pos = source.by_id.get(rid)
    if pos is None:
        raise _problem(request, 404, f"no rollout {rid!r} here")
    entry = source.entries[pos]
    row = source.row(rid)
    if row is None:
        raise _problem(request, 404, f"rollout {rid!r} cannot be read: {entry.error}")
    return rid, row


async def rollout_page(request: web.Request) -> web.Response:
    rid, row = _row(request)
    source = request.app[SOURCE_KEY]
    files = [k for k in ("log", "result", "err") if source.run_file(rid, k) is not None]
    return _render(
        request,
        "rollout.html",
        rid=rid,
        row=row,
        f=rollout_view.facts(row),
        items=rollout_view.timeline(row),
        files=files,
    )


async def exchange_page(request: web.Request) -> web.Response:
    rid, row = _row(request)
    index = int(request.match_info["index"])
    try:
        raw = rollout_view.raw_exchange(row, index, request.app[SOURCE_KEY].max_raw_log)
    except ContagentError as exc:
        raise _problem(request, 404, str(exc)) from None
    return _render(request, "exchange.html", rid=rid, raw=raw)


async def file_page(request: web.Request) -> web.Response:
    rid, _ = _row(request)
    kind = request.match_info["kind"]
    path = request.app[SOURCE_KEY].run_file(rid, kind)
    if path is None:
        raise _problem(request, 404, f"rollout {rid!r} has no .{kind} file")
    text, cut = rollout_view.tail_text(path)
    return _render(request, "file.html", rid=rid, kind=kind, text=text, cut=cut, name=path.name)


async def state(request: web.Request) -> web.Response:
    source = _source(request)
    return web.json_response({"generation": source.generation, "rollouts": len(source.entries)})


async def static(request: web.Request) -> web.Response:
    found = request.app[STATIC_KEY].get(request.match_info["name"])
    if found is None:
        raise web.HTTPNotFound()
    return web.Response(body=found[0], content_type=found[1])


STATIC_KEY = web.AppKey("static", dict)
LOOPBACK_KEY = web.AppKey("loopback", bool)


@web.middleware
async def guard(request: web.Request, handler: Any) -> web.StreamResponse:
    if request.app[LOOPBACK_KEY] and not is_loopback((request.url.host or "").lower()):
        raise web.HTTPMisdirectedRequest(text="this viewer answers only to loopback names")
    try:
        response = await handler(request)
    except web.HTTPException as exc:
        exc.headers.update(HEADERS)
        raise
    response.headers.update(HEADERS)
    return response


def is_loopback(host: str) -> bool:
    if host in ("localhost", "localhost."):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def make_app(source: Source, *, loopback: bool = True) -> web.Application:
    app = web.Application(middlewares=[guard])
    app[SOURCE_KEY] = source
    app[CHARTS_KEY] = {}
    app[CACHE_KEY] = {}
    app[STATIC_KEY] = _static_files()
    app[LOOPBACK_KEY] = loopback
    app.router.add_get("/", summary_page)
    app.router.add_get("/rollouts", list_page)
    app.router.add_get("/rollouts/{rid}", rollout_page)
    app.router.add_get(r"/rollouts/{rid}/exchanges/{index:\d{1,9}}", exchange_page)
    app.router.add_get("/rollouts/{rid}/files/{kind:log|result|err}", file_page)
    app.router.add_get(r"/charts/{generation:\d{1,9}}/{slug:[a-z0-9-]{1,60}}.svg", chart_svg)
    app.router.add_get("/api/state", state)
    app.router.add_get("/static/{name}", static)
    return app


class Viewer(HttpSite):
    """The app served on ``host:port`` (port 0: any free one); a :class:`Service`."""

    def __init__(
        self,
        path: Path,
        host: str = "127.0.0.1",
        port: int = 8765,
        max_raw_log: int = MAX_RAW_LOG_BYTES,
    ) -> None:
        super().__init__(host, port)
        self.source = open_source(path, max_raw_log)

    @property
    def url(self) -> str:
        return self.origin + "/"

    async def start(self) -> None:
        app = make_app(self.source, loopback=is_loopback(self.host))
        await self.listen(web.AppRunner(app, access_log=None))


def serve(
    path: Path,
    host: str,
    port: int,
    on_ready: Callable[[str], None],
    max_raw_log: int = MAX_RAW_LOG_BYTES,
) -> None:
    """Serve PATH until SIGINT/SIGTERM; ``on_ready(url)`` once it listens."""
    viewer = Viewer(path, host, port, max_raw_log)

    async def main() -> None:
        await viewer.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            on_ready(viewer.url)
            await stop.wait()
        finally:
            await viewer.stop()

    asyncio.run(main())

"""An aiohttp server on one address: its origin, listening (an address it cannot take is a
one-line error) and stopping. The viewer, the proxy's reward route and the test stub each
serve one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contagent.errors import ContagentError

if TYPE_CHECKING:  # imported when a site listens: defining one (the proxy's) loads no aiohttp
    from aiohttp import web


class HttpSite:
    """A server listening on ``host:port``; port 0 takes any free one, and :attr:`port` is
    the bound one once :meth:`listen` returns."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._runner: web.BaseRunner | None = None

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def listen(self, runner: web.BaseRunner, refused: str = "", backlog: int = 128) -> None:
        """Set ``runner`` up and serve it; ``refused`` starts the error line (e.g. the option
        that named the address)."""
        from aiohttp import web

        await runner.setup()
        self._runner = runner
        try:
            await web.TCPSite(runner, self.host, self.port, backlog=backlog).start()
        except OSError as exc:
            await self.stop()
            raise ContagentError(
                f"{refused}cannot listen on {self.host}:{self.port}: {exc.strerror or exc}"
            ) from None
        self.port = runner.addresses[0][1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

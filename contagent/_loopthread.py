"""Run an asyncio server in a background thread, for synchronous callers (runner, tests)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, Generic, Protocol, TypeVar

T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when it is installed (it cuts the proxy's overhead), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    """A daemon thread running one event loop until :meth:`close`."""

    def __init__(self, name: str) -> None:
        self.loop = new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 60.0) -> T:
        """Run ``coro`` on the loop and wait for its result (its exception is re-raised here)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)


class Service(Protocol):
    async def start(self) -> None: ...
    async def stop(self) -> None: ...


S = TypeVar("S", bound=Service)


class InThread(Generic[S]):
    """A :class:`Service` served from its own loop thread: started by the constructor
    (which returns once it serves, or raises), stopped by :meth:`stop` or by leaving a
    ``with`` block, which also ends the thread."""

    #: how long :meth:`stop` waits for the service's own stop (None: as long as it takes)
    stop_timeout: float | None = 60.0

    def __init__(self, service: S, thread_name: str) -> None:
        self.service = service
        self._thread = LoopThread(thread_name)
        self._stopped = False
        try:
            self._thread.call(service.start())
        except BaseException:
            self._thread.close()
            raise

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._thread.call(self.service.stop(), timeout=self.stop_timeout)
        finally:
            self._thread.close()

    def __enter__(self) -> InThread[S]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

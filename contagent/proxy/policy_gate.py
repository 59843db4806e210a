"""The policy version and the pause, shared by every recording proxy of one engine.

A trainer that swaps weights while agents run needs two things from the proxies:

* which policy version each exchange ran under: the request record gets the version
  current when the request went upstream, the outcome record the one current when
  the exchange ended (``policy_version`` in both);
* a way to swap with nothing in flight: :meth:`PolicyGate.pause` makes every proxy
  hold new requests (each waits with its agent, its connection kept) until
  :meth:`PolicyGate.resume`, and :meth:`PolicyGate.wait_idle` returns once the
  requests already upstream have ended. Nothing in flight is ever aborted.

The proxies of a run each serve on their own event loop thread, so the gate is
thread-safe: a held request is handed back to its own loop when the pause ends.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable


class PolicyGate:
    """Thread-safe: the current policy version, the pause and the count of requests
    upstream, over every proxy given this gate."""

    def __init__(self, version: int = 0) -> None:
        self._cond = threading.Condition()
        self._version = version
        self._paused = False
        self._inflight = 0
        self._held: list[tuple[asyncio.AbstractEventLoop, Callable[[], None]]] = []

    @property
    def version(self) -> int:
        return self._version

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def inflight(self) -> int:
        """Requests gone upstream whose exchange has not ended yet."""
        return self._inflight

    @property
    def held(self) -> int:
        """Requests waiting for :meth:`resume`."""
        return len(self._held)

    def set_version(self, version: int) -> None:
        """The version exchanges from now on run under; versions never go back."""
        if isinstance(version, bool) or not isinstance(version, int):
            raise TypeError(f"a policy version is an int, not {version!r}")
        with self._cond:
            if version < self._version:
                raise ValueError(f"policy version {version} is older than {self._version}")
            self._version = version

    def admit(self, go: Callable[[], None]) -> bool:
        """Called on a proxy's loop for each new request: True when it may go upstream now
        (it is counted in flight), False when it is held, and ``go`` runs on this loop
        once the pause ends (already counted in flight)."""
        with self._cond:
            if not self._paused:
                self._inflight += 1
                return True
            self._held.append((asyncio.get_running_loop(), go))
            return False

    def ended(self) -> None:
        """An admitted request needs nothing more from upstream."""
        with self._cond:
            self._inflight -= 1
            if self._inflight <= 0:
                self._inflight = 0
                self._cond.notify_all()

    def pause(self) -> None:
        """Hold every new request until :meth:`resume`; requests upstream go on."""
        with self._cond:
            self._paused = True

    def wait_idle(self, timeout: float | None) -> bool:
        """Block until no admitted request is upstream; False when ``timeout`` (s) ran out."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self._inflight > 0:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def resume(self) -> None:
        """Let the held requests go upstream, each on its own proxy's loop."""
        with self._cond:
            self._paused = False
            held, self._held = self._held, []
            self._inflight += len(held)
        for loop, go in held:
            try:
                loop.call_soon_threadsafe(go)
            except RuntimeError:  # that proxy's loop is closed: its client is gone
                self.ended()

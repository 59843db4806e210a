"""What passes between an agent connection and what answers it.

:class:`~contagent.proxy.downstream.ClientConnection` hands each whole
:class:`Request` to its handler, and tells the exchange answering it, through
:class:`Responder`, when the client goes or stops and resumes reading.
"""

from __future__ import annotations

from typing import Protocol


class Request:
    """One parsed request, as received."""

    __slots__ = ("body", "headers", "http11", "keep_alive", "method", "target")

    def __init__(
        self,
        method: str,
        target: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
        http11: bool,
    ) -> None:
        self.http11 = http11
        self.method = method
        self.target = target
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive


class Responder(Protocol):
    """What a connection tells the exchange answering its current request."""

    def client_gone(self) -> None: ...
    def pause_upstream(self) -> None: ...
    def resume_upstream(self) -> None: ...

"""The few small JSON requests the proxy sends its upstream before it serves: what server it
is (:mod:`contagent.proxy.identify`) and how it reports logprobs (:mod:`contagent.proxy.probe`).

They go through the standard library's HTTP client, one connection each, in the calling
thread: the proxy already loads that client, so a proxy starts without loading an HTTP
client library for a handful of requests (docs/benchmarks.md "Start-up"). No redirect is
followed, no proxy from the environment is used, and answers are untrusted input: a larger
one than the caller takes is not read.
"""

from __future__ import annotations

import http.client
import ssl
import time
import urllib.parse
from typing import Any

import orjson

#: what a failed request raises: no answer, a broken one, or the deadline passed
ASK_ERRORS = (http.client.HTTPException, OSError, ValueError)


class UpstreamAsk:
    """GET and POST small JSON exchanges, all within one deadline of ``timeout_s`` seconds."""

    def __init__(self, timeout_s: float, tls: ssl.SSLContext | None) -> None:
        self._deadline = time.monotonic() + timeout_s
        self._tls = tls

    def get(self, url: str, headers: dict[str, str], max_bytes: int) -> tuple[int, Any]:
        """(status, the answer's JSON or None when it is not JSON or over ``max_bytes``)."""
        return self._ask("GET", url, None, headers, max_bytes)

    def post(
        self, url: str, body: dict[str, Any], headers: dict[str, str], max_bytes: int
    ) -> tuple[int, Any]:
        """``body`` sent as JSON; (status, the answer's JSON or None, as :meth:`get`)."""
        sent = {**headers, "Content-Type": "application/json"}
        return self._ask("POST", url, orjson.dumps(body), sent, max_bytes)

    def _ask(
        self, method: str, url: str, body: bytes | None, headers: dict[str, str], max_bytes: int
    ) -> tuple[int, Any]:
        parts = urllib.parse.urlsplit(url)
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the upstream did not answer in time")
        if parts.hostname is None or parts.scheme not in ("http", "https"):
            raise ValueError(f"not an http(s) URL: {url}")
        conn: http.client.HTTPConnection
        if parts.scheme == "https":
            tls = self._tls if self._tls is not None else ssl.create_default_context()
            conn = http.client.HTTPSConnection(
                parts.hostname, parts.port, timeout=left, context=tls
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=left)
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request(method, target, body=body, headers=headers)
            answer = conn.getresponse()
            status, raw = answer.status, answer.read(max_bytes + 1)
        finally:
            conn.close()
        try:
            return status, orjson.loads(raw) if len(raw) <= max_bytes else None
        except orjson.JSONDecodeError:
            return status, None

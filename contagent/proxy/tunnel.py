"""The upstream hop through an outbound HTTP proxy, as ``HTTP(S)_PROXY`` / ``NO_PROXY`` say.

The variables are read as Python's ``urllib`` reads them (either case;
``NO_PROXY`` hosts, domains and ``*``), once, when the proxy starts. A plain
``http://`` upstream is sent to the outbound proxy with absolute-form request
targets; an ``https://`` one goes through a ``CONNECT`` tunnel, inside which TLS
to the upstream is verified as without a proxy.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import urllib.request
from dataclasses import dataclass
from typing import cast
from urllib.parse import unquote, urlsplit
from urllib.request import proxy_bypass_environment  # type: ignore[attr-defined]

from contagent.errors import ContagentError

#: the outbound proxy's answer to CONNECT must fit in this
_MAX_CONNECT_HEAD = 16 * 1024


@dataclass(frozen=True)
class OutboundProxy:
    host: str
    port: int
    #: ``Proxy-Authorization`` header line (CRLF-terminated), or b""
    auth_line: bytes


def outbound_proxy(scheme: str, host: str) -> OutboundProxy | None:
    """The outbound proxy the environment names for ``scheme://host``, if any."""
    proxies = urllib.request.getproxies_environment()
    url = proxies.get(scheme)
    if not url or proxy_bypass_environment(host, proxies):
        return None
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ContagentError(
            f"{scheme.upper()}_PROXY {url!r}: only http:// outbound proxies are supported"
        )
    auth = b""
    if parts.username is not None:
        user_pass = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        auth = b"Proxy-Authorization: Basic %s\r\n" % base64.b64encode(user_pass.encode())
    return OutboundProxy(parts.hostname, parts.port or 80, auth)


class _Connect(asyncio.Protocol):
    """Reads the outbound proxy's answer to CONNECT; then TLS takes the transport over."""

    def __init__(self) -> None:
        self.head = bytearray()
        self.answer: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        self.head += data
        end = self.head.find(b"\r\n\r\n")
        if self.answer.done():
            return
        if end >= 0:
            self.answer.set_result(bytes(self.head[:end]))
        elif len(self.head) > _MAX_CONNECT_HEAD:
            self.answer.set_exception(OSError("outbound proxy sent an oversized answer to CONNECT"))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.answer.done():
            self.answer.set_exception(
                OSError("outbound proxy closed the connection during CONNECT")
            )


async def open_tunnel(
    via: OutboundProxy, host: str, port: int, tls: ssl.SSLContext
) -> asyncio.Transport:
    """A TLS transport to ``host:port`` through ``via``'s CONNECT tunnel; raises OSError."""
    loop = asyncio.get_running_loop()
    transport, connect = await loop.create_connection(_Connect, via.host, via.port)
    try:
        authority = (f"[{host}]:{port}" if ":" in host else f"{host}:{port}").encode("idna")
        transport.write(
            b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n" % (authority, authority, via.auth_line)
        )
        head = await connect.answer
        status_line = head.split(b"\r\n", 1)[0]
        fields = status_line.split(None, 2)
        if len(fields) < 2 or not fields[1].startswith(b"2"):
            raise OSError(f"outbound proxy refused CONNECT: {status_line.decode('latin-1')[:200]}")
        tls_transport = await loop.start_tls(transport, connect, tls, server_hostname=host)
        if tls_transport is None:
            raise OSError("TLS through the outbound proxy's tunnel did not start")
        return cast(asyncio.Transport, tls_transport)
    except BaseException:
        transport.abort()
        raise

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


async def open_tunnel(
    via: OutboundProxy, host: str, port: int, tls: ssl.SSLContext, timeout: float | None
) -> asyncio.Transport:
    """A TLS transport to ``host:port`` through ``via``'s CONNECT tunnel; raises OSError."""
    loop = asyncio.get_running_loop()
    reader, writer = await asyncio.open_connection(via.host, via.port, limit=_MAX_CONNECT_HEAD)
    try:
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        writer.write(
            b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s\r\n"
            % (authority.encode("idna"), authority.encode("idna"), via.auth_line)
        )
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
        except asyncio.LimitOverrunError:
            raise OSError("outbound proxy sent an oversized answer to CONNECT") from None
        except asyncio.IncompleteReadError:
            raise OSError("outbound proxy closed the connection during CONNECT") from None
        status_line = head.split(b"\r\n", 1)[0]
        fields = status_line.split(None, 2)
        if len(fields) < 2 or not fields[1].startswith(b"2"):
            raise OSError(f"outbound proxy refused CONNECT: {status_line.decode('latin-1')[:200]}")
        transport = writer.transport
        tls_transport = await loop.start_tls(
            transport, transport.get_protocol(), tls, server_hostname=host
        )
        if tls_transport is None:
            raise OSError("TLS through the outbound proxy's tunnel did not start")
        return cast(asyncio.Transport, tls_transport)
    except BaseException:
        writer.transport.abort()
        raise

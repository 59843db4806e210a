"""HTTP/1.1 rules both hops share: hop-by-hop sets, head building, limits, body decoding.

The agent side (:mod:`~contagent.proxy.downstream`) faces untrusted clients,
so every resource a client can make the proxy hold has a limit here, with
the status RFC 9110/6585 gives for it (413, 414, 431, 503, 408).
"""

from __future__ import annotations

import http
import re
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

#: never forwarded on either hop (RFC 9110 7.6.1), nor anything a ``Connection`` header names
HOP_BY_HOP = frozenset(
    {b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization",
     b"proxy-connection", b"te", b"trailer", b"trailers", b"transfer-encoding", b"upgrade"}
)  # fmt: skip
#: request headers not forwarded: hop-by-hop, framing the proxy redoes, the client's credentials
DROP_REQUEST = HOP_BY_HOP | {
    b"host",
    b"content-length",
    b"authorization",
    b"api-key",
    b"x-api-key",
    b"accept-encoding",
    b"expect",
}
#: header names that cannot carry the upstream key: what the proxy frames or drops itself
_NOT_CREDENTIALS = HOP_BY_HOP | {b"host", b"content-length", b"accept-encoding", b"expect"}
_TOKEN = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: response headers not relayed: the proxy frames what it sends to the client itself
DROP_RESPONSE = HOP_BY_HOP | {b"content-length"}
NO_BODY_STATUS = frozenset({204, 304})
_PHRASES = {s.value: s.phrase.encode() for s in http.HTTPStatus}


@dataclass(frozen=True)
class Limits:
    """What one client may make the proxy hold; each has a documented default (docs/proxy.md)."""

    #: request body bytes (413 beyond); OpenHands' largest bodies are a few MB
    max_body: int = 256 * 1024 * 1024
    #: request-target bytes (414 beyond)
    max_target: int = 8 * 1024
    #: request line and header bytes together (431 beyond), as nginx's default buffers
    max_head: int = 64 * 1024
    #: header fields per request (431 beyond)
    max_headers: int = 100
    #: seconds from a request's first byte to the end of its head (408, then closed)
    head_timeout: float = 30.0
    #: seconds a connection may sit idle between requests before it is closed
    idle_timeout: float = 75.0
    #: client connections open at once; more are answered 503 and closed
    max_clients: int = 1024

    def __post_init__(self) -> None:
        for name in self.__dataclass_fields__:
            if getattr(self, name) <= 0:
                raise ValueError(f"limit {name} must be positive")


def header_tokens(values: Iterable[bytes]) -> set[bytes]:
    """The lower-cased comma-separated tokens of header values (``Connection``, ``TE``...)."""
    out: set[bytes] = set()
    for value in values:
        out.update(t.strip().lower() for t in value.split(b","))
    out.discard(b"")
    return out


def response_head(
    status: int, headers: list[tuple[bytes, bytes]], framing: bytes, close: bool
) -> bytes:
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, _PHRASES.get(status, b"Unknown"))]
    for name, value in headers:
        parts.append(name + b": " + value + b"\r\n")
    parts.append(framing)
    if close:
        parts.append(b"Connection: close\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


def relayed_response_headers(
    headers: list[tuple[bytes, bytes]], keep_length: bool
) -> tuple[list[tuple[bytes, bytes]], bool]:
    """The upstream's response headers as the client gets them, and whether they announce
    an event stream.

    ``keep_length``: a HEAD answer, whose ``Content-Length`` describes a body never sent.
    """
    out = []
    sse = False
    named: list[bytes] = []
    for name, value in headers:  # one pass: this runs for every answer
        low = name.lower()
        if low not in DROP_RESPONSE or (keep_length and low == b"content-length"):
            out.append((name, value))
            if low == b"content-type" and value.lower().startswith(b"text/event-stream"):
                sse = True  # media types are case-insensitive
        elif low == b"connection":
            named.append(value)
    if named:  # rare: what a Connection header names is hop-by-hop too
        drop = header_tokens(named)
        if keep_length:
            drop.discard(b"content-length")
        out = [(n, v) for n, v in out if n.lower() not in drop]
        sse = any(
            n.lower() == b"content-type" and v.lower().startswith(b"text/event-stream")
            for n, v in out
        )
    return out, sse


# -- credentials in the query string ----------------------------------------------------

_SECRET_PARAM = re.compile(
    r"(?i)(?:^|[-_.])(?:key|apikey|token|secret|password|passwd|signature|sig|auth|"
    r"authorization|credential|credentials)$"
)


def redact_query(path: str) -> str:
    """``path`` with the values of credential-like query parameters replaced, for the record."""
    base, sep, query = path.partition("?")
    if not sep:
        return path
    parts = []
    for item in query.split("&"):
        name, eq, _ = item.partition("=")
        plain = name.replace("%5F", "_").replace("%5f", "_").replace("%2D", "-").replace("%2d", "-")
        if eq and _SECRET_PARAM.search(plain):
            item = f"{name}=REDACTED"
        parts.append(item)
    return f"{base}?{'&'.join(parts)}"


# -- content codings ----------------------------------------------------------------------


class BodyDecoder:
    """Decodes a ``Content-Encoding`` chain; :meth:`finish` says whether the body ended whole."""

    def __init__(self, steps: list[_Step]) -> None:
        self.steps = steps

    def decode(self, data: bytes) -> bytes:
        for step in self.steps:
            data = step.feed(data)
        return data

    def finish(self) -> str | None:
        """Why the encoded body is incomplete, or None when every coding ended cleanly."""
        for step in self.steps:
            if not step.complete():
                return f"{step.name} body truncated"
        return None


class _Step:
    name = ""

    def feed(self, data: bytes) -> bytes:
        raise NotImplementedError

    def complete(self) -> bool:
        raise NotImplementedError


class _Zlib(_Step):
    """gzip, or deflate, which servers send zlib-wrapped (RFC 9110) or raw (as IIS did)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.first = name == "deflate"
        self.obj = zlib.decompressobj(wbits=31 if name == "gzip" else 15)

    def feed(self, data: bytes) -> bytes:
        if self.first and data:
            self.first = False
            try:
                return self.obj.decompress(data)
            except zlib.error:
                self.obj = zlib.decompressobj(wbits=-15)
        return self.obj.decompress(data)

    def complete(self) -> bool:
        return self.obj.eof and not self.obj.unconsumed_tail


class _Brotli(_Step):
    name = "br"

    def __init__(self) -> None:
        import brotli

        self.obj = brotli.Decompressor()

    def feed(self, data: bytes) -> bytes:
        try:
            return bytes(self.obj.process(data))
        except Exception as exc:  # brotli.error; the module is optional
            raise zlib.error(f"brotli: {exc}") from None

    def complete(self) -> bool:
        return bool(self.obj.is_finished())


class _Zstd(_Step):
    name = "zstd"

    def __init__(self) -> None:
        import zstandard

        self.obj = zstandard.ZstdDecompressor().decompressobj()

    def feed(self, data: bytes) -> bytes:
        import zstandard

        try:
            return bytes(self.obj.decompress(data))
        except zstandard.ZstdError as exc:
            raise zlib.error(str(exc)) from None

    def complete(self) -> bool:
        return bool(self.obj.eof)


def _available() -> dict[bytes, Callable[[], _Step]]:
    makers: dict[bytes, Callable[[], _Step]] = {
        b"gzip": lambda: _Zlib("gzip"),
        b"x-gzip": lambda: _Zlib("gzip"),
        b"deflate": lambda: _Zlib("deflate"),
    }
    try:  # optional, as in httpx: decoded when installed
        import brotli  # noqa: F401

        makers[b"br"] = _Brotli
    except ImportError:
        pass
    try:
        import zstandard  # noqa: F401

        makers[b"zstd"] = _Zstd
    except ImportError:
        pass
    return makers


DECODERS = _available()


def body_decoder(headers: list[tuple[bytes, bytes]]) -> BodyDecoder | None:
    """A decoder for the response's ``Content-Encoding``; None when the body is plain, or
    carries a coding this proxy cannot decode (relayed as is, its header with it)."""
    codings: list[bytes] = []
    for name, value in headers:
        if name.lower() == b"content-encoding":
            codings += [t.strip().lower() for t in value.split(b",") if t.strip()]
    codings = [c for c in codings if c != b"identity"]
    if not codings or any(c not in DECODERS for c in codings):
        return None
    return BodyDecoder([DECODERS[c]() for c in reversed(codings)])  # applied last, undone first


# -- the request head sent upstream -------------------------------------------------------


def credential_header(name: str, key: str | None, recorded: Iterable[str]) -> tuple[bytes, bytes]:
    """The header line that carries the upstream key (empty without a key) and the lower-cased
    name, which the client's request then never forwards. ``Authorization`` carries
    ``Bearer <key>`` (what vLLM and OpenAI check); any other header (``x-api-key``, as
    Anthropic's API wants) the key itself. ``recorded``: header names that are recorded,
    which therefore cannot carry a credential. Raises ValueError for a name that is not
    an HTTP field name or belongs to the proxy's framing."""
    raw = name.strip().encode("latin-1", "replace")
    low = raw.lower()
    if not _TOKEN.fullmatch(raw) or low in _NOT_CREDENTIALS:
        raise ValueError(f"upstream auth header {name!r}: not a header that can carry a key")
    if low.decode() in {r.lower() for r in recorded}:
        raise ValueError(f"upstream auth header {name!r}: it is recorded, so it cannot carry a key")
    if not key:
        return b"", low
    if not key.isascii() or any(c in key for c in "\r\n\0"):
        raise ValueError("the upstream API key must be ASCII on one line")
    value = b"Bearer " + key.encode() if low == b"authorization" else key.encode()
    return raw + b": " + value + b"\r\n", low


def upstream_request_head(
    method: str,
    target: bytes,
    host: bytes,
    headers: list[tuple[bytes, bytes]],
    safe_names: dict[bytes, str],
    extra: bytes,
    body_length: int | None,
    drop: frozenset[bytes] = DROP_REQUEST,
) -> tuple[bytes, dict[str, str]]:
    """The head of the forwarded request, and the allow-listed headers to record.

    ``safe_names`` maps lower-cased header names to their recorded spelling;
    ``extra`` holds whole header lines the proxy adds (its own credentials);
    ``drop`` the lower-cased names never forwarded (:data:`DROP_REQUEST` and more).
    """
    safe: dict[str, str] = {}
    head = [method.encode() + b" " + target + b" HTTP/1.1\r\nHost: " + host + b"\r\n"]
    named: list[bytes] = []
    for name, value in headers:  # one pass: this runs for every request
        low = name.lower()
        key = safe_names.get(low)
        if key is not None:
            text = value.decode("latin-1")
            safe[key] = f"{safe[key]}, {text}" if key in safe else text
        if low not in drop:
            head.append(name + b": " + value + b"\r\n")
        elif low == b"connection":
            named.append(value)
    if named:  # rare: what a Connection header names is hop-by-hop too
        named_drop = drop | header_tokens(named)
        head[1:] = [n + b": " + v + b"\r\n" for n, v in headers if n.lower() not in named_drop]
    head.append(b"Accept-Encoding: identity\r\n")
    head.append(extra)
    if body_length is not None:
        head.append(b"Content-Length: %d\r\n" % body_length)
    head.append(b"\r\n")
    return b"".join(head), safe

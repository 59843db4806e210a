"""The wire APIs a recorded agent may speak, one adapter module each, and the table of them.

An adapter owns everything one API means on the wire: its routes, whether its exchanges are
generations, how a recorded exchange reads in chat shape, when a response is complete, how
its stream ends and is folded back into the response, how its tools render for the trainer
formats, and whether the server returns token ids for it. Every other module asks this
table, so no route, event or block type of an API is written outside its adapter.

Adding an API is one module that defines ``ADAPTER`` (a :class:`WireApi`) and one line of
:data:`TABLE`. Adapters are imported on first use, so importing this package costs nothing.
The table's order is the order in which adapters are offered a route, a stream event or a
response: a more specific route comes before a shorter one that it ends with.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib import import_module
from typing import Any, Protocol

#: adapter name -> the module whose ``ADAPTER`` it is. The name is what a request record's
#: ``api`` and an agent's ``api`` say.
TABLE: dict[str, str] = {
    "messages": "contagent.wire.messages_api",
    "responses": "contagent.wire.responses",
    "chat": "contagent.wire.chat_completions",
    "completions": "contagent.wire.text_completions",
}

#: Problems an adapter reports while reading a log in chat shape: (kind, text).
Problems = list[tuple[str, str]]


class StreamFolder(Protocol):
    """Folds one stream's typed events into the response the API would have returned whole."""

    #: the usage the stream reported so far, None: none
    usage: dict[str, Any] | None
    #: events that fit no place in the response
    misplaced: int

    def feed(self, etype: str, event: dict[str, Any]) -> None: ...

    def takes(self, etype: str) -> bool:
        """Whether an event no adapter claims belongs to this stream once it has begun."""
        ...

    def result(self) -> Any: ...


class WireApi(Protocol):
    """One wire API. Its properties are plain class attributes in an adapter: the proxy reads
    them on its hot path."""

    #: the key of :data:`TABLE`
    @property
    def name(self) -> str: ...

    #: how its routes' paths end (no query string)
    @property
    def routes(self) -> tuple[str, ...]: ...

    #: its exchanges are generations, read by the export as steps
    @property
    def generation(self) -> bool: ...

    #: bytes found in the event that ends its stream (checked even split across reads)
    @property
    def end_markers(self) -> tuple[bytes, ...]: ...

    #: a stream of it carries usage only when ``stream_options.include_usage`` asks
    @property
    def usage_on_request(self) -> bool: ...

    #: the proxy may ask the server for token ids on it (``--tokens``)
    @property
    def tokens(self) -> bool: ...

    #: a ``--chat-template`` is sent with its requests
    @property
    def chat_template(self) -> bool: ...

    #: sampling key -> the body fields that carry it, where they are not the key itself;
    #: None: the proxy neither sets nor records its sampling
    @property
    def sampling_fields(self) -> Mapping[str, tuple[str, ...]] | None: ...

    #: the sampling keys it has, None: all of them
    @property
    def sampling_keys(self) -> frozenset[str] | None: ...

    def is_end_event(self, payload: str) -> bool:
        """Does this event's data end the stream?"""
        ...

    def claims_event(self, etype: str) -> bool:
        """Is a stream event of this ``type`` one of this API's?"""
        ...

    def stream_folder(self) -> StreamFolder | None:
        """A folder for its typed stream events; None: its events are untyped chat chunks."""
        ...

    def judge(self, response: dict[str, Any]) -> tuple[bool, str | None] | None:
        """(complete, why not) for a response of this API; None: not one of its responses."""
        ...

    def to_chat(
        self, requests: dict[int, dict[str, Any]], outcomes: dict[int, dict[str, Any]]
    ) -> Problems:
        """Rewrite this API's exchanges of a raw log into chat shape, in place."""
        ...

    def request_messages(self, body: dict[str, Any]) -> list[Any] | None:
        """A request body's chat messages, for a body read by the lenient parser."""
        ...

    def function_tool(self, tool: dict[str, Any]) -> dict[str, Any] | None:
        """A tool definition of this API's function shape as a chat function definition
        (``{"name", "parameters", ...}``); None: not of that shape."""
        ...

    def render_tool(self, tool: dict[str, Any], model: Any) -> list[dict[str, Any]] | None:
        """The function tools vLLM renders for a non-function tool on this API, or None when
        that rendering is not known."""
        ...

    def error_body(self, status: int, message: str, kind: str) -> bytes:
        """The JSON body of an error the proxy itself answers a client of this API with
        ``status`` (``kind``: the proxy's name for it, the OpenAI shape's ``type``);
        :mod:`contagent.wire.error_shapes` builds it."""
        ...

    def error_event(self, status: int, message: str, kind: str, sent: int) -> bytes:
        """The bytes of the event that ends a stream of this API the proxy cuts with an
        error, after ``sent`` events the client got."""
        ...


_LOADED: dict[str, WireApi] = {}


def adapter(name: str) -> WireApi:
    """The adapter called ``name``; raises KeyError for a name not in :data:`TABLE`."""
    found = _LOADED.get(name)
    if found is None:
        found = _LOADED[name] = import_module(TABLE[name]).ADAPTER
    return found


_ALL: list[tuple[WireApi, ...]] = []


def adapters() -> tuple[WireApi, ...]:
    """Every adapter, in table order (imported on the first call)."""
    if not _ALL:
        _ALL.append(tuple(adapter(name) for name in TABLE))
    return _ALL[0]


#: route -> its adapter, as :func:`for_route` found it: a proxy sees few distinct routes
_BY_ROUTE: dict[str, WireApi | None] = {}
#: more distinct routes than any client uses: past it, routes are looked up every time
_MAX_ROUTES = 1024


def for_route(route: str) -> WireApi | None:
    """The adapter whose route ``route`` (a path without its query string) ends with."""
    if route in _BY_ROUTE:
        return _BY_ROUTE[route]
    api = next((a for a in adapters() if route.endswith(a.routes)), None)
    if len(_BY_ROUTE) < _MAX_ROUTES:
        _BY_ROUTE[route] = api
    return api


def for_path(path: Any) -> WireApi | None:
    """The adapter of a request record's ``path`` (a query string, a trailing slash and any
    base path before it allowed), or None."""
    if not isinstance(path, str):
        return None
    return for_route(path.partition("?")[0].rstrip("/"))


def generation_api(path: Any) -> WireApi | None:
    """The adapter of ``path`` when its exchanges are generations, else None."""
    api = for_path(path)
    return api if api is not None and api.generation else None


def error_api(path: str | None) -> WireApi:
    """The adapter whose error shape a client of ``path`` (as :func:`for_path` reads it)
    gets: its API's, else the OpenAI shape of the chat API."""
    api = for_path(path)
    return api if api is not None else adapter("chat")


def end_markers() -> tuple[bytes, ...]:
    """Every adapter's stream end markers, each once."""
    return tuple(dict.fromkeys(m for api in adapters() for m in api.end_markers))


def is_end_event(payload: str) -> bool:
    """Does this event's data end its stream, in any API?"""
    return any(api.is_end_event(payload) for api in adapters())


def server_root(url: str) -> str:
    """A server's root URL, to which every adapter's route is appended whole: ``url`` without
    trailing slashes and an OpenAI-style ``/v1`` (given either way)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url

"""The proxy's features as addons: each one module with a request hook, and a table of them.

The server core forwards and records; everything it does to a request on the way up, and
anything it does to the response on the way back, is an addon's. Per request the core builds
a :class:`Flow` (the request as it will go upstream, the wire API its route belongs to) and
passes it to every addon in :data:`TABLE` order; an addon may replace the body it sends
(never changing the client's, which is what gets recorded), list what it changed in the
request record's ``upstream_changes``, set request record fields, and watch the response
(:class:`ResponseWatch`: the whole JSON body, or each stream event, and the outcome record's
fields it adds). Once the upstream is identified (``--tokens``), every addon hears of it
(:meth:`ProxyAddon.planned`).

Adding a feature is one module that defines ``make(options)`` (the addon for these
:class:`~contagent.proxy.server.ProxyOptions`, or None when they leave it off) and one line
of :data:`TABLE`. Addons are imported when a proxy is made, never at start-up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, Protocol

from contagent import wire

if TYPE_CHECKING:
    from contagent.proxy.identify import TokenPlan
    from contagent.proxy.proxy_options import ProxyOptions
    from contagent.wire import WireApi

#: addon name -> its module. The order is the order the hooks run in, and so the order of a
#: request record's ``upstream_changes``.
TABLE: dict[str, str] = {
    "usage": "contagent.proxy.addons.usage_addon",
    "sampling": "contagent.proxy.addons.sampling_addon",
    "chat_template": "contagent.proxy.addons.template_addon",
    "tokens": "contagent.proxy.addons.token_addon",
}


@dataclass(slots=True)
class Flow:
    """One request on its way upstream, as the addons see and change it."""

    #: the wire API of its route
    api: WireApi
    #: the client asked for a stream
    stream: bool
    #: the body that goes upstream: replace it with a changed copy, never change it in place
    #: (the client's body is the one recorded)
    body: dict[str, Any]
    #: the request record's ``upstream_changes``, in the order they were made
    changes: list[str] = field(default_factory=list)
    #: request record fields the addons set (field name -> value)
    record: dict[str, Any] = field(default_factory=dict)
    #: what watches the response, None: nothing
    watch: ResponseWatch | None = None


class ResponseWatch(Protocol):
    """An addon's eye on one exchange's response: the whole JSON body, or each stream event.

    With a watch, a stream is relayed event by event (each parsed, then re-sent as the client
    gets it) instead of chunk by chunk.
    """

    def seen(self, obj: Any) -> None:
        """A parsed JSON body (status 200) or stream event, before the client gets it."""
        ...

    def hide(self, obj: Any) -> bool:
        """Change ``obj`` into what the client gets; whether anything changed."""
        ...

    def fields(self) -> dict[str, Any]:
        """The outcome record's fields this watch adds."""
        ...


class ProxyAddon(Protocol):
    """One proxy feature."""

    def request(self, flow: Flow) -> None:
        """Change the request on its way upstream, or set a watch on its response."""
        ...

    def planned(self, plan: TokenPlan) -> None:
        """The upstream was identified (``--tokens`` resolved): the server and what it said."""
        ...


def make_addons(options: ProxyOptions) -> list[ProxyAddon]:
    """The addons ``options`` turn on, in table order."""
    made = (import_module(module).make(options) for module in TABLE.values())
    return [addon for addon in made if addon is not None]


def request_flow(parsed: Any, route: str, stream: bool, addons: list[ProxyAddon]) -> Flow | None:
    """The addons' changes to one request (``route``: its path without the query); None when
    the body is no JSON object or the route is of no wire API."""
    if not isinstance(parsed, dict):
        return None
    api = wire.for_route(route)
    if api is None:
        return None
    out = Flow(api, stream, parsed)
    for addon in addons:
        addon.request(out)
    return out

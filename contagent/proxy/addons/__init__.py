"""The proxy's features as addons: each one module with a request hook, and a table of them.

The server core forwards and records; everything it does to a request on the way up, and
anything it does to the response on the way back, is an addon's. Per request the core builds
a :class:`Flow` (the request as it will go upstream, the wire API its route belongs to) and
passes it to every addon in :data:`TABLE` order; an addon may replace the body it sends
(never changing the client's, which is what gets recorded), list what it changed in the
request record's ``upstream_changes``, set request record fields, and watch the response
(:class:`ResponseWatch`: the whole JSON body, or each stream event, and the outcome record's
fields it adds). Around that, an addon may hold a request before it goes upstream, add to
the request and outcome records, hear when an exchange leaves upstream, and hear once the
upstream is identified (``--tokens``): :class:`ProxyAddon`'s hooks.

Adding a feature is one module that defines ``make(options)`` (the addon for these
:class:`~contagent.proxy.server.ProxyOptions`, or None when they leave it off) and one line
of :data:`TABLE`. Addons are imported when a proxy is made, never at start-up.
"""

from __future__ import annotations

from collections.abc import Callable
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
    "policy": "contagent.proxy.addons.policy_addon",
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
    """One proxy feature: a hook for each moment of an exchange. An addon defines the hooks
    it needs over :class:`AddonBase`'s, and the core calls only those (:class:`Hooks`)."""

    def admit(self, go: Callable[[], None]) -> bool:
        """A request may go upstream now (True), or is held (False) and ``go`` runs on the
        proxy's loop when it may. Every request admitted is later :meth:`left`."""
        ...

    def request(self, flow: Flow) -> None:
        """Change the request on its way upstream, or set a watch on its response."""
        ...

    def stamp(self, record: dict[str, Any]) -> None:
        """Add to the request record just before it is written."""
        ...

    def left(self) -> Any:
        """An admitted request needs nothing more from upstream (or was dropped first); what
        is returned is given back to :meth:`outcome` for its outcome record."""
        ...

    def outcome(self, record: dict[str, Any], mark: Any) -> None:
        """Add to an outcome record just before it is written; ``mark``: what :meth:`left`
        returned for its exchange, None when it had not left upstream."""
        ...

    def planned(self, plan: TokenPlan) -> None:
        """The upstream was identified (``--tokens`` resolved): the server and what it said."""
        ...


class AddonBase:
    """Every hook doing nothing: an addon subclasses this and defines what it needs."""

    def admit(self, go: Callable[[], None]) -> bool:
        return True

    def request(self, flow: Flow) -> None:
        return None

    def stamp(self, record: dict[str, Any]) -> None:
        return None

    def left(self) -> Any:
        return None

    def outcome(self, record: dict[str, Any], mark: Any) -> None:
        return None

    def planned(self, plan: TokenPlan) -> None:
        return None


_HOOKS = ("admit", "request", "stamp", "left", "outcome", "planned")


class Hooks:
    """Per hook, the addons that define it, in table order: built once, so that an exchange
    calls no hook that does nothing."""

    __slots__ = _HOOKS

    def __init__(self, addons: list[ProxyAddon]) -> None:
        for hook in _HOOKS:
            base = getattr(AddonBase, hook)
            setattr(self, hook, [a for a in addons if getattr(type(a), hook, base) is not base])

    admit: list[ProxyAddon]
    request: list[ProxyAddon]
    stamp: list[ProxyAddon]
    left: list[ProxyAddon]
    outcome: list[ProxyAddon]
    planned: list[ProxyAddon]


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

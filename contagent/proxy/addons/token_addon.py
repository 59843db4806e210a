"""Token capture (``--tokens``) as an addon: on an API whose server returns token ids
(:attr:`contagent.wire.WireApi.tokens`), the request asks for them, the outcome record gets
them and the client never sees them (:mod:`contagent.proxy.tokens`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contagent.proxy.addons import AddonBase
from contagent.proxy.tokens import TokenAsk, TokenCollector, ask_for_tokens

if TYPE_CHECKING:
    from contagent.proxy.addons import Flow
    from contagent.proxy.identify import TokenPlan
    from contagent.proxy.proxy_options import ProxyOptions


class TokenWatch:
    """One exchange's token data: collected from what arrives, hidden from the client."""

    __slots__ = ("ask", "collector")

    def __init__(self, ask: TokenAsk) -> None:
        self.ask = ask
        self.collector = TokenCollector()

    def seen(self, obj: Any) -> None:
        self.collector.feed(obj)

    def hide(self, obj: Any) -> bool:
        return self.ask.strip(obj)

    def fields(self) -> dict[str, Any]:
        return {"tokens": self.collector.result()}


class TokenCapture(AddonBase):
    """Asks for, records and hides token data while ``on`` (the resolved ``--tokens``)."""

    def __init__(self, on: bool) -> None:
        self.on = on

    def request(self, flow: Flow) -> None:
        if self.on and flow.api.tokens:
            flow.body, ask = ask_for_tokens(flow.body)
            flow.changes.extend(ask.added)
            flow.watch = TokenWatch(ask)

    def planned(self, plan: TokenPlan) -> None:
        self.on = plan.record


def make(options: ProxyOptions) -> TokenCapture:
    return TokenCapture(options.tokens)

"""Usage on streams: ``stream_options.include_usage`` on a stream that did not ask for it, of an
API whose streams report usage only when asked (:attr:`contagent.wire.WireApi.usage_on_request`),
so every outcome record has its token counts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from contagent.proxy.addons import AddonBase

if TYPE_CHECKING:
    from contagent.proxy.addons import Flow
    from contagent.proxy.proxy_options import ProxyOptions


class UsageOnStreams(AddonBase):
    """Asks every stream that can report usage to report it."""

    def request(self, flow: Flow) -> None:
        if not (flow.stream and flow.api.usage_on_request):
            return
        body = flow.body
        opts = body.get("stream_options")
        if not (isinstance(opts, dict) and opts.get("include_usage") is True):
            asked: dict[str, Any] = {**(opts if isinstance(opts, dict) else {})}
            asked["include_usage"] = True
            flow.body = {**body, "stream_options": asked}
            flow.changes.append("stream_options.include_usage")


def make(options: ProxyOptions) -> UsageOnStreams:
    return UsageOnStreams()

"""``--chat-template``: the template is sent with every request of an API that takes one
(:attr:`contagent.wire.WireApi.chat_template`) where the client sent none."""

from __future__ import annotations

from typing import TYPE_CHECKING

from contagent.proxy.addons import AddonBase

if TYPE_CHECKING:
    from contagent.proxy.addons import Flow
    from contagent.proxy.proxy_options import ProxyOptions


class ChatTemplate(AddonBase):
    """Sends one chat template with the requests that carry none."""

    def __init__(self, template: str) -> None:
        self.template = template

    def request(self, flow: Flow) -> None:
        if flow.api.chat_template and flow.body.get("chat_template") is None:
            flow.body = {**flow.body, "chat_template": self.template}
            flow.changes.append("chat_template")


def make(options: ProxyOptions) -> ChatTemplate | None:
    return None if options.chat_template is None else ChatTemplate(options.chat_template)

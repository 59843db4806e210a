"""The OpenAI legacy completions API's adapter: no generation the export reads, but the
proxy asks for its stream's usage and records its sampling.

Its stream is chat's (``text_completion`` chunks ending the same way), folded by
:mod:`contagent.wire.chat_stream`; its routes end with chat's last part, so the table
offers it a route after chat.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from contagent.wire import WireApi
from contagent.wire.chat_completions import ChatAdapter


class CompletionsAdapter(ChatAdapter):
    """Legacy text completions: chat's stream and completeness, text instead of messages."""

    name = "completions"
    routes = ("/completions",)
    generation = False
    tokens = False
    chat_template = False
    sampling_fields: Mapping[str, tuple[str, ...]] = MappingProxyType({})

    def request_messages(self, body: dict[str, Any]) -> list[Any] | None:
        return None

    def function_tool(self, tool: dict[str, Any]) -> dict[str, Any] | None:
        return None


ADAPTER: WireApi = CompletionsAdapter()

"""The OpenAI chat completions API's adapter: the shape every other API is read in.

Its exchanges are already in chat shape (:mod:`contagent.wire.chat` reads them); its stream
is untyped chunks ending with ``data: [DONE]`` (:mod:`contagent.wire.chat_stream`); a
stream reports usage only when ``stream_options.include_usage`` asks; vLLM returns the
prompt's and the completion's token ids when asked, and takes a ``chat_template``.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from contagent.wire import WireApi
from contagent.wire.chat import COMPLETE_FINISH_REASONS, function_definition
from contagent.wire.chat_stream import DONE
from contagent.wire.error_shapes import proxy_error, proxy_error_event

#: the route, as the proxy's probes call it on the server
ROUTE = "/v1/chat/completions"
#: vLLM's route that renders a chat request without generating
RENDER_ROUTE = ROUTE + "/render"


def judge_choices(response: dict[str, Any]) -> tuple[bool, str | None] | None:
    """A response with ``choices`` is complete when each choice's model ended its turn."""
    choices = response.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list) or not choices:
        return False, "no choices"
    for choice in choices:
        reason = choice.get("finish_reason") if isinstance(choice, dict) else None
        if reason not in COMPLETE_FINISH_REASONS:
            return False, f"finish_reason {reason!r}"
    return True, None


class ChatAdapter:
    """Chat completions: generations, untyped chunks, token ids on request."""

    name = "chat"
    routes = ("/chat/completions",)
    generation = True
    end_markers = (DONE.encode(),)
    usage_on_request = True
    tokens = True
    chat_template = True
    sampling_fields: Mapping[str, tuple[str, ...]] = MappingProxyType(
        {"max_tokens": ("max_completion_tokens", "max_tokens")}
    )
    sampling_keys = None

    def is_end_event(self, payload: str) -> bool:
        return payload == DONE

    def claims_event(self, etype: str) -> bool:
        return False

    def stream_folder(self) -> None:
        return None

    def judge(self, response: dict[str, Any]) -> tuple[bool, str | None] | None:
        return judge_choices(response)

    def to_chat(
        self, requests: dict[int, dict[str, Any]], outcomes: dict[int, dict[str, Any]]
    ) -> list[tuple[str, str]]:
        return []

    def request_messages(self, body: dict[str, Any]) -> list[Any] | None:
        messages = body.get("messages")
        return messages if isinstance(messages, list) else None

    def function_tool(self, tool: dict[str, Any]) -> dict[str, Any] | None:
        return function_definition(tool)

    def render_tool(self, tool: dict[str, Any], model: Any) -> list[dict[str, Any]] | None:
        return None

    def error_body(self, status: int, message: str, kind: str) -> bytes:
        return proxy_error(status, message, kind)

    def error_event(self, status: int, message: str, kind: str, sent: int) -> bytes:
        return proxy_error_event(status, message, kind)


ADAPTER: WireApi = ChatAdapter()

"""The OpenAI Responses API's adapter, and its exchanges in chat shape as pure functions.

A ``/v1/responses`` exchange is turned into the request messages and the
response message a chat completions exchange would have carried, so
that every chat rule (:mod:`contagent.rules`) applies to it unchanged:

- request ``instructions`` -> a leading ``system`` message; ``input`` (a string,
  or items) -> messages: ``message`` items keep their role, a run of
  assistant-side items (``reasoning``, assistant ``message``, ``function_call``)
  becomes one assistant message (text, ``reasoning_content``, ``tool_calls``
  with the item's ``call_id`` as the call id, and a call of a namespace's function named
  ``<namespace>__<name>``, the name the model produced from vLLM's flattened tool list),
  ``function_call_output`` -> a
  ``tool`` message with that ``call_id``;
- ``previous_response_id`` -> the chain resolved from the same raw log: the
  earlier request's messages (its own instructions left out, as the API does),
  its response as an assistant message, then this request's input. A chain
  that points outside the log is reported, and the rollout is not ready;
- function tools -> chat ``{"type": "function", "function": {...}}``; other tool
  definitions (a ``namespace`` of tools, built-in ``web_search``) are kept as sent;
- the response's ``output`` items -> one assistant message; ``status`` and
  ``incomplete_details`` are kept (the completeness rule reads them), and the finish reason
  says why: ``stop``/``tool_calls`` when completed, ``length`` when cut at
  ``max_output_tokens``, else the status or incomplete reason; ``usage``
  (``input_tokens``/``output_tokens``) is kept as is and counted as chat usage is.

Items this mapping does not know (e.g. ``web_search_call``, ``custom_tool_call``)
are kept in the message's ``unmapped_items`` and reported: fail closed.
A streamed exchange needs nothing extra: the proxy records the response the
stream's ``response.completed`` (or ``response.incomplete``) event carries.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from contagent.wire import WireApi, responses_tools
from contagent.wire.chat import route_ends_with
from contagent.wire.error_shapes import proxy_error, responses_error_event
from contagent.wire.responses_tools import namespaced_name

#: how the Responses API's route ends
ROUTES = ("/responses",)

#: Problem kinds this mapping reports (a row's ``not_ready_kinds``).
CHAIN_PROBLEM = "responses_chain"
ITEM_PROBLEM = "unsupported_item"

_ASSISTANT_ITEMS = frozenset({"reasoning", "function_call"})

_TEXT_PARTS = frozenset({"input_text", "output_text", "text", "summary_text", "reasoning_text"})


def is_responses_path(path: Any) -> bool:
    """Is ``path`` (a request record's path, query string allowed) the Responses route?"""
    return route_ends_with(path, ROUTES)


def _text(content: Any) -> str | None:
    """The text of a Responses content value: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [
            p["text"]
            for p in content
            if isinstance(p, dict)
            and p.get("type") in _TEXT_PARTS
            and isinstance(p.get("text"), str)
        ]
        return "".join(texts) if texts else None
    return None


def _content(content: Any) -> Any:
    """A user/system message's content in chat shape: text parts become ``{type: text}``."""
    if not isinstance(content, list):
        return content
    out: list[Any] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") in _TEXT_PARTS:
            out.append({"type": "text", "text": part.get("text")})
        else:
            out.append(part)  # images, files: kept as sent
    return out


def _reasoning_text(item: dict[str, Any]) -> str | None:
    texts = [t for key in ("content", "summary") if (t := _text(item.get(key))) is not None]
    return "\n".join(texts) if texts else None


class _Assistant:
    """Accumulates consecutive assistant-side items into one chat assistant message."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.refusals: list[str] = []
        self.unmapped: list[Any] = []
        self.empty = True

    def add(self, item: dict[str, Any]) -> None:
        self.empty = False
        kind = item.get("type")
        if kind == "reasoning":
            text = _reasoning_text(item)
            if text is not None:
                self.reasoning.append(text)
        elif kind == "function_call":
            self.calls.append(
                {
                    "id": item.get("call_id"),
                    "type": "function",
                    "function": {
                        "name": namespaced_name(item.get("namespace"), item.get("name")),
                        "arguments": item.get("arguments"),
                    },
                }
            )
        else:  # an assistant message
            content = item.get("content")
            text = _text(content)
            if text is not None:
                self.texts.append(text)
            if isinstance(content, list):
                for part in content:
                    if isinstance(part, dict) and part.get("type") == "refusal":
                        self.refusals.append(str(part.get("refusal", "")))

    def message(self) -> dict[str, Any]:
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.texts) if self.texts else None,
        }
        if self.reasoning:
            message["reasoning_content"] = "\n".join(self.reasoning)
        if self.calls:
            message["tool_calls"] = self.calls
        if self.refusals:
            message["refusal"] = "".join(self.refusals)
        if self.unmapped:
            message["unmapped_items"] = self.unmapped
        return message


def _is_assistant_item(item: dict[str, Any]) -> bool:
    kind = item.get("type")
    return kind in _ASSISTANT_ITEMS or (
        kind in ("message", None) and item.get("role") == "assistant"
    )


def input_messages(items: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """Request ``input`` as chat messages; also the types of the items it could not map."""
    if isinstance(items, str):
        return [{"role": "user", "content": items}], []
    if not isinstance(items, list):
        return [], ["input that is neither a string nor a list"]
    messages: list[dict[str, Any]] = []
    unknown: list[str] = []
    turn: _Assistant | None = None
    for item in items:
        if not isinstance(item, dict):
            unknown.append(type(item).__name__)
            continue
        if _is_assistant_item(item):
            turn = turn or _Assistant()
            turn.add(item)
            continue
        if turn is not None:
            messages.append(turn.message())
            turn = None
        kind = item.get("type")
        if kind == "function_call_output":
            output = item.get("output")
            text = _text(output)
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": text if text is not None else output,
                }
            )
        elif kind in ("message", None) and isinstance(item.get("role"), str):
            messages.append({"role": item["role"], "content": _content(item.get("content"))})
        else:
            unknown.append(str(kind))
            messages.append({"role": "unmapped", "item": item})
    if turn is not None:
        messages.append(turn.message())
    return messages, unknown


def chat_tools(tools: Any) -> Any:
    """Function tools in chat shape; other definitions kept as sent."""
    if not isinstance(tools, list):
        return tools
    out: list[Any] = []
    for tool in tools:
        if isinstance(tool, dict) and tool.get("type") == "function" and "function" not in tool:
            fn = {k: v for k, v in tool.items() if k != "type"}
            out.append({"type": "function", "function": fn})
        else:
            out.append(tool)
    return out


def finish_reason(response: dict[str, Any], message: dict[str, Any]) -> str:
    status = response.get("status")
    details = response.get("incomplete_details")
    reason = details.get("reason") if isinstance(details, dict) else None
    if status in (None, "completed") and not details:
        return "tool_calls" if message.get("tool_calls") else "stop"
    if reason == "max_output_tokens":
        return "length"
    return str(reason or status)


def chat_response(response: Any) -> tuple[Any, list[str]]:
    """A Responses ``response`` object as a chat completion (status, details, usage kept)."""
    if not isinstance(response, dict) or not isinstance(response.get("output"), list):
        return response, []
    turn = _Assistant()
    unknown: list[str] = []
    for item in response["output"]:
        if isinstance(item, dict) and _is_assistant_item(item):
            turn.add(item)
        else:
            kind = item.get("type") if isinstance(item, dict) else type(item).__name__
            unknown.append(str(kind))
            turn.unmapped.append(item)
    message = turn.message()
    out = {k: v for k, v in response.items() if k != "output"}
    out["object"] = "chat.completion"
    out["choices"] = [
        {"index": 0, "message": message, "finish_reason": finish_reason(response, message)}
    ]
    return out, unknown


def normalise_exchanges(
    requests: dict[int, dict[str, Any]], outcomes: dict[int, dict[str, Any]]
) -> list[tuple[str, str]]:
    """Rewrite every Responses exchange of a raw log into chat shape, in place.

    Request records get ``body.messages``/``body.tools`` (``input`` and
    ``instructions`` folded in) and ``api: "responses"``; outcome records get a
    chat-shaped ``response``. Returns (kind, text) problems: chains that point
    outside the log and items the mapping does not know.
    """
    problems: list[tuple[str, str]] = []
    #: response id -> (messages without instructions, the response's assistant message)
    by_id: dict[str, tuple[list[dict[str, Any]], dict[str, Any]]] = {}
    for index in sorted(requests):
        req = requests[index]
        body = req.get("body")
        if not is_responses_path(req.get("path")) or not isinstance(body, dict):
            continue
        history: list[dict[str, Any]] = []
        prev = body.get("previous_response_id")
        if isinstance(prev, str):
            if prev in by_id:
                prev_history, prev_message = by_id[prev]
                history = [*prev_history, prev_message]
            else:
                problems.append(
                    (
                        CHAIN_PROBLEM,
                        f"request {index}: previous_response_id {prev!r} is not in this raw log",
                    )
                )
        new, unknown = input_messages(body.get("input"))
        history = history + new
        instructions = body.get("instructions")
        head = [{"role": "system", "content": instructions}] if instructions else []
        chat_body = {k: v for k, v in body.items() if k not in ("input", "instructions")}
        chat_body["messages"] = head + history
        if "tools" in body:
            chat_body["tools"] = chat_tools(body["tools"])
        req["body"] = chat_body
        req["api"] = "responses"
        if unknown:
            problems.append(
                (ITEM_PROBLEM, f"request {index}: input items not mapped: {', '.join(unknown)}")
            )
        out = outcomes.get(index)
        if out is None or not isinstance(out.get("response"), dict):
            continue
        response, unknown = chat_response(out["response"])
        out["response"] = response
        if unknown:
            problems.append(
                (ITEM_PROBLEM, f"response {index}: output items not mapped: {', '.join(unknown)}")
            )
        rid = out.get("response", {}).get("id")
        choices = response.get("choices") if isinstance(response, dict) else None
        # a stream that carried only an error event assembles to a completion without choices
        message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        if isinstance(rid, str) and message is not None:
            by_id.setdefault(rid, (history, message))
    return problems


#: the stream events that carry the whole response at the end
TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})
_EVENT_PREFIX = "response."


class ResponsesStream:
    """A Responses stream: its terminal event carries the whole response."""

    __slots__ = ("misplaced", "response", "usage")

    def __init__(self) -> None:
        self.response: dict[str, Any] | None = None
        self.usage: dict[str, Any] | None = None
        self.misplaced = 0

    def feed(self, etype: str, event: dict[str, Any]) -> None:
        if etype in TERMINAL_EVENTS and isinstance(event.get("response"), dict):
            self.response = event["response"]
            usage = self.response.get("usage")
            if isinstance(usage, dict):
                self.usage = usage

    def takes(self, etype: str) -> bool:
        return False

    def result(self) -> dict[str, Any] | None:
        return self.response


class ResponsesAdapter:
    """The Responses API: generations in chat shape, a typed event stream, no token ids."""

    name = "responses"
    routes = ROUTES
    generation = True
    end_markers: tuple[bytes, ...] = ()  # the stream just ends after its terminal event
    usage_on_request = False
    tokens = False
    chat_template = False
    sampling_fields: Mapping[str, tuple[str, ...]] = MappingProxyType(
        {"max_tokens": ("max_output_tokens",)}
    )
    sampling_keys = None

    def is_end_event(self, payload: str) -> bool:
        return False

    def claims_event(self, etype: str) -> bool:
        return etype.startswith(_EVENT_PREFIX)

    def stream_folder(self) -> ResponsesStream:
        return ResponsesStream()

    def judge(self, response: dict[str, Any]) -> tuple[bool, str | None] | None:
        """A ``status`` or ``incomplete_details`` says a response is cut, whichever API it
        claims to be; a response with ``output`` and no ``choices`` is complete otherwise."""
        status = response.get("status")
        if status is not None and status != "completed":
            return False, f"response status {status!r}"
        if response.get("incomplete_details"):
            return False, "incomplete_details present"
        if response.get("choices") is None and (
            response.get("object") == "response" or "output" in response
        ):
            return True, None
        return None

    def to_chat(
        self, requests: dict[int, dict[str, Any]], outcomes: dict[int, dict[str, Any]]
    ) -> list[tuple[str, str]]:
        return normalise_exchanges(requests, outcomes)

    def request_messages(self, body: dict[str, Any]) -> list[Any] | None:
        messages = body.get("messages")  # a body the lenient parser read keeps its shape
        return messages if isinstance(messages, list) else None

    def function_tool(self, tool: dict[str, Any]) -> dict[str, Any] | None:
        return responses_tools.flat_function(tool)

    def render_tool(self, tool: dict[str, Any], model: Any) -> list[dict[str, Any]] | None:
        return responses_tools.render_tool(tool, model)

    def error_body(self, status: int, message: str, kind: str) -> bytes:
        return proxy_error(status, message, kind)

    def error_event(self, status: int, message: str, kind: str, sent: int) -> bytes:
        return responses_error_event(message, kind, sent)


ADAPTER: WireApi = ResponsesAdapter()

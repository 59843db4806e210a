"""A stream's SSE payloads folded into what the non-streamed endpoint would return.

:class:`StreamAssembler` is incremental, like :class:`~contagent.proxy.sse.SSEParser`
that feeds it: a ``chat.completion`` (content, ``reasoning_content``, tool calls with
their argument fragments joined by index, finish reasons, usage), a legacy
``text_completion``, or for the Responses API the ``response`` object of its terminal
event, or for the Messages API the whole message (:mod:`contagent.wire.messages_stream`).
"""

from __future__ import annotations

from typing import Any

import orjson

#: a token no server sends, put in a learned frame to check where the token sits
_PROBE = "\x00contagent-probe"
_PROBE_JSON = orjson.dumps(_PROBE).decode()

#: the data of the event that ends a chat (or completions) stream
DONE = "[DONE]"


class ChatStream:
    """Folds SSE payloads into one completion object, the way a client would."""

    __slots__ = (
        "_choices",
        "_created",
        "_id",
        "_kind",
        "_model",
        "_system_fingerprint",
        "_tpl",
        "malformed",
        "misplaced",
        "usage",
    )

    def __init__(self) -> None:
        self._id: Any = None
        self._model: Any = None
        self._created: Any = None
        self._system_fingerprint: Any = None
        self._kind: str | None = None
        self._choices: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] | None = None
        #: payloads that were neither JSON objects nor the end event
        self.malformed = 0
        #: typed events that fit no place in their response (a delta for no open block)
        self.misplaced = 0
        #: (prefix, suffix, content parts) of the last plain content-token event, see feed()
        self._tpl: tuple[str, str, list[str]] | None = None

    def feed(self, payload: str) -> None:
        if payload == DONE:
            return
        tpl = self._tpl
        if tpl is not None:
            # Most events of a stream are byte-identical except for one content
            # token: "<prefix><JSON string><suffix>". When this one is, and the
            # middle is one valid JSON string, it parses exactly like the template
            # with that string in place, so only the string needs decoding.
            prefix, suffix, parts = tpl
            if (
                payload.startswith(prefix)
                and payload.endswith(suffix)
                and len(payload) > len(prefix) + len(suffix)
            ):
                try:
                    token = orjson.loads(payload[len(prefix) : len(payload) - len(suffix)])
                except orjson.JSONDecodeError:
                    token = None
                if type(token) is str:
                    parts.append(token)
                    return
        try:
            event = orjson.loads(payload)
        except orjson.JSONDecodeError:
            self.malformed += 1
            return
        self.feed_event(event)
        self._learn_template(payload, event)

    def feed_many(self, payloads: list[str]) -> None:
        # One parse per payload on purpose: joining them into one JSON array is
        # faster, but a malformed stream could then parse as a different sequence.
        feed = self.feed
        for p in payloads:
            feed(p)

    def _learn_template(self, payload: str, event: Any) -> None:
        """Remember ``payload`` as a template when it is a plain content-token event.

        That is: a chat chunk (no usage) with one choice whose delta holds only a
        string ``content`` and no finish reason, which feed_event() has just
        appended to its choice. Another event equal to it except for that string
        has exactly the same effect, bar the string.
        """
        if type(event) is not dict or isinstance(event.get("usage"), dict):
            self._tpl = None
            return
        choices = event.get("choices")
        etype = event.get("type")
        if (
            type(choices) is not list
            or len(choices) != 1
            or type(choices[0]) is not dict
            or etype is not None
        ):
            self._tpl = None
            return
        choice = choices[0]
        delta = choice.get("delta")
        if (
            type(delta) is not dict
            or len(delta) != 1
            or type(delta.get("content")) is not str
            or choice.get("finish_reason") is not None
            or "text" in choice
        ):
            self._tpl = None
            return
        idx = choice.get("index", 0)
        acc = self._choices.get(idx if isinstance(idx, int) else 0)
        content = delta["content"]
        if acc is None or not acc["content"] or acc["content"][-1] is not content:
            self._tpl = None
            return
        # Where the token sits in the raw text: the servers' encoding of it may
        # differ from orjson's (escapes), so only an exact, unique match is used.
        needle = '"content":' + orjson.dumps(content).decode()
        at = payload.find(needle)
        if at < 0 or payload.find(needle, at + 1) >= 0 or content == _PROBE:
            self._tpl = None
            return
        prefix, suffix = payload[: at + 10], payload[at + len(needle) :]
        # Prove the spot is this delta's content and nothing else (another field
        # could hold the same text): a probe put there must change exactly it.
        try:
            probed = orjson.loads(prefix + _PROBE_JSON + suffix)
        except orjson.JSONDecodeError:
            probed = None
        if probed != {**event, "choices": [{**choice, "delta": {"content": _PROBE}}]}:
            self._tpl = None
            return
        self._tpl = (prefix, suffix, acc["content"])

    def feed_event(self, event: Any) -> None:
        if not isinstance(event, dict):
            self.malformed += 1
            return
        etype = event.get("type")
        if etype is not None and self.typed(etype, event):
            return
        if self._id is None:
            self._id = event.get("id")
            self._model = event.get("model")
            self._created = event.get("created")
            obj = event.get("object")
            self._kind = "text" if obj == "text_completion" else "chat"
        self._tpl = None
        if event.get("system_fingerprint") is not None:
            self._system_fingerprint = event["system_fingerprint"]
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = event.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if isinstance(choice, dict):
                    self._feed_choice(choice)

    def typed(self, etype: Any, event: dict[str, Any]) -> bool:
        """Whether an event with a ``type`` was another API's, and folded there."""
        return False

    def _feed_choice(self, choice: dict[str, Any]) -> None:
        idx = choice.get("index", 0)
        if not isinstance(idx, int):
            idx = 0
        acc = self._choices.get(idx)
        delta = choice.get("delta")
        if (
            acc is not None
            and type(delta) is dict
            and len(delta) == 1
            and choice.get("finish_reason") is None
            and "text" not in choice
        ):
            # the bulk of a stream: one content token in an otherwise empty delta
            content = delta.get("content")
            if type(content) is str:
                acc["content"].append(content)
                acc["seen_content"] = True
                return
        if acc is None:
            acc = self._choices[idx] = {
                "role": None,
                "content": [],
                "reasoning": [],
                "tools": {},
                "finish_reason": None,
                "text": [],
                "seen_content": False,
            }
        if choice.get("finish_reason") is not None:
            acc["finish_reason"] = choice["finish_reason"]
        if "text" in choice and isinstance(choice["text"], str):
            acc["text"].append(choice["text"])
        if not isinstance(delta, dict):
            return
        if delta.get("role"):
            acc["role"] = delta["role"]
        content = delta.get("content")
        if isinstance(content, str):
            acc["content"].append(content)
            acc["seen_content"] = True
        for key in ("reasoning_content", "reasoning"):
            part = delta.get(key)
            if isinstance(part, str):
                acc["reasoning"].append(part)
                break
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for frag in tool_calls:
                if isinstance(frag, dict):
                    self._feed_tool_fragment(acc["tools"], frag)

    @staticmethod
    def _feed_tool_fragment(tools: dict[int, dict[str, Any]], frag: dict[str, Any]) -> None:
        tidx = frag.get("index", len(tools))
        if not isinstance(tidx, int):
            tidx = len(tools)
        tool = tools.get(tidx)
        if tool is None:
            tool = tools[tidx] = {"id": None, "type": "function", "name": [], "arguments": []}
        if frag.get("id"):
            tool["id"] = frag["id"]
        if frag.get("type"):
            tool["type"] = frag["type"]
        fn = frag.get("function")
        if isinstance(fn, dict):
            if isinstance(fn.get("name"), str):
                tool["name"].append(fn["name"])
            if isinstance(fn.get("arguments"), str):
                tool["arguments"].append(fn["arguments"])

    @property
    def finish_reasons(self) -> list[str | None]:
        return [self._choices[i]["finish_reason"] for i in sorted(self._choices)]

    def result(self) -> dict[str, Any] | None:
        """The reassembled completion, or None when no usable event arrived."""
        if self._kind is None:
            return None
        choices: list[dict[str, Any]] = []
        for idx in sorted(self._choices):
            acc = self._choices[idx]
            if self._kind == "text":
                text = "".join(acc["text"])
                choices.append({"index": idx, "text": text, "finish_reason": acc["finish_reason"]})
            else:
                choices.append(
                    {"index": idx, "message": _message(acc), "finish_reason": acc["finish_reason"]}
                )
        out: dict[str, Any] = {
            "id": self._id,
            "object": "text_completion" if self._kind == "text" else "chat.completion",
            "model": self._model,
            "created": self._created,
            "choices": choices,
            "usage": self.usage,
        }
        if self._system_fingerprint is not None:
            out["system_fingerprint"] = self._system_fingerprint
        return out


def _message(acc: dict[str, Any]) -> dict[str, Any]:
    """The assistant message a chat choice's accumulated deltas make."""
    message: dict[str, Any] = {
        "role": acc["role"] or "assistant",
        "content": "".join(acc["content"]) if acc["seen_content"] else None,
    }
    if acc["reasoning"]:
        message["reasoning_content"] = "".join(acc["reasoning"])
    if acc["tools"]:
        message["tool_calls"] = [
            {
                "id": t["id"],
                "type": t["type"],
                "function": {"name": "".join(t["name"]), "arguments": "".join(t["arguments"])},
            }
            for _, t in sorted(acc["tools"].items())
        ]
    return message

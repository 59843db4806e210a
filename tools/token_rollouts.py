"""Raw logs with token data in the shapes a vLLM server gives, for tests and benchmarks.

:class:`TokenRolloutBuilder` records what the recording proxy records when tokens are
on: the request lists the fields the proxy added (``upstream_changes``) and the server,
and each outcome carries ``tokens`` (prompt ids, and per choice the sampled ids with
their logprobs), with usage equal to the id counts as vLLM reports it.

The prompt ids come from a byte-level toy tokenizer and a Qwen3-like chat template.
With ``template="qwen3"`` the template behaves as Qwen3's does: earlier reasoning is
dropped and a tool call is re-rendered from its JSON, so the next prompt does not
extend the sampled tokens. With ``template="prefix"`` (a training template that keeps
the prefix) an earlier assistant turn is rendered as exactly the tokens sampled.
"""

from __future__ import annotations

import random
from typing import Any, Literal

import orjson

from contagent.wire.chat import message_text, tool_calls
from tools.rollouts import RolloutBuilder

IM_START, IM_END, THINK, END_THINK, TOOL_CALL, END_TOOL_CALL = 1, 2, 3, 4, 5, 6
_BYTE_BASE = 16
PROXY_ADDITIONS = ["return_token_ids", "logprobs", "top_logprobs"]
SERVER = {"name": "vllm", "version": "0.32.0"}

Template = Literal["qwen3", "prefix"]

#: The server's sampling defaults the builder records for what a request leaves unset.
SERVER_SAMPLING: dict[str, Any] = {
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
}

_SPECIAL = {
    IM_START: "<|im_start|>",
    IM_END: "<|im_end|>",
    THINK: "<think>",
    END_THINK: "</think>",
    TOOL_CALL: "<tool_call>",
    END_TOOL_CALL: "</tool_call>",
}


def token_text(token: int) -> str:
    """The text vLLM's logprobs entry gives a toy token."""
    return _SPECIAL.get(token) or bytes([token - _BYTE_BASE]).decode("utf-8", "replace")


def recorded_sampling(body: dict[str, Any], defaults: dict[str, Any] | None) -> dict[str, Any]:
    """The request record's ``sampling``: the client's values, else the server's defaults
    (unknown, null, where ``defaults`` lacks them or is None)."""
    out: dict[str, Any] = {}
    for key in SERVER_SAMPLING:
        if body.get(key) is not None:
            out[key] = {"value": body[key], "source": "client"}
        elif defaults is not None and key in defaults:
            out[key] = {"value": defaults[key], "source": "server"}
        else:
            out[key] = None
    out["logit_bias"] = {"value": bool(body.get("logit_bias")), "source": "client"}
    out["seed"] = {"value": body.get("seed"), "source": "client" if "seed" in body else "server"}
    tokens = body.get("max_tokens")
    out["max_tokens"] = {"value": tokens, "source": "client"} if tokens is not None else None
    return out


def encode(text: str) -> list[int]:
    """The toy tokenizer: one id per UTF-8 byte."""
    return [b + _BYTE_BASE for b in text.encode()]


def sampled_ids(message: dict[str, Any], finish_reason: str) -> list[int]:
    """What the model sampled for ``message``: reasoning in think tags, content, tool calls
    as raw JSON, and the end-of-turn token unless the turn was cut by length."""
    ids: list[int] = []
    reasoning = message.get("reasoning_content")
    if isinstance(reasoning, str):
        ids += [THINK, *encode(reasoning), END_THINK, *encode("\n\n")]
    ids += encode(message_text(message.get("content")))
    for call in tool_calls(message):
        function = call.get("function") or {}
        raw = f'{{"name":"{function.get("name")}","arguments":{function.get("arguments")}}}'
        ids += [TOOL_CALL, *encode(raw), END_TOOL_CALL]
    return ids if finish_reason == "length" else [*ids, IM_END]


def _rendered(message: dict[str, Any]) -> list[int]:
    """Qwen3's template re-rendering a message of the history (reasoning dropped)."""
    ids = encode(message_text(message.get("content")))
    for call in tool_calls(message):
        function = call.get("function") or {}
        arguments = orjson.loads(function.get("arguments") or "{}")
        raw = orjson.dumps({"name": function.get("name"), "arguments": arguments}).decode()
        ids += [TOOL_CALL, *encode("\n" + raw.replace(",", ", ") + "\n"), END_TOOL_CALL]
    return ids


class TokenRolloutBuilder(RolloutBuilder):
    """A :class:`RolloutBuilder` whose exchanges carry token data (see the module docstring)."""

    def __init__(
        self, rollout_id: str, task: str, *, template: Template = "prefix", **kwargs: Any
    ) -> None:
        super().__init__(rollout_id, task, **kwargs)
        self.template = template
        self.rng = random.Random(rollout_id)
        self._prompts: dict[int, list[int]] = {}
        #: id() of each replayed message -> (the message, kept alive, and its sampled ids)
        self._sampled: dict[int, tuple[dict[str, Any], list[int]]] = {}
        self._last_sampled: list[int] = []
        #: extra keys for the next request body (temperature, tool_choice, ...)
        self.body_extra: dict[str, Any] = {}
        #: what the next outcome's token data does wrong, for the fail-closed tests
        self.spoil: str | None = None
        #: the server's logprobs mode as the proxy records it (None: not recorded)
        self.logprobs_mode: str | None = "processed_logprobs"
        #: the server defaults recorded in ``sampling`` (None: a log without ``sampling``)
        self.server_sampling: dict[str, Any] | None = dict(SERVER_SAMPLING)

    def render(self, messages: list[dict[str, Any]]) -> list[int]:
        """The prompt ids of ``messages`` with the generation prompt."""
        ids: list[int] = []
        for message in messages:
            role = str(message.get("role"))
            ids += [IM_START, *encode(role + "\n")]
            kept = self._sampled.get(id(message), (None, None))[1]
            if kept is not None and self.template == "prefix":
                ids += kept if kept[-1:] == [IM_END] else [*kept, IM_END]
            else:
                body = _rendered(message) if role == "assistant" else None
                ids += [*(body or encode(message_text(message.get("content")))), IM_END]
            ids += encode("\n")
        return [*ids, IM_START, *encode("assistant\n")]

    def request(
        self, *, body: Any = None, stream: bool = False, body_text: str | None = None
    ) -> int:
        if body is None and body_text is None:
            body = {
                "messages": self.messages,
                "model": self.model,
                "tools": self.tools,
                **self.body_extra,
            }
            if stream:
                body["stream"] = True
        index = super().request(body=body, stream=stream, body_text=body_text)
        messages = body.get("messages") if isinstance(body, dict) else None
        if isinstance(messages, list):
            self._prompts[index] = self.render(messages)
        record = orjson.loads(self.lines[-1])
        record["upstream_changes"] = list(PROXY_ADDITIONS)
        record["server"] = dict(SERVER)
        if self.logprobs_mode is not None:
            record["server"]["logprobs_mode"] = self.logprobs_mode
        if self.server_sampling is not None and isinstance(body, dict):
            record["sampling"] = recorded_sampling(body, self.server_sampling)
        self.lines[-1] = orjson.dumps(record)
        return index

    def outcome(self, index: int, outcome: str, **kwargs: Any) -> None:
        message = kwargs.get("message")
        if message is None or index not in self._prompts:
            super().outcome(index, outcome, **kwargs)
            return
        reason = kwargs.get("finish_reason") or (
            "tool_calls" if message.get("tool_calls") else "stop"
        )
        prompt = self._prompts[index]
        ids = sampled_ids(message, reason)
        logprobs = [round(-self.rng.random() * 3, 4) for _ in ids]
        if kwargs.get("usage", True) is True:
            n, m = len(prompt), len(ids)
            kwargs["usage"] = {"prompt_tokens": n, "completion_tokens": m, "total_tokens": n + m}
        super().outcome(index, outcome, **kwargs)
        self._last_sampled = ids
        tokens: dict[str, Any] = {
            "prompt_token_ids": prompt,
            "choices": [{"index": 0, "token_ids": ids, "logprobs": logprobs}],
        }
        if self.spoil == "no_tokens":
            tokens = {"prompt_token_ids": None, "choices": []}
        elif self.spoil == "token_mismatch":
            tokens["choices"][0]["logprobs"] = logprobs[:-1]
        elif self.spoil == "no_logprobs":
            tokens["choices"][0]["logprobs"] = None
        self.spoil = None
        record = orjson.loads(self.lines[-1])
        record["tokens"] = tokens
        response = record.get("response")
        if isinstance(response, dict) and response.get("choices"):
            # vLLM's logprobs entries carry each token's text
            entries = [
                {"token": token_text(t), "logprob": lp} for t, lp in zip(ids, logprobs, strict=True)
            ]
            response["choices"][0]["logprobs"] = {"content": entries}
        self.lines[-1] = orjson.dumps(record)

    def replay(self, message: dict[str, Any]) -> None:
        super().replay(message)
        self._sampled[id(self.messages[-1])] = (self.messages[-1], self._last_sampled)

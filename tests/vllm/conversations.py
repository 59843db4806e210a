"""Agent-shaped conversations with the tier's tiny model, as a client drives them.

Each scenario talks to an OpenAI-compatible ``base_url`` (the recording proxy's
``/r/<rollout>/v1``, or the server's own ``/v1``) the way an agent harness does:
the model's answer is appended to the history as the client received it, tool
calls get tool results, and the next request carries the whole history. A random
model cannot solve anything, so requests steer it with vLLM's own knobs: a named
or ``required`` ``tool_choice`` with a strict tool forces a valid call,
``logit_bias`` keeps arguments free of whitespace and pulls answers towards
``<|im_end|>``, and ``seed`` makes each request repeatable.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson

from contagent.proxy.sse import SSEParser
from contagent.wire.stream_fold import StreamAssembler

MODEL = "tiny"
SYSTEM = "You are a coding agent. Use the tools to solve the task."
TASK = "Find the secret in secret.txt and report it."


def _tool(name: str, prop: str, about: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": about,
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {prop: {"type": "string"}},
                "required": [prop],
                "additionalProperties": False,
            },
        },
    }


TOOLS = [
    _tool("terminal", "command", "Run a shell command."),
    _tool("finish", "message", "Finish with a message to the user."),
]


@dataclass
class Meta:
    """What the tests need to know of the tiny model (``contagent-meta.json``)."""

    model_dir: Path
    eos: int
    whitespace: list[int]  # ids of tokens with any whitespace in them
    quotes: list[int]  # ids of tokens with a double quote (they can close a JSON string)
    training_template: str

    @classmethod
    def load(cls, model_dir: Path) -> Meta:
        meta = json.loads((model_dir / "contagent-meta.json").read_text())
        vocab = json.loads((model_dir / "tokenizer.json").read_text())["model"]["vocab"]
        # byte-level BPE spells bytes 0..32 as chr(256 + byte): these are the whitespace ones
        blank = {chr(256 + b) for b in (9, 10, 11, 12, 13, 32)}
        return cls(
            model_dir,
            meta["eos_token_id"],
            sorted(i for t, i in vocab.items() if blank & set(t)),
            sorted(i for t, i in vocab.items() if '"' in t),
            (model_dir / "qwen3_training.jinja").read_text(),
        )


@dataclass
class Turn:
    """One request as the client sent it and the answer as the client received it."""

    body: dict[str, Any]
    response: dict[str, Any]  # a stream: the completion assembled from the client's events
    events: list[str] | None = None  # a stream: the data payloads the client received

    @property
    def message(self) -> dict[str, Any]:
        return dict(self.response["choices"][0]["message"])

    @property
    def finish_reason(self) -> str | None:
        return self.response["choices"][0]["finish_reason"]


@dataclass
class Chat:
    """A client of ``base_url`` (ends ``/v1``) keeping the turns it made."""

    base_url: str
    meta: Meta
    template: str | None = None  # a chat template sent with every request
    turns: list[Turn] = field(default_factory=list)
    seed: int = 0
    temperature: float | None = None  # sent with every request when set

    def ask(
        self,
        messages: list[dict[str, Any]],
        *,
        stream: bool = False,
        thinking: bool = False,
        tool: str | None = None,
        required: bool = False,
        max_tokens: int = 24,
        end_bias: float | None = 8.0,
        **extra: Any,
    ) -> Turn:
        """``end_bias``: the end token's logit bias; None sends a free turn no bias at all
        (its logprobs are then the model's own, at the step's temperature)."""
        bias: dict[str, float] = {} if end_bias is None else {str(self.meta.eos): end_bias}
        body: dict[str, Any] = {
            "model": MODEL,
            "messages": list(messages),  # the history grows after this turn
            "tools": TOOLS,
            "max_tokens": max_tokens,
            "seed": self.seed + len(self.turns),
            "chat_template_kwargs": {"enable_thinking": thinking},
        }
        if tool is not None or required:
            body["tool_choice"] = (
                "required" if required else {"type": "function", "function": {"name": tool}}
            )
            bias = {str(i): -100.0 for i in self.meta.whitespace}
            bias.update({str(i): 6.0 for i in self.meta.quotes})
            if end_bias is not None:
                bias[str(self.meta.eos)] = end_bias
        if bias:
            body["logit_bias"] = bias
        if self.temperature is not None:
            body["temperature"] = self.temperature
        if self.template is not None:
            body["chat_template"] = self.template
        if stream:
            body["stream"] = True
        body.update(extra)
        turn = self._send(body)
        self.turns.append(turn)
        return turn

    def _send(self, body: dict[str, Any]) -> Turn:
        url = self.base_url.rstrip("/") + "/chat/completions"
        with httpx.Client(timeout=600) as client:
            if not body.get("stream"):
                resp = client.post(url, json=body)
                resp.raise_for_status()
                return Turn(body, resp.json())
            parser, asm = SSEParser(), StreamAssembler()
            events: list[str] = []
            with client.stream("POST", url, json=body) as resp:
                resp.raise_for_status()
                for chunk in resp.iter_bytes():
                    events += parser.feed(chunk)
            asm.feed_many(events)
            result = asm.result()
            assert result is not None, "the stream carried no completion"
            return Turn(body, result, events)


def history_message(turn: Turn) -> dict[str, Any]:
    """The assistant message as a harness appends it to the history: content, tool calls,
    and the reasoning under the name chat templates read (``reasoning_content``)."""
    msg = turn.message
    out: dict[str, Any] = {"role": "assistant", "content": msg.get("content") or ""}
    reasoning = msg.get("reasoning") or msg.get("reasoning_content")
    if reasoning:
        out["reasoning_content"] = reasoning
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            {"id": c["id"], "type": "function", "function": c["function"]}
            for c in msg["tool_calls"]
        ]
    return out


def answer_calls(history: list[dict[str, Any]], turn: Turn, output: str) -> None:
    """Append the turn's message and a tool result for each of its calls."""
    history.append(history_message(turn))
    for c in turn.message.get("tool_calls") or []:
        history.append({"role": "tool", "tool_call_id": c["id"], "content": output})


def start() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]


# -- the scenarios: each drives one rollout and says how it ended ---------------------


def prefix_kept(chat: Chat) -> bool:
    """trl's prefix-preserving Qwen3 training template, thinking off, plain answers over
    three turns (JSON, streamed, JSON): each prompt extends the last one's tokens."""
    chat.template = chat.meta.training_template
    history = start()
    for n, stream in enumerate((False, True, False)):
        turn = chat.ask(history, stream=stream, end_bias=10.0)
        history.append(history_message(turn))
        if n < 2:
            history.append({"role": "user", "content": "Go on."})
    return True


def default_template(chat: Chat) -> bool:
    """Qwen3's own template: a forced terminal call, its result, then a forced finish; the
    template re-renders the call, so the prefix breaks."""
    history = start()
    turn = chat.ask(history, tool="terminal", max_tokens=100)
    answer_calls(history, turn, "hunter2")
    turn = chat.ask(history, tool="finish", max_tokens=100)
    answer_calls(history, turn, "ok")
    return True


def streamed_reasoning(chat: Chat) -> bool:
    """Streamed, thinking on: the answer's reasoning arrives as ``reasoning``; a follow-up
    turn, then a streamed forced call with thinking off."""
    history = start()
    turn = chat.ask(history, stream=True, thinking=True, max_tokens=32)
    history.append(history_message(turn))
    history.append({"role": "user", "content": "Use the terminal."})
    turn = chat.ask(history, stream=True, tool="terminal", max_tokens=100)
    answer_calls(history, turn, "hunter2")
    return True


def side_call(chat: Chat) -> bool:
    """A critic call forks off after the first step; the main line goes on without it."""
    history = start()
    turn = chat.ask(history, tool="terminal", max_tokens=100)
    answer_calls(history, turn, "hunter2")
    critic = [*history, {"role": "user", "content": "Critic: is the agent on track?"}]
    chat.ask(critic, end_bias=10.0)
    turn = chat.ask(history, tool="finish", max_tokens=100)
    answer_calls(history, turn, "ok")
    return True


def length_cut(chat: Chat) -> bool:
    """A turn cut by ``max_tokens`` (finish_reason length), retried with more room, then a
    forced finish; the rollout failed (reward 0)."""
    history = start()
    cut = chat.ask(history, max_tokens=4, end_bias=-100.0)
    assert cut.finish_reason == "length", cut.finish_reason
    turn = chat.ask(history, end_bias=14.0)
    history.append(history_message(turn))
    history.append({"role": "user", "content": "Use the tools."})
    turn = chat.ask(history, tool="finish", max_tokens=100)
    answer_calls(history, turn, "ok")
    return False


def parallel_calls(chat: Chat) -> bool:
    """``tool_choice: required`` lets the model make several calls in one answer; each gets
    its result, then a forced finish."""
    history = start()
    turn = chat.ask(history, required=True, max_tokens=300, end_bias=4.0)
    answer_calls(history, turn, "hunter2")
    turn = chat.ask(history, tool="finish", max_tokens=100)
    answer_calls(history, turn, "ok")
    return True


SCENARIOS: dict[str, Callable[[Chat], bool]] = {
    "prefix_kept": prefix_kept,
    "default_template": default_template,
    "streamed_reasoning": streamed_reasoning,
    "side_call": side_call,
    "length_cut": length_cut,
    "parallel_calls": parallel_calls,
}


def dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()

"""The sampling that really happened at a step, and what of it a grammar constrained
(pure functions, no IO).

The recording proxy records each request's effective sampling parameters in its
``sampling`` (each ``{"value", "source"}``, or null when unknown); a request record
without it (older logs) gives what the client's body set, and nothing else is known.

vLLM reports logprobs in one of two modes. ``processed_logprobs`` are those of the
distribution the token was sampled from (after temperature, top-p/top-k, penalties and
logit processors); vLLM's default ``raw_logprobs`` are the model's before all of those.
So a step whose distribution was modified has the sampler's logprobs only when it was
served in the processed mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import orjson

#: The parameters of a step's sampling, as the proxy records them.
SAMPLING_KEYS: tuple[str, ...] = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "seed",
    "max_tokens",
)

#: Each parameter's value that leaves the distribution as the model gives it.
_NEUTRAL: dict[str, tuple[Any, ...]] = {
    "temperature": (1,),
    "top_p": (1,),
    "top_k": (0, -1),
    "min_p": (0,),
    "presence_penalty": (0,),
    "frequency_penalty": (0,),
    "repetition_penalty": (1,),
    "logit_bias": (False,),
}

#: Below this temperature vLLM samples greedily (its sampling epsilon).
GREEDY_BELOW = 1e-5

LOGPROBS_MODES = ("raw_logprobs", "processed_logprobs")

#: What a grammar constrained in a step: nothing, its tool-call spans, or all it sampled.
Constraint = Literal["none", "tool_call", "step"]

_OPEN, _CLOSE = "<tool_call>", "</tool_call>"


@dataclass(frozen=True)
class StepSampling:
    """A step's sampling parameters (None: unknown) and the server's logprobs mode."""

    values: dict[str, Any]
    sources: dict[str, str | None]
    logprobs_mode: str | None
    """``raw_logprobs`` or ``processed_logprobs``; None when the log does not say."""

    @property
    def temperature(self) -> float | None:
        value = self.values.get("temperature")
        if isinstance(value, (int, float)) and _number(value):
            return float(value)
        return None

    @property
    def modified(self) -> bool:
        """Was any parameter that changes the sampled distribution active (or unknown)?"""
        return any(self.values.get(k) not in neutral for k, neutral in _NEUTRAL.items())

    def section(self, index: int, constraint: Constraint) -> dict[str, Any]:
        """The step's entry in the row's tokens section."""
        return {
            "exchange_index": index,
            **{k: self.values.get(k) for k in SAMPLING_KEYS},
            "sources": dict(self.sources),
            "logprobs_mode": self.logprobs_mode,
            "modified": self.modified,
            "constraint": constraint,
        }


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _known(key: str, value: Any) -> bool:
    if key == "logit_bias":
        return isinstance(value, bool)
    if key == "seed":
        return value is None or (isinstance(value, int) and not isinstance(value, bool))
    return _number(value)


def _from_body(body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str | None]]:
    """What a request body set itself (a log without ``sampling``): the rest is unknown."""
    values: dict[str, Any] = dict.fromkeys(SAMPLING_KEYS)
    sources: dict[str, str | None] = dict.fromkeys(SAMPLING_KEYS)
    for key in SAMPLING_KEYS:
        value = body.get(key)
        if key == "max_tokens" and value is None:
            value = body.get("max_completion_tokens")
        if key == "logit_bias":
            value = bool(value)  # no server default biases logits
        if value is not None and _known(key, value):
            values[key], sources[key] = value, "client"
    return values, sources


def step_sampling(request: dict[str, Any]) -> StepSampling:
    """A kept step's sampling, from its request record."""
    server = request.get("server")
    mode = server.get("logprobs_mode") if isinstance(server, dict) else None
    recorded = request.get("sampling")
    body = request.get("body")
    if isinstance(recorded, dict):
        values, sources = recorded_sampling(recorded)
    else:
        values, sources = _from_body(body if isinstance(body, dict) else {})
    return StepSampling(values, sources, mode if mode in LOGPROBS_MODES else None)


def recorded_sampling(recorded: Any) -> tuple[dict[str, Any], dict[str, str | None]]:
    """The values and sources a request record's ``sampling`` holds, per key (None: unknown;
    all unknown when ``recorded`` is no such record)."""
    values: dict[str, Any] = dict.fromkeys(SAMPLING_KEYS)
    sources: dict[str, str | None] = dict.fromkeys(SAMPLING_KEYS)
    if not isinstance(recorded, dict):
        return values, sources
    for key in SAMPLING_KEYS:
        entry = recorded.get(key)
        if isinstance(entry, dict) and _known(key, entry.get("value")):
            values[key] = entry["value"]
            source = entry.get("source")
            sources[key] = source if isinstance(source, str) else None
    return values, sources


def _strict_tools(body: dict[str, Any]) -> bool:
    for tool in body.get("tools") or ():
        if isinstance(tool, dict):
            function = tool.get("function")
            if tool.get("strict") is True or (
                isinstance(function, dict) and function.get("strict") is True
            ):
                return True
    return False


def constraint(body: Any, sampling: StepSampling) -> Constraint:
    """What a grammar or a processor shaped in the logprobs the server reported for a step.

    A named or ``required`` tool choice, a response format other than text and
    ``structured_outputs`` constrain all the step sampled; strict tools under ``auto``
    only the tool calls; ``logit_bias`` shapes what the processed mode reports (the raw
    mode reports the model's own logprobs, an unknown mode is taken as processed).
    vLLM ignores ``guided_*`` fields: they constrain nothing.
    """
    if not isinstance(body, dict):
        return "none"
    choice = body.get("tool_choice")
    fmt = body.get("response_format")
    if (
        isinstance(choice, dict)
        or choice == "required"
        or (isinstance(fmt, dict) and fmt.get("type") not in (None, "text"))
        or body.get("structured_outputs") is not None
        or (sampling.values.get("logit_bias") is True and sampling.logprobs_mode != "raw_logprobs")
    ):
        return "step"
    if _strict_tools(body) and choice in (None, "auto"):
        return "tool_call"
    return "none"


def sampled_texts(outcome: dict[str, Any]) -> list[str] | None:
    """The text of each token choice 0 sampled, from the logprobs entries vLLM sent
    (the JSON response, or every chunk of a stream); None when they are not there."""
    events = outcome.get("stream_events")
    if isinstance(events, list) and events:
        texts: list[str] = []
        for event in events:
            try:
                chunk = orjson.loads(event) if isinstance(event, (str, bytes)) else event
            except orjson.JSONDecodeError:
                continue  # the stream's end marker, or a line that is no chunk
            found = _choice_texts(chunk)
            if found is None:
                continue
            texts += found
        return texts
    return _choice_texts(outcome.get("response"))


def _choice_texts(message: Any) -> list[str] | None:
    choices = message.get("choices") if isinstance(message, dict) else None
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            entries = choice.get("logprobs")
            content = entries.get("content") if isinstance(entries, dict) else None
            if not isinstance(content, list):
                return None
            out = [e.get("token") if isinstance(e, dict) else None for e in content]
            return out if all(isinstance(t, str) for t in out) else None  # type: ignore[return-value]
    return None


def tool_call_spans(texts: list[str]) -> list[tuple[int, int]] | None:
    """Token ranges ``[a, b)`` from each ``<tool_call>`` through its ``</tool_call>`` (or
    the end, when the call was cut), located in the sampled tokens' texts."""
    ends: list[int] = []
    total = 0
    for text in texts:
        total += len(text)
        ends.append(total)
    joined = "".join(texts)
    spans: list[tuple[int, int]] = []
    start = joined.find(_OPEN)
    while start != -1:
        close = joined.find(_CLOSE, start + len(_OPEN))
        stop = len(joined) if close == -1 else close + len(_CLOSE)
        spans.append((_token_at(ends, start), _token_at(ends, stop - 1) + 1))
        start = joined.find(_OPEN, stop)
    return spans


def _token_at(ends: list[int], char: int) -> int:
    """The index of the token holding character ``char`` of the joined texts."""
    lo, hi = 0, len(ends) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ends[mid] > char:
            hi = mid
        else:
            lo = mid + 1
    return lo


def constrained_ranges(
    kind: Constraint, texts: list[str] | None, sampled: int, calls: bool
) -> tuple[tuple[int, int], ...]:
    """The ranges of a step's sampled tokens (0-based within them) a grammar constrained.

    Under ``tool_call``, the located spans. Where they cannot be located (no token texts,
    texts that do not match the ids, a response that makes calls with no tag found), the
    whole step is constrained; free text without a tag is not.
    """
    if kind == "none" or sampled == 0:
        return ()
    spans = tool_call_spans(texts) if texts is not None and len(texts) == sampled else None
    if kind == "step" or spans is None or (calls and not spans):
        return ((0, sampled),)
    return tuple(spans)

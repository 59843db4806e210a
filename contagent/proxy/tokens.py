"""Token capture: ask the upstream for token data, record it, and hide it from the client.

With tokens on, a request of an API whose server returns token ids (chat completions,
:attr:`contagent.wire.WireApi.tokens`) goes upstream with what vLLM needs to
return the prompt token ids, the sampled token ids and their logprobs
(:data:`ADDITIONS`), each added only where the client did not set that field
itself. The outcome record gets the token data in one shape for JSON and streamed
responses (:class:`TokenCollector`), while the client gets the response it asked
for: every field that exists only because of an addition goes back to ``null``,
which is what vLLM sends when it was not asked (:meth:`TokenAsk.strip`). Fields the
client asked for itself pass through unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: (field, value) the proxy adds to a chat-completions body, in this order
ADDITIONS: tuple[tuple[str, Any], ...] = (
    ("return_token_ids", True),
    ("logprobs", True),
    ("top_logprobs", 0),
)


@dataclass(frozen=True, slots=True)
class TokenAsk:
    """What the proxy added to one request, so it knows what to take back out."""

    #: the added field names, in :data:`ADDITIONS` order (the request's upstream_changes)
    added: tuple[str, ...]

    @property
    def hide_ids(self) -> bool:
        """``prompt_token_ids`` and ``token_ids`` come only because of the proxy."""
        return "return_token_ids" in self.added

    @property
    def hide_logprobs(self) -> bool:
        """Each choice's ``logprobs`` comes only because of the proxy (``top_logprobs: 0``
        alone changes nothing: it is vLLM's default)."""
        return "logprobs" in self.added

    def strip(self, obj: Any) -> bool:
        """Put back ``null`` in ``obj`` (a completion or a stream chunk) wherever a value is
        there only because of the additions; whether anything changed."""
        if not isinstance(obj, dict):
            return False
        changed = False
        if self.hide_ids and obj.get("prompt_token_ids") is not None:
            obj["prompt_token_ids"] = None
            changed = True
        choices = obj.get("choices")
        if isinstance(choices, list):
            for choice in choices:
                if not isinstance(choice, dict):
                    continue
                if self.hide_ids and choice.get("token_ids") is not None:
                    choice["token_ids"] = None
                    changed = True
                if self.hide_logprobs and choice.get("logprobs") is not None:
                    choice["logprobs"] = None
                    changed = True
        return changed


def ask_for_tokens(body: dict[str, Any]) -> tuple[dict[str, Any], TokenAsk]:
    """``body`` with the additions the client did not set itself, and what was added."""
    added = tuple(name for name, _ in ADDITIONS if name not in body)
    if not added:
        return body, TokenAsk(())
    changed = dict(body)
    for name, value in ADDITIONS:
        if name in added:
            changed[name] = value
    return changed, TokenAsk(added)


class TokenCollector:
    """Token data of one response, fed its completion (JSON) or its chunks (a stream).

    A stream's prompt ids come in its first chunk; each later chunk carries its
    choices' sampled ids and their logprob entries, concatenated here per choice
    index. Counts are kept as the server sent them: the exporter judges them.
    """

    __slots__ = ("_choices", "_fed", "_prompt")

    def __init__(self) -> None:
        self._prompt: list[Any] | None = None
        self._choices: dict[int, tuple[list[Any], list[Any] | None]] = {}
        self._fed = False

    def feed(self, obj: Any) -> None:
        if not isinstance(obj, dict):
            return
        self._fed = True
        prompt = obj.get("prompt_token_ids")
        if self._prompt is None and isinstance(prompt, list):
            self._prompt = prompt
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if isinstance(choice, dict):
                self._feed_choice(choice)

    def _feed_choice(self, choice: dict[str, Any]) -> None:
        idx = choice.get("index", 0)
        if not isinstance(idx, int) or isinstance(idx, bool) or idx < 0:
            idx = 0
        ids, logprobs = self._choices.get(idx) or ([], None)
        got = choice.get("token_ids")
        if isinstance(got, list):
            ids.extend(got)
        entries = choice.get("logprobs")
        content = entries.get("content") if isinstance(entries, dict) else None
        if isinstance(content, list):
            if logprobs is None:
                logprobs = []
            logprobs.extend(_logprobs(content))
        self._choices[idx] = (ids, logprobs)

    def result(self) -> dict[str, Any] | None:
        """The outcome record's ``tokens``; None when nothing parseable arrived."""
        if not self._fed:
            return None
        return {
            "prompt_token_ids": self._prompt,
            "choices": [
                {"index": idx, "token_ids": ids, "logprobs": lps}
                for idx, (ids, lps) in sorted(self._choices.items())
            ],
        }


def _logprobs(entries: list[Any]) -> list[Any]:
    """Each entry's ``logprob`` when it is a number, else None (one per entry)."""
    values = [e.get("logprob") if isinstance(e, dict) else None for e in entries]
    if set(map(type, values)) <= _FLOAT:  # what vLLM sends: skip the per-value check
        return values
    return [v if isinstance(v, (int, float)) and not isinstance(v, bool) else None for v in values]


_FLOAT = {float}

"""The Messages and Responses APIs served from chat completions, as pure functions.

A server that records tokens only on chat completions (vLLM) can still give token-exact
data for agents that speak the Anthropic Messages API or the OpenAI Responses API: the
request is translated to a chat-completions request, the chat answer (JSON or a chunk
stream) is translated back. Each translation does what vLLM 0.32's own Messages and
Responses servers do, so the model sees the same prompt and the client the same answer:

- :mod:`.anthropic_request`: a Messages request -> a chat-completions request;
- :mod:`.anthropic_reply`: a chat completion -> a Messages response;
- :mod:`.anthropic_events`: chat chunks -> Messages stream events, one chunk at a time;
- :mod:`.responses_request`, :mod:`.responses_reply`, :mod:`.responses_events`: the same
  for the Responses API;
- :mod:`.error_answer`: the chat route's error answer -> the client's API's error.

No IO, no logging, no clock except where vLLM itself draws an id or a timestamp; those are
taken from callables the caller may pin. What a translation cannot carry faithfully
(an unknown block type, an image, ``previous_response_id``) raises :class:`Untranslatable`
with one line, which the proxy answers as a 400.
"""

from __future__ import annotations


class Untranslatable(ValueError):
    """A request the translation cannot carry faithfully; its message is one line."""

    def __init__(self, message: str) -> None:
        super().__init__(message.replace("\n", " "))

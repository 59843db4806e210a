"""Answer the translation cases with vLLM 0.32's own conversion code, and check ours.

Run under the vLLM venv (``scripts/ci-vllm.sh --install-only`` builds it)::

    $VLLM_VENV/bin/python -m tools.translation_goldens tests/translate/goldens.json

For each case of ``tests/translate/cases.py`` it asks vLLM's Messages server code
(``AnthropicServingMessages.to_chat_completion_request``, ``messages_full_converter``,
``message_stream_converter``) what it makes, with its random signatures pinned, and writes
that. It also parses our chat request with vLLM's own ``ChatCompletionRequest`` and
compares every field with the request vLLM builds internally, so a difference shows here
(exit 1) and not only at the fast tier's golden test. ``contagent.wire.translate`` needs nothing
outside the standard library, so this venv can import it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from itertools import count
from pathlib import Path
from typing import Any

from tests.translate import cases

#: Request fields vLLM fills at random per request: not part of the translation.
RANDOM_FIELDS = ("request_id",)


def _pin_uuid() -> None:
    numbers = count()
    uuid.uuid4 = lambda: uuid.UUID(int=next(numbers))


def _full(request: Any) -> dict[str, Any]:
    dump = request.model_dump(mode="json", by_alias=True)
    return {k: v for k, v in dump.items() if k not in RANDOM_FIELDS}


def _requests(problems: list[str]) -> dict[str, Any]:
    from vllm.entrypoints.anthropic.protocol import AnthropicMessagesRequest
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    from contagent.wire.translate.anthropic_request import to_chat_request

    out: dict[str, Any] = {}
    for name, (body, merge, effort) in cases.MESSAGES_REQUESTS.items():
        request = AnthropicMessagesRequest.model_validate(json.loads(json.dumps(body)))
        theirs = AnthropicServingMessages.to_chat_completion_request(
            request, merge_inline_system=merge, disabled_thinking_effort=effort
        )
        ours = to_chat_request(body, merge_inline_system=merge, disabled_thinking_effort=effort)
        out[name] = {"messages": theirs.messages, "fields": _full(theirs)}
        parsed = _full(ChatCompletionRequest.model_validate(json.loads(json.dumps(ours))))
        for key in sorted(set(parsed) | set(out[name]["fields"])):
            if parsed.get(key) != out[name]["fields"].get(key):
                problems.append(
                    f"request {name}: {key}: ours {parsed.get(key)!r} vLLM {out[name]['fields'].get(key)!r}"
                )
    return out


def _answers() -> dict[str, Any]:
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse

    out: dict[str, Any] = {}
    for name, answer in cases.CHAT_ANSWERS.items():
        _pin_uuid()
        parsed = ChatCompletionResponse.model_validate(answer)
        response = AnthropicServingMessages.messages_full_converter(None, parsed)
        out[name] = response.model_dump(exclude_none=True)
    return out


async def _events(chunks: list[Any]) -> list[str]:
    from vllm.entrypoints.anthropic.serving import AnthropicServingMessages

    async def upstream() -> Any:
        for chunk in chunks:
            yield "data: " + (chunk if isinstance(chunk, str) else json.dumps(chunk)) + "\n\n"

    converter = AnthropicServingMessages.message_stream_converter(None, upstream())
    return [event async for event in converter]


def main(target: str) -> int:
    problems: list[str] = []
    goldens: dict[str, Any] = {
        "requests": _requests(problems),
        "answers": _answers(),
        "streams": {},
    }
    for name, chunks in cases.CHAT_STREAMS.items():
        _pin_uuid()
        goldens["streams"][name] = asyncio.run(_events(chunks))
    Path(target).write_text(
        json.dumps(goldens, indent=1, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))

"""The translation against what vLLM 0.32's own conversion code made of the same cases.

``tests/translate/goldens.json`` was written by ``tools/translation_goldens.py`` under the
vLLM venv, which also parsed our chat requests with vLLM's request model and found every
field equal to the request vLLM builds internally. Here, without vLLM: the chat messages
and every field we set match, and the Messages answers and event streams match byte for
byte (vLLM's random signatures pinned the same way on both sides).
"""

from __future__ import annotations

import json
from itertools import count
from pathlib import Path
from typing import Any

import pytest

from contagent.wire.translate.anthropic_events import MessagesEvents
from contagent.wire.translate.anthropic_reply import to_messages_response
from contagent.wire.translate.anthropic_request import to_chat_request
from tests.translate import cases

GOLDENS = json.loads((Path(__file__).parent / "goldens.json").read_text(encoding="utf-8"))


def pinned() -> Any:
    """vLLM's uuid4().hex, as the golden tool pinned it: 0, 1, 2, ... in 32 hex digits."""
    numbers = count()
    return lambda: f"{next(numbers):032x}"


def covered(theirs: Any, ours: Any) -> bool:
    """Does vLLM's dump hold what we sent, with every field we leave out unset (null)?"""
    if isinstance(ours, dict):
        if not isinstance(theirs, dict):
            return False
        return all(k in theirs and covered(theirs[k], v) for k, v in ours.items()) and all(
            theirs[k] is None for k in theirs.keys() - ours.keys()
        )
    if isinstance(ours, list):
        return (
            isinstance(theirs, list)
            and len(theirs) == len(ours)
            and all(map(covered, theirs, ours))
        )
    return bool(theirs == ours)


@pytest.mark.parametrize("name", sorted(cases.MESSAGES_REQUESTS))
def test_requests_match_vllms_conversion(name: str) -> None:
    body, merge, effort = cases.MESSAGES_REQUESTS[name]
    ours = to_chat_request(body, merge_inline_system=merge, disabled_thinking_effort=effort)
    golden = GOLDENS["requests"][name]
    assert ours["messages"] == golden["messages"]
    for key, value in ours.items():
        if key != "messages":
            assert covered(golden["fields"][key], value), key


def test_the_covered_check_can_fail() -> None:
    assert not covered({"a": 1, "b": 2}, {"a": 1})
    assert not covered([1, 2], [1])
    assert covered({"a": 1, "b": None}, {"a": 1})


@pytest.mark.parametrize("name", sorted(cases.CHAT_ANSWERS))
def test_answers_match_vllms_conversion(name: str) -> None:
    assert to_messages_response(cases.CHAT_ANSWERS[name], pinned()) == GOLDENS["answers"][name]


@pytest.mark.parametrize("name", sorted(cases.CHAT_STREAMS))
def test_streams_match_vllms_events_byte_for_byte(name: str) -> None:
    writer = MessagesEvents(pinned())
    ours = [event.decode() for chunk in cases.CHAT_STREAMS[name] for event in writer.feed(chunk)]
    assert ours == GOLDENS["streams"][name]

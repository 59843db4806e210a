"""Each wire API's knowledge lives in its adapter: its routes and stream event names are
written in its own modules under ``contagent/wire/`` and nowhere else in ``contagent/``
(``contagent/testing/``, whose stand-in server answers every API, excepted). An adapter's
translation to chat completions (``contagent/wire/translate/``) speaks both, so it may name its
own API's marks and chat's.

The marks are read from the adapters themselves (routes, end markers, the event types
their stream folders take), so a route or event an adapter adds is checked too.
"""

from __future__ import annotations

import typing
from pathlib import Path

import pytest

from contagent import wire
from contagent.agents import AGENTS
from contagent.agents.base import Api
from contagent.wire import chat_stream, messages_stream, responses
from tests.helpers import REPO

PACKAGE = REPO / "contagent"
WIRE = PACKAGE / "wire"

#: adapter name -> the modules of ``contagent/wire/`` that hold its knowledge
_CHAT = frozenset({"chat_completions.py", "chat_stream.py", "chat.py"})
OWNERS: dict[str, frozenset[str]] = {
    "chat": _CHAT,
    # the legacy completions API streams as chat does, and its adapter builds on chat's
    "completions": _CHAT | {"text_completions.py"},
    "responses": frozenset({"responses.py", "responses_tools.py"}),
    "messages": frozenset({"messages_api.py", "messages_stream.py"}),
}

#: what is written about an API that names it on the wire, beyond what the adapters list
_MORE_MARKS: dict[str, tuple[str, ...]] = {
    "chat": ("/v1/chat/completions",),
    "completions": (),
    "responses": ("/v1/responses", *sorted(responses.TERMINAL_EVENTS)),
    "messages": ("/v1/messages", *sorted(messages_stream.EVENTS - {"ping"})),
}


def marks(name: str) -> set[str]:
    """The strings that name API ``name`` on the wire: routes, end markers, event types."""
    api = wire.adapter(name)
    found = {*api.routes, *(m.decode() for m in api.end_markers), *_MORE_MARKS[name]}
    return found


def _sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in sorted(PACKAGE.rglob("*.py"))}


#: API -> how the names of its translations to chat completions begin
TRANSLATIONS: dict[str, str] = {"messages": "anthropic_", "responses": "responses_"}


def _allowed(path: Path, name: str) -> bool:
    if path.is_relative_to(PACKAGE / "testing"):
        return True
    if path.parent == WIRE / "translate":
        speaks = {n for n, prefix in TRANSLATIONS.items() if path.name.startswith(prefix)}
        return name in speaks or (bool(speaks) and name in ("chat", "completions"))
    return path.parent == WIRE and path.name in OWNERS[name]


def _shadowed(mark: str, name: str) -> bool:
    """Whether a text holding ``mark`` may hold it as part of another API's longer mark
    (``/completions`` in ``/chat/completions``)."""
    return any(mark in other and mark != other for n in OWNERS if n != name for other in marks(n))


def leaks(sources: dict[Path, str]) -> list[str]:
    """``path: mark`` for each API mark written outside its adapter's modules."""
    out = []
    for name in OWNERS:
        for mark in sorted(marks(name)):
            for path, text in sources.items():
                if mark not in text or _allowed(path, name):
                    continue
                if _shadowed(mark, name):
                    longer = [o for n in OWNERS if n != name for o in marks(n) if mark in o]
                    if text.count(mark) == sum(text.count(o) for o in longer):
                        continue
                out.append(f"{path.relative_to(REPO)}: {mark!r} ({name})")
    return out


def test_every_adapter_is_in_the_owners_table() -> None:
    assert set(OWNERS) == set(wire.TABLE)
    for name in OWNERS:
        assert wire.adapter(name).name == name
        assert wire.TABLE[name].rpartition(".")[2] + ".py" in OWNERS[name]


def test_the_marks_are_found_in_the_adapters() -> None:
    """The check below cannot pass for want of marks: each is written in its adapter."""
    sources = _sources()
    for name in OWNERS:
        owned = "".join(
            t for p, t in sources.items() if p.parent == WIRE and p.name in OWNERS[name]
        )
        for mark in marks(name):
            assert mark in owned, (name, mark)
    assert "[DONE]" in marks("chat")
    assert {"message_stop", "/messages"} <= marks("messages")
    assert {"response.completed", "/responses"} <= marks("responses")


def test_no_api_is_named_outside_its_adapter() -> None:
    assert leaks(_sources()) == []


def test_the_check_finds_a_leak(tmp_path: Path) -> None:
    leaked = PACKAGE / "proxy" / "stream_state.py"
    sources = _sources()
    sources[leaked] += '\n# ends with "message_stop"\n'
    assert leaks(sources) == ["contagent/proxy/stream_state.py: 'message_stop' (messages)"]
    sources = _sources()
    sources[WIRE / "translate" / "anthropic_events.py"] += '\n# "response.completed"\n'
    assert leaks(sources) == [
        "contagent/wire/translate/anthropic_events.py: 'response.completed' (responses)"
    ]
    sources = _sources()
    sources[leaked] += '\n# the legacy route, "/completions"\n'
    assert leaks(sources) == ["contagent/proxy/stream_state.py: '/completions' (completions)"]


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_agents_name_an_adapter(agent: str) -> None:
    api = AGENTS[agent].api
    assert api == "none" or api in wire.TABLE
    assert set(typing.get_args(Api)) - {"none"} <= set(wire.TABLE)


def test_the_chat_stream_ends_with_its_marker() -> None:
    assert chat_stream.DONE.encode() in wire.end_markers()
    assert wire.is_end_event(chat_stream.DONE)
    assert wire.is_end_event('{"type": "message_stop"}')
    assert not wire.is_end_event('{"type": "message_delta", "note": "message_stop"}')


def test_the_api_version_prefix_is_stripped_in_one_place() -> None:
    assert wire.server_root("http://h:8000/v1/") == "http://h:8000"
    assert wire.server_root("http://h:8000") == "http://h:8000"
    assert wire.server_root("http://h:8000/v1x") == "http://h:8000/v1x"
    written = [
        str(p.relative_to(REPO))
        for p, text in _sources().items()
        if '"/v1"' in text and not p.is_relative_to(PACKAGE / "testing")
    ]
    assert written == ["contagent/wire/__init__.py"]

"""The tool list the model saw, as its server rendered it into the prompt: pure functions.

The trainer formats (``prime-sft``, ``trl``) carry only function tools, each with a name
and an object ``parameters`` schema, because the trainers' chat templates render nothing
else. What the model saw is the server's choice, so the mapping depends on the API the
request used and on the server that answered (a request record's ``server``, else
``result.json``'s):

- a function tool (chat shape, a Responses function, an Anthropic tool with an
  ``input_schema``) is that function on every server, and a ``parameters`` that is
  missing, null or ``{}`` becomes ``{"type": "object", "properties": {}}``;
- a tool of another kind renders as the API's adapter says, for vLLM only
  (:meth:`contagent.wire.WireApi.render_tool`: vLLM's Responses API flattens a
  namespace into its functions and leaves its built-in tools out);
- anything else (another server, no server recorded, a kind not checked such as a
  Responses ``custom`` tool, a schema that is not an object) has no known rendering:
  the rollout is left out of those formats (:data:`UNRENDERABLE_TOOL`), never written with
  a guessed tool list.

Exporter and validator both call :func:`trainer_tools`, so they cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from contagent import wire
from contagent.rules.messages import tool_union
from contagent.wire.chat import (
    Unrenderable,
    function_definition,
    rendered_function,
    tool_phrase,
)
from contagent.wire.responses_tools import namespace_names

#: The kind the export summary counts a rollout left out of a trainer format under.
UNRENDERABLE_TOOL = "unrenderable_tool"

#: The servers whose rendering of the non-function kinds below has been checked.
CHECKED_SERVERS = frozenset({"vllm"})


def callable_names(tools: list[Any]) -> set[str]:
    """The names a model may call among recorded ``tools``: each function's, and each
    namespace function's as ``<namespace>__<name>`` (the name its call is read with)."""
    names: set[str] = set()
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        fn = tool.get("function")
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
        else:
            names.update(namespace_names(tool))
    return names


def _server_name(server: Any) -> str | None:
    name = server.get("name") if isinstance(server, dict) else None
    return name if isinstance(name, str) else None


def _function_shape(tool: dict[str, Any]) -> dict[str, Any] | None:
    """A function tool's definition in whichever API's shape it is written: chat's first
    (the shape the raw-log reader gives), then each adapter's own."""
    found = function_definition(tool)
    if found is not None:
        return found
    for api in wire.adapters():
        found = api.function_tool(tool)
        if found is not None:
            return found
    return None


def _render_one(tool: Any, api: str, server: str | None, model: Any) -> list[dict[str, Any]]:
    if not isinstance(tool, dict):
        raise Unrenderable("a tool definition that is not an object")
    fn = _function_shape(tool)
    if fn is not None:
        return [rendered_function(fn)]
    where = tool_phrase(tool)
    if server not in CHECKED_SERVERS:
        known = f"server {server!r}" if server else "no server recorded"
        raise Unrenderable(f"{where}, and how the server renders it is not known ({known})")
    known_api = isinstance(api, str) and api in wire.TABLE
    rendered = wire.adapter(api).render_tool(tool, model) if known_api else None
    if rendered is None:
        raise Unrenderable(f"{where} on the {api} API: its rendering is not checked")
    return rendered


def rendered_tools(tools: Any, api: str, server: Any, model: Any = None) -> list[dict[str, Any]]:
    """The function tools the model saw for one request's ``tools`` (in chat shape, as the
    raw-log reader gives them) on ``api`` (``chat``, ``responses`` or ``messages``) from
    ``server`` (``{"name": ..., "version": ...}`` or None); raises :class:`Unrenderable`."""
    if tools is None:
        return []
    if not isinstance(tools, list):
        raise Unrenderable("tools is not a list")
    name = _server_name(server)
    return [fn for tool in tools for fn in _render_one(tool, api, name, model)]


@dataclass(frozen=True)
class TrainerTools:
    """Per branch, the union of the tools the model saw; or why they are not known."""

    branches: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    unrenderable: str | None = None
    """Why the rollout is left out of the trainer formats (None: it is not)."""


def trainer_tools(
    steps: Iterable[tuple[int, int, dict[str, Any] | None]], result_server: Any
) -> TrainerTools:
    """:func:`rendered_tools` over a rollout's steps, given as ``(branch, exchange index,
    request record)`` in step order, unioned per branch. A request's own ``server`` wins
    over ``result_server`` (``result.json``'s)."""
    lists: dict[int, list[Any]] = {}
    for branch, index, record in steps:
        record = record or {}
        body = record.get("body")
        body = body if isinstance(body, dict) else {}
        server = record.get("server") or result_server
        try:
            tools = rendered_tools(
                body.get("tools"), record.get("api") or "chat", server, body.get("model")
            )
        except Unrenderable as exc:
            return TrainerTools(unrenderable=f"request {index}: {exc}")
        lists.setdefault(branch, []).append(tools)
    branches = {}
    for branch, tool_lists in lists.items():
        union, conflicts = tool_union(tool_lists)
        if conflicts:
            return TrainerTools(
                unrenderable=f"tools rendered with different schemas: {conflicts[0]}"
            )
        branches[branch] = union
    return TrainerTools(branches=branches)

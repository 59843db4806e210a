"""The tool list the model saw, as its server rendered it into the prompt: pure functions.

The trainer formats (``prime-sft``, ``trl``) carry only function tools, each with a name
and an object ``parameters`` schema, because the trainers' chat templates render nothing
else. What the model saw is the server's choice, so the mapping depends on the API the
request used and on the server that answered (a request record's ``server``, else
``result.json``'s):

- a function tool (chat shape, a Responses function, an Anthropic tool with an
  ``input_schema``) is that function on every server, and a ``parameters`` that is
  missing, null or ``{}`` becomes ``{"type": "object", "properties": {}}``;
- vLLM's Responses API flattens a ``namespace`` into its functions, each named
  ``<namespace>__<name>``, and leaves its built-in tools (``web_search``, ...) out of the
  prompt; so do these rules, for vLLM only, and not for gpt-oss models, whose prompt
  format renders built-in tools its own way;
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

from contagent.responses import namespaced_name
from contagent.rules.messages import tool_union

#: The kind the export summary counts a rollout left out of a trainer format under.
UNRENDERABLE_TOOL = "unrenderable_tool"

#: The servers whose rendering of the non-function kinds below has been checked.
CHECKED_SERVERS = frozenset({"vllm"})

#: Responses built-in tools, run by the provider: vLLM renders none of them for a model
#: that uses a chat template.
RESPONSES_BUILT_INS = frozenset(
    {
        "web_search",
        "web_search_2025_08_26",
        "web_search_preview",
        "web_search_preview_2025_03_11",
        "file_search",
        "code_interpreter",
        "image_generation",
        "computer_use_preview",
        "computer",
        "local_shell",
        "shell",
        "apply_patch",
        "mcp",
        "tool_search",
    }
)

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}


class Unrenderable(ValueError):
    """A tool whose rendering is not known; the message says which and why."""


def _parameters(value: Any, name: str) -> dict[str, Any]:
    if value is None or value == {}:
        return dict(EMPTY_PARAMETERS)
    if not isinstance(value, dict) or value.get("type") != "object":
        raise Unrenderable(f"tool {name!r} has a parameters schema that is not an object")
    return value


def _function(fn: Any) -> dict[str, Any]:
    """A chat ``function`` definition with a name and an object ``parameters`` schema."""
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or not name:
        raise Unrenderable("a function tool without a name")
    return {
        "type": "function",
        "function": {**fn, "parameters": _parameters(fn.get("parameters"), name)},
    }


def _flat_function(tool: dict[str, Any], name: str) -> dict[str, Any]:
    """A flat (Responses-shaped) function definition in chat shape, named ``name``."""
    fn = {k: v for k, v in tool.items() if k != "type"}
    return _function({**fn, "name": name})


def _namespace(tool: dict[str, Any]) -> list[dict[str, Any]]:
    space, inner = tool.get("name"), tool.get("tools")
    if not isinstance(space, str) or not isinstance(inner, list):
        raise Unrenderable("a namespace without a name or a tool list")
    out = []
    for member in inner:
        if not isinstance(member, dict) or member.get("type") != "function":
            continue  # vLLM flattens a namespace's functions only
        name = member.get("name")
        if not isinstance(name, str):
            raise Unrenderable(f"a function without a name in namespace {space!r}")
        out.append(_flat_function(member, namespaced_name(space, name)))
    return out


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
        elif tool.get("type") == "namespace" and isinstance(tool.get("tools"), list):
            names.update(
                namespaced_name(tool.get("name"), m.get("name"))
                for m in tool["tools"]
                if isinstance(m, dict)
                and m.get("type") == "function"
                and isinstance(m.get("name"), str)
            )
    return names


def _server_name(server: Any) -> str | None:
    name = server.get("name") if isinstance(server, dict) else None
    return name if isinstance(name, str) else None


def _is_harmony(model: Any) -> bool:
    return isinstance(model, str) and "gpt-oss" in model.lower()


def _render_one(tool: Any, api: str, server: str | None, model: Any) -> list[dict[str, Any]]:
    if not isinstance(tool, dict):
        raise Unrenderable("a tool definition that is not an object")
    kind = tool.get("type")
    if isinstance(tool.get("function"), dict) and kind in (None, "function"):
        return [_function(tool["function"])]
    if "input_schema" in tool and isinstance(tool.get("name"), str):
        fn = {k: v for k, v in tool.items() if k not in ("input_schema", "type", "cache_control")}
        return [_function({**fn, "parameters": tool["input_schema"]})]
    if kind == "function" and isinstance(tool.get("name"), str):
        return [_flat_function(tool, tool["name"])]
    where = f"a {kind!r} tool" if isinstance(kind, str) else "a tool of no type"
    if server not in CHECKED_SERVERS:
        known = f"server {server!r}" if server else "no server recorded"
        raise Unrenderable(f"{where}, and how the server renders it is not known ({known})")
    if api != "responses" or _is_harmony(model):
        raise Unrenderable(f"{where} on the {api} API: its rendering is not checked")
    if kind == "namespace":
        return _namespace(tool)
    if kind in RESPONSES_BUILT_INS:
        return []
    raise Unrenderable(f"{where}: its rendering is not checked")


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

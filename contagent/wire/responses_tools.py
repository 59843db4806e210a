"""How vLLM renders the Responses API's tools that are not plain functions.

vLLM's Responses API flattens a ``namespace`` into its functions, each named
``<namespace>__<name>``, and leaves its built-in tools (``web_search``, ...) out of the
prompt; not so for gpt-oss models, whose prompt format renders built-in tools its own way.
"""

from __future__ import annotations

from typing import Any

from contagent.wire.chat import Unrenderable, rendered_function, tool_phrase

#: What vLLM joins a namespace and its function's name with, in the tool list it renders
#: for the model (a call item gives the two apart as ``namespace`` and ``name``).
NAMESPACE_SEPARATOR = "__"

#: Responses built-in tools, run by the provider: vLLM renders none of them for a model
#: that uses a chat template.
BUILT_INS = frozenset(
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


def namespaced_name(namespace: Any, name: Any) -> Any:
    """A namespace's function as the model saw it named; ``name`` when there is no namespace."""
    if isinstance(namespace, str) and namespace and isinstance(name, str):
        return f"{namespace}{NAMESPACE_SEPARATOR}{name}"
    return name


def namespace_names(tool: dict[str, Any]) -> set[str]:
    """The names a model calls a namespace's functions by (``<namespace>__<name>``); none
    for a tool that is no namespace."""
    if tool.get("type") != "namespace" or not isinstance(tool.get("tools"), list):
        return set()
    return {
        namespaced_name(tool.get("name"), m.get("name"))
        for m in tool["tools"]
        if isinstance(m, dict) and m.get("type") == "function" and isinstance(m.get("name"), str)
    }


def flat_function(tool: dict[str, Any]) -> dict[str, Any] | None:
    """A flat Responses function tool's definition, None for a tool of another shape."""
    if tool.get("type") != "function" or not isinstance(tool.get("name"), str):
        return None
    return {k: v for k, v in tool.items() if k != "type"}


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
        fn = {k: v for k, v in member.items() if k != "type"}
        out.append(rendered_function({**fn, "name": namespaced_name(space, name)}))
    return out


def _is_harmony(model: Any) -> bool:
    return isinstance(model, str) and "gpt-oss" in model.lower()


def render_tool(tool: dict[str, Any], model: Any) -> list[dict[str, Any]] | None:
    """The functions vLLM renders for a non-function tool; None for a gpt-oss model, whose
    rendering is not checked; raises :class:`Unrenderable` for a kind not checked."""
    if _is_harmony(model):
        return None
    kind = tool.get("type")
    if kind == "namespace":
        return _namespace(tool)
    if kind in BUILT_INS:
        return []
    raise Unrenderable(f"{tool_phrase(tool)}: its rendering is not checked")

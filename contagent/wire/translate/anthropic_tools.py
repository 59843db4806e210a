"""Messages tools and ``tool_choice`` as vLLM 0.32's Messages server gives them to chat.

- each tool -> a function tool: ``name``, ``description``, ``input_schema`` as
  ``parameters`` (typed ``object`` when it names no type), ``strict`` and
  ``defer_loading`` when set;
- ``tool_addition`` / ``tool_removal`` blocks (allowed in system messages only) change the
  list in order: a tool added by reference stops being deferred, one added by value is
  declared, a removed one is dropped. Chat templates see one list, the one in effect at
  the end of the conversation;
- ``tool_choice`` ``auto``/``any``/``none``/``tool`` -> ``auto``/``required``/``none``/a
  named function, and ``parallel_tool_calls`` is the negation of
  ``disable_parallel_tool_use``.
"""

from __future__ import annotations

from typing import Any

from contagent.wire.translate import Untranslatable

#: ``tool_choice.type`` -> the chat ``tool_choice``.
TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}


def _tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
        raise Untranslatable(f"{where}: a tool must be an object with a name")
    schema = tool.get("input_schema")
    if not isinstance(schema, dict):
        raise Untranslatable(f"{where}: tool {tool['name']!r} has no input_schema object")
    return tool


def resolved_tools(body: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The tools in effect at the end of the conversation: ``tool_addition`` and
    ``tool_removal`` blocks of system messages applied to ``tools``, as vLLM does."""
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise Untranslatable("tools must be a list")
    declared = [_tool(t, f"tools[{i}]") for i, t in enumerate(tools or [])]
    changes = [
        block
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] in ("tool_addition", "tool_removal")
    ]
    if not changes:
        return declared if tools is not None else None
    by_name = {t["name"]: t for t in declared}
    removed: set[str] = set()
    for block in changes:
        change = block.get("tool")
        if not isinstance(change, dict):
            raise Untranslatable(f"{block['type']}: tool is required")
        if change.get("type") == "tool_definition":
            name = _tool(change.get("definition"), block["type"])["name"]
            by_name[name] = change["definition"]
        else:
            name = change.get("name")
            if name not in by_name:
                raise Untranslatable(
                    f"{block['type']} references tool {name!r}, which is not declared in tools"
                )
            if block["type"] == "tool_addition":
                by_name[name] = {**by_name[name], "defer_loading": None}
        if block["type"] == "tool_removal":
            removed.add(name)
        else:
            removed.discard(name)
    return [t for name, t in by_name.items() if name not in removed]


def chat_tool(tool: dict[str, Any]) -> dict[str, Any]:
    schema = tool["input_schema"]
    function: dict[str, Any] = {
        "name": tool["name"],
        "description": tool.get("description"),
        "parameters": schema if "type" in schema else {**schema, "type": "object"},
    }
    for key in ("strict", "defer_loading"):
        if tool.get(key) is not None:
            function[key] = tool[key]
    return {"type": "function", "function": function}


def set_tool_choice(choice: Any, out: dict[str, Any]) -> None:
    if choice is None:
        return
    kind = choice.get("type") if isinstance(choice, dict) else None
    if kind == "tool":
        if not choice.get("name"):
            raise Untranslatable("tool_choice.name is required when type is 'tool'")
        out["tool_choice"] = {"type": "function", "function": {"name": choice["name"]}}
    elif kind in TOOL_CHOICES:
        out["tool_choice"] = TOOL_CHOICES[kind]
    else:
        raise Untranslatable(f"tool_choice type {kind!r} is not translated")
    out["parallel_tool_calls"] = not choice.get("disable_parallel_tool_use")

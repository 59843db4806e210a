"""The request settings a Responses object echoes, in the shape vLLM 0.32 echoes them.

vLLM parses a request's ``tools``, ``reasoning`` and ``text`` into the OpenAI SDK's models
(openai 3.57.0, the version vLLM 0.32 installs) and dumps them back, so every field those
models know is present, null where the client left it out, in the models' order. The
tables below are those models' field names (``tests/translate/test_responses_echo.py``
checks them against the SDK); a tool type not in them is echoed as sent.
"""

from __future__ import annotations

from typing import Any

#: tool ``type`` -> the SDK model's fields, in order
TOOL_FIELDS: dict[str, tuple[str, ...]] = {
    "function": ("name", "parameters", "strict", "type", "allowed_callers", "async", "defer_loading", "description", "output_schema"),
    "file_search": ("type", "vector_store_ids", "filters", "max_num_results", "ranking_options"),
    "computer": ("type",),
    "computer_use_preview": ("display_height", "display_width", "environment", "type"),
    "web_search": ("type", "external_web_access", "filters", "search_context_size", "user_location"),
    "mcp": (
        "server_label", "type", "allowed_callers", "allowed_tools", "authorization", "connector_id",
        "defer_loading", "headers", "require_approval", "server_description", "server_url", "tunnel_id",
    ),
    "code_interpreter": ("container", "type", "allowed_callers"),
    "programmatic_tool_calling": ("type",),
    "local_shell": ("type",),
    "shell": ("type", "allowed_callers", "environment"),
    "custom": ("name", "type", "allowed_callers", "async", "defer_loading", "description", "format"),
    "namespace": ("description", "name", "tools", "type"),
    "tool_search": ("type", "description", "execution", "parameters"),
    "web_search_preview": ("type", "search_content_types", "search_context_size", "user_location"),
    "apply_patch": ("type", "allowed_callers"),
}  # fmt: skip

#: a namespace's function tools
NAMESPACE_FUNCTION_FIELDS = (
    "name", "type", "allowed_callers", "async", "defer_loading", "description", "output_schema",
    "parameters", "strict",
)  # fmt: skip

REASONING_FIELDS = ("context", "effort", "generate_summary", "mode", "summary")
TEXT_FIELDS = ("format", "verbosity")
#: ``text.format`` ``type`` -> its fields
TEXT_FORMAT_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("type",),
    "json_schema": ("name", "schema", "type", "description", "strict"),
    "json_object": ("type",),
}


def _filled(value: Any, fields: tuple[str, ...]) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: value.get(k) for k in fields}


def tool(value: Any) -> Any:
    fields = TOOL_FIELDS.get(str(value.get("type"))) if isinstance(value, dict) else None
    if fields is None:
        return value
    out = _filled(value, fields)
    if value.get("type") == "namespace" and isinstance(out.get("tools"), list):
        inner = [
            _filled(t, NAMESPACE_FUNCTION_FIELDS)
            if isinstance(t, dict) and t.get("type") == "function"
            else tool(t)
            for t in out["tools"]
        ]
        out["tools"] = inner
    return out


def tools(value: Any) -> list[Any]:
    return [tool(t) for t in value] if isinstance(value, list) else []


def reasoning(value: Any) -> Any:
    return None if value is None else _filled(value, REASONING_FIELDS)


def text(value: Any) -> Any:
    if not isinstance(value, dict):
        return value
    out = _filled(value, TEXT_FIELDS)
    fmt = out.get("format")
    if isinstance(fmt, dict) and fmt.get("type") in TEXT_FORMAT_FIELDS:
        out["format"] = _filled(fmt, TEXT_FORMAT_FIELDS[fmt["type"]])
    return out

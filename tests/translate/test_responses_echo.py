"""The echo tables are the OpenAI SDK models' fields (the version vLLM 0.32 installs)."""

from __future__ import annotations

import typing

import pytest

from contagent.wire.translate import responses_echo

openai = pytest.importorskip("openai")
pytestmark = pytest.mark.skipif(
    openai.__version__ != "3.57.0", reason="the tables are openai 3.57.0's"
)


def _fields(model: typing.Any) -> tuple[str, ...]:
    return tuple(v.alias or k for k, v in model.model_fields.items())


def test_tool_tables_are_the_sdks() -> None:
    from openai.types.responses.tool import Tool

    union = typing.get_args(Tool)
    members = typing.get_args(union[0]) if len(union) < 3 else union
    found = {typing.get_args(m.model_fields["type"].annotation)[0]: _fields(m) for m in members}
    found.pop("image_generation")  # not echoed field by field: no chat-template model has it
    assert found == {k: v for k, v in responses_echo.TOOL_FIELDS.items() if k != "image_generation"}


def test_reasoning_text_and_namespace_tables_are_the_sdks() -> None:
    from openai.types.responses import ResponseTextConfig
    from openai.types.responses.namespace_tool import ToolFunction
    from openai.types.shared import Reasoning

    assert _fields(Reasoning) == responses_echo.REASONING_FIELDS
    assert _fields(ResponseTextConfig) == responses_echo.TEXT_FIELDS
    assert _fields(ToolFunction) == responses_echo.NAMESPACE_FUNCTION_FIELDS


def test_a_tool_is_echoed_with_every_field_and_an_unknown_one_as_sent() -> None:
    echoed = responses_echo.tool({"type": "web_search"})
    assert echoed == {
        "type": "web_search",
        "external_web_access": None,
        "filters": None,
        "search_context_size": None,
        "user_location": None,
    }
    assert responses_echo.tool({"type": "brand_new", "x": 1}) == {"type": "brand_new", "x": 1}
    ns = responses_echo.tool(
        {"type": "namespace", "name": "n", "tools": [{"type": "function", "name": "f"}]}
    )
    assert ns["tools"][0]["strict"] is None and ns["description"] is None

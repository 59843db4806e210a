"""The tools the trainer formats carry, against the prompt a real vLLM renders.

The tier's server renders the prompt with the tiny model's Qwen3 chat template. For a
Responses request, ``enable_response_messages`` returns the prompt it rendered (text and
token ids); :func:`contagent.rules.rendered_tools` maps the same tools, and vLLM's own
``/tokenize`` renders the chat messages with them: the token ids must be the same. A
Messages request is compared by the prompt length ``count_tokens`` gives.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from contagent.rules import rendered_tools
from contagent.wire import responses

conversations = pytest.importorskip(
    "tests.vllm.conversations", reason="the vLLM tier (tests/vllm) is not here"
)
MODEL, SYSTEM = conversations.MODEL, conversations.SYSTEM

pytestmark = pytest.mark.vllm

VLLM = {"name": "vllm"}
TASK = "Find the secret in secret.txt and report it."
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
TERMINAL = {"type": "function", "name": "terminal", "description": "Run.", "parameters": SCHEMA}
SPAWN = {
    "type": "function",
    "name": "spawn_agent",
    "description": "Start one.",
    "parameters": SCHEMA,
}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent",
    "description": "Sub-agents.",
    "tools": [SPAWN],
}
MESSAGES = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]


def _responses_prompt(url: str, tools: list[dict[str, Any]]) -> tuple[str, list[int]]:
    body = {
        "model": MODEL,
        "instructions": SYSTEM,
        "input": TASK,
        "tools": tools,
        "max_output_tokens": 1,
        "enable_response_messages": True,
    }
    resp = httpx.post(url + "/v1/responses", json=body, timeout=600)
    resp.raise_for_status()
    (prompt,) = resp.json()["input_messages"]
    return prompt["message"], prompt["tokens"]


def _tokenize(url: str, tools: list[dict[str, Any]], messages: Any = MESSAGES) -> list[int]:
    body = {"model": MODEL, "messages": messages, "tools": tools, "add_generation_prompt": True}
    resp = httpx.post(url + "/tokenize", json=body, timeout=600)
    resp.raise_for_status()
    return resp.json()["tokens"]


def _mapped(tools: list[dict[str, Any]], api: str = "responses") -> list[dict[str, Any]]:
    return rendered_tools(responses.chat_tools(tools) if api == "responses" else tools, api, VLLM)


def test_responses_namespaces_are_flattened_and_built_ins_left_out(vllm) -> None:
    tools = [TERMINAL, {"type": "web_search"}, NAMESPACE]
    prompt, tokens = _responses_prompt(vllm.url, tools)
    print(f"--- the prompt vLLM rendered for {[t['type'] for t in tools]}:\n{prompt}")
    mapped = _mapped(tools)
    assert [t["function"]["name"] for t in mapped] == ["terminal", "multi_agent__spawn_agent"]
    assert _tokenize(vllm.url, mapped) == tokens
    assert "multi_agent__spawn_agent" in prompt and "web_search" not in prompt
    # The function tools as recorded, namespace left out, are not what the model saw.
    assert _tokenize(vllm.url, _mapped([TERMINAL])) != tokens


def test_responses_functions_are_what_the_model_saw(vllm) -> None:
    prompt, tokens = _responses_prompt(vllm.url, [TERMINAL])
    assert _tokenize(vllm.url, _mapped([TERMINAL])) == tokens
    assert '"name": "terminal"' in prompt


def test_empty_parameters_are_the_one_place_the_formats_differ_from_the_prompt(vllm) -> None:
    """vLLM hands ``parameters: {}`` to the template as it is; the formats hold the empty
    object schema the trainers' templates need. Everything else is the prompt's."""
    bare = {**SPAWN, "parameters": {}}
    prompt, tokens = _responses_prompt(vllm.url, [bare])
    print(f"--- the prompt vLLM rendered for parameters {{}}:\n{prompt}")
    (mapped,) = _mapped([bare])
    assert mapped["function"]["parameters"] == {"type": "object", "properties": {}}
    as_sent = {**mapped, "function": {**mapped["function"], "parameters": {}}}
    assert _tokenize(vllm.url, [as_sent]) == tokens


def test_an_anthropic_tool_is_the_function_vllm_renders(vllm) -> None:
    tool = {"name": "Bash", "description": "Run a command.", "input_schema": SCHEMA}
    body = {"model": MODEL, "system": SYSTEM, "messages": [{"role": "user", "content": TASK}]}
    resp = httpx.post(
        vllm.url + "/v1/messages/count_tokens", json={**body, "tools": [tool]}, timeout=600
    )
    resp.raise_for_status()
    counted = resp.json()["input_tokens"]
    mapped = _mapped([tool], "messages")
    assert mapped == [
        {
            "type": "function",
            "function": {"name": "Bash", "description": "Run a command.", "parameters": SCHEMA},
        }
    ]
    assert len(_tokenize(vllm.url, mapped)) == counted
    assert len(_tokenize(vllm.url, [])) != counted

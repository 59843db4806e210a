"""The one Arrow schema of every Prime-SFT Parquet file contagent writes.

``messages`` is in OpenAI wire shape with string content and tool-call
``arguments`` as JSON strings; ``tools`` is the JSON string of the branch's
tool definitions (what prime-rl's SFT loader reads besides ``messages``).
"""

from __future__ import annotations

import pyarrow as pa

TOOL_CALL = pa.struct(
    [
        ("id", pa.string()),
        ("type", pa.string()),
        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
    ]
)

MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("reasoning_content", pa.string()),
        ("tool_calls", pa.list_(TOOL_CALL)),
        ("tool_call_id", pa.string()),
        ("name", pa.string()),
    ]
)

PRIME_SFT_SCHEMA = pa.schema(
    [
        pa.field("messages", pa.list_(MESSAGE), nullable=False),
        pa.field("tools", pa.string(), nullable=False),
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("branch", pa.int32(), nullable=False),
        pa.field("experiment", pa.string()),
        pa.field("model", pa.string()),
        pa.field("reward", pa.float64()),
        pa.field("passed", pa.bool_()),
        pa.field("num_turns", pa.int32(), nullable=False),
        pa.field("num_messages", pa.int32(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("completion_tokens", pa.int64(), nullable=False),
        pa.field("total_tokens", pa.int64(), nullable=False),
    ],
    metadata={"contagent.format": "prime-sft", "contagent.schema_version": "1"},
)

COLUMN_DOCS: dict[str, str] = {
    "messages": "The conversation branch in OpenAI chat format: role, string content, "
    "reasoning_content (assistant), tool_calls (arguments as JSON strings), tool_call_id, name.",
    "tools": "JSON string: the OpenAI tool definitions available in this branch.",
    "rollout_id": "The rollout the branch comes from.",
    "branch": "0-based branch index within the rollout (a new branch starts where history was rewritten).",
    "experiment": "Experiment name.",
    "model": "Model that produced the assistant turns.",
    "reward": "Reward of the rollout (evaluate.sh verdict), when known.",
    "passed": "Whether the rollout passed its evaluation, when known.",
    "num_turns": "Number of assistant turns in the branch.",
    "num_messages": "Number of messages in the branch.",
    "prompt_tokens": "Prompt tokens billed for the branch's selected exchanges.",
    "completion_tokens": "Completion tokens billed for the branch's selected exchanges.",
    "total_tokens": "Total tokens billed for the branch's selected exchanges.",
}

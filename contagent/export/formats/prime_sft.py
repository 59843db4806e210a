"""Prime-SFT: the dataset prime-rl's SFT trainer reads as it is.

``messages`` is in OpenAI wire shape with string content and tool-call
``arguments`` as JSON strings; ``tools`` is the JSON string of the function tools the
model saw in the branch, as its server rendered them (:mod:`contagent.rules.rendered_tools`;
what prime-rl's SFT loader reads besides ``messages``).
Plain Arrow strings, because the ``datasets`` release prime-rl pins cannot
read the ``Json`` feature.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import orjson
import pyarrow as pa

from contagent.core.trajectory import branch_conversations
from contagent.export.formats.rollout_data import RolloutData
from contagent.export.formats.version import schema_metadata
from contagent.rules import UNRENDERABLE_TOOL, selected_for_training
from contagent.wire.chat import sum_usage


def message_struct(arguments: pa.DataType) -> pa.StructType:
    """An OpenAI chat message as an Arrow struct, tool-call ``arguments`` of the given type
    (a JSON string here; a JSON value in the ``trl`` format)."""
    tool_call = pa.struct(
        [
            ("id", pa.string()),
            ("type", pa.string()),
            ("function", pa.struct([("name", pa.string()), ("arguments", arguments)])),
        ]
    )
    return pa.struct(
        [
            ("role", pa.string()),
            ("content", pa.string()),
            ("reasoning_content", pa.string()),
            ("tool_calls", pa.list_(tool_call)),
            ("tool_call_id", pa.string()),
            ("name", pa.string()),
        ]
    )


MESSAGE = message_struct(pa.string())

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
    metadata=schema_metadata("prime-sft"),
)

COLUMN_DOCS: dict[str, str] = {
    "messages": "The conversation branch in OpenAI chat format: role, string content, "
    "reasoning_content (assistant), tool_calls (arguments as JSON strings), tool_call_id, name.",
    "tools": "JSON string: the function tools the model saw in this branch, as the server "
    "rendered them (each a name and an object parameters schema).",
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


def branch_records(
    row: dict[str, Any], branch_tools: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The Parquet records of a row, one per branch, in branch order."""
    records = []
    for branch, messages in enumerate(branch_conversations(row["steps"], row["drop_reasoning"])):
        usage = sum_usage(s["usage"] for s in row["steps"] if s["branch"] == branch)
        records.append(
            {
                "messages": messages,
                "tools": orjson.dumps(branch_tools.get(branch, [])).decode(),
                "rollout_id": row["rollout_id"],
                "branch": branch,
                "experiment": row.get("experiment"),
                "model": row.get("model"),
                "reward": row.get("reward"),
                "passed": row.get("passed"),
                "num_turns": sum(1 for m in messages if m["role"] == "assistant"),
                "num_messages": len(messages),
                **usage,
            }
        )
    return records


USAGE = """\
### prime-rl

prime-rl's SFT trainer reads the `messages` column and the JSON `tools` column as they are
(it parses each call's `arguments` itself). In the trainer's config:

```toml
[data]
name = "ORG/NAME"   # or the local folder's path
splits = ["train"]

[renderer]
name = "qwen3"      # a typed renderer for your model's family
```

- prime-rl turns conversations into tokens with a typed renderer chosen from the model's name.
  For a model it has no renderer registered for (Qwen3-Coder and fine-tunes among them), name
  one as above (for example `qwen3`, `qwen3.5`, `llama-3`, `glm-4.5`, `kimi-k2`): the fallback
  renders with the model's chat template and cannot tell which tokens the model produced.
- The loss is on assistant turns only by default (`[data.loss_mask]` `assistant = true`,
  `system`, `user` and `tool` false).

### TRL

TRL's chat templates need each tool call's `arguments` as an object, not the JSON string held
here. Export with `contagent export ... --format trl` and train on that folder instead.
"""


ABOUT = """\
Supervised fine-tuning data exported by contagent
{version} from recorded coding-agent rollouts. Each row is one conversation
**branch** of a training-ready rollout that passed the export filter: the exchanges the agent
actually used, merged into OpenAI-format messages with tool calls, plus the tool definitions the
model saw. A rollout whose history was rewritten (for example condensed) yields several branches."""


class SftBranches:
    """What the SFT formats share: a row per conversation branch of a rollout the filter
    keeps for training, and none for one whose tools, as the model saw them, are not known."""

    key_columns: tuple[str, ...] = ("branch",)
    rows_are = "conversation branches"

    def selected(self, row: dict[str, Any], rollout_filter: str) -> bool:
        return selected_for_training(row, rollout_filter)

    def left_out(self, row: dict[str, Any], data: RolloutData) -> str | None:
        return None if data.trainer_tools.unrenderable is None else UNRENDERABLE_TOOL


class PrimeSft(SftBranches):
    """The ``prime-sft`` format (see the module docstring)."""

    name = "prime-sft"
    title = "contagent Prime-SFT"
    schema = PRIME_SFT_SCHEMA
    older_schemas: Mapping[int, pa.Schema] = MappingProxyType({})  # one shape throughout
    column_docs = COLUMN_DOCS
    usage = USAGE
    about = ABOUT
    column_notes = (
        "Unset message fields are null (for example `tool_calls` on a user message); `tools` "
        "is a JSON string so that every row has the same type whatever the tools' schemas."
    )

    def records(self, row: dict[str, Any], data: RolloutData) -> list[dict[str, Any]]:
        return branch_records(row, data.trainer_tools.branches)

"""TRL: the Prime-SFT rows with tool-call ``arguments`` and ``tools`` as JSON objects.

Chat templates expect ``arguments`` to be a mapping: given the JSON string most of
them encode it a second time (``"arguments": "{\\"command\\": ...}"``) and some
fail to render. Here ``arguments`` and ``tools`` are Arrow's canonical JSON type,
which ``datasets`` reads as its ``Json`` feature, so ``load_dataset`` gives dicts
and lists, each with its own keys (never another call's or tool's keys as nulls).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import orjson
import pyarrow as pa

from contagent.errors import ContagentError
from contagent.export.formats.prime_sft import (
    ABOUT,
    PRIME_SFT_SCHEMA,
    SftBranches,
    branch_records,
    message_struct,
)
from contagent.export.formats.prime_sft import COLUMN_DOCS as PRIME_SFT_DOCS
from contagent.export.formats.rollout_data import RolloutData
from contagent.export.formats.version import schema_metadata

_JSON = pa.json_()

MESSAGE = message_struct(_JSON)

TRL_SCHEMA = pa.schema(
    [
        pa.field("messages", pa.list_(MESSAGE), nullable=False),
        pa.field("tools", _JSON, nullable=False),
        *(f for f in PRIME_SFT_SCHEMA if f.name not in ("messages", "tools")),
    ],
    metadata=schema_metadata("trl"),
)

COLUMN_DOCS: dict[str, str] = {
    "messages": "The conversation branch in OpenAI chat format: role, string content, "
    "reasoning_content (assistant), tool_calls (arguments as JSON objects), tool_call_id, name.",
    "tools": "JSON (a list): the function tools the model saw in this branch, as the server "
    "rendered them (each a name and an object parameters schema).",
    **{k: v for k, v in PRIME_SFT_DOCS.items() if k not in ("messages", "tools")},
}


def object_arguments(arguments: Any, rollout_id: str, call_id: Any, fmt: str) -> dict[str, Any]:
    """``arguments`` (a JSON string) as the object it encodes, or raise naming ``fmt``."""
    try:
        value = orjson.loads(arguments) if isinstance(arguments, str) else None
    except orjson.JSONDecodeError:
        value = None
    if not isinstance(value, dict):
        raise ContagentError(
            f"rollout {rollout_id}: tool call {call_id!r} has arguments that are not a JSON "
            f"object; the {fmt} format holds objects only"
        )
    return value


def trl_records(
    row: dict[str, Any], branch_tools: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The Prime-SFT records of ``row`` with each call's ``arguments`` as an object.

    Values of the JSON columns are given as JSON text (Arrow's storage of the JSON
    type); ``tools`` is already that text in the Prime-SFT record.
    """
    records = branch_records(row, branch_tools)
    for record in records:
        for message in record["messages"]:
            for call in message["tool_calls"] or ():
                function = call["function"]
                function["arguments"] = orjson.dumps(
                    object_arguments(function["arguments"], row["rollout_id"], call["id"], "trl")
                ).decode()
    return records


USAGE = """\
### TRL

`SFTTrainer` takes this folder as it is: `messages` with tool calls whose `arguments` are
objects, and `tools` as a list of tool definitions, which TRL hands to the chat template.
TRL's defaults train on every token and cut sequences at 1,024 tokens; agent conversations
are longer, and only the assistant turns are the model's to learn:

```python
from datasets import load_dataset
from trl import SFTConfig, SFTTrainer

ds = load_dataset("ORG/NAME", split="train")  # or the local folder's path
args = SFTConfig(output_dir="sft", assistant_only_loss=True, max_length=16384)
trainer = SFTTrainer(model="Qwen/Qwen3-0.6B", train_dataset=ds, args=args)
trainer.train()
```

`assistant_only_loss=True` needs a chat template that marks assistant turns with
`{% generation %}`; TRL swaps in its own training template for the families it knows
(Qwen2.5, Qwen3, Qwen3.5, GLM-4-MoE, Llama 3, gpt-oss, ...). Pick `max_length` to fit your
longest rows (`num_messages` and the token columns help to filter); longer rows are cut.
"""


class Trl(SftBranches):
    """The ``trl`` format (see the module docstring)."""

    name = "trl"
    title = "contagent TRL"
    schema = TRL_SCHEMA
    older_schemas: Mapping[int, pa.Schema] = MappingProxyType({})  # one shape throughout
    column_docs = COLUMN_DOCS
    usage = USAGE
    about = ABOUT
    column_notes = (
        "Unset message fields are null (for example `tool_calls` on a user message). "
        "`arguments` and `tools` use the `Json` feature (declared in this card), so "
        "`load_dataset` gives each call's arguments and each tool as its own object."
    )

    def records(self, row: dict[str, Any], data: RolloutData) -> list[dict[str, Any]]:
        return trl_records(row, data.trainer_tools.branches)

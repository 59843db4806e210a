"""Sample Prime-SFT rows, export summaries and folders for the hub tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contagent.core.rows import TokenCounts, TokenUsage
from contagent.export.dataset_folder import ShardWriter, write_dataset_card
from contagent.export.export_summary import ExportSummary
from contagent.export.formats.prime_sft import PrimeSft

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "terminal",
            "description": "Run a shell command.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string"}},
                "required": ["command"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "finish",
            "description": "Finish the task.",
            "parameters": {"type": "object", "properties": {"message": {"type": "string"}}},
        },
    },
]


def _msg(role: str, content: str | None, **extra: Any) -> dict[str, Any]:
    base = {
        "role": role,
        "content": content,
        "reasoning_content": None,
        "tool_calls": None,
        "tool_call_id": None,
        "name": None,
    }
    base.update(extra)
    return base


def sample_row(i: int) -> dict[str, Any]:
    """One Prime-SFT row shaped like an OpenHands branch: tool call, tool output, finish."""
    call = f"call_{i}"
    args = json.dumps({"command": f"pytest -k case_{i}"})
    messages = [
        _msg("system", "You are a coding agent. Use the tools."),
        _msg("user", f"Fix bug #{i} | make the tests pass.\nDetails: ünïcode ✓"),
        _msg(
            "assistant",
            "",
            reasoning_content=f"Run the tests for case {i} first.",
            tool_calls=[
                {
                    "id": call,
                    "type": "function",
                    "function": {"name": "terminal", "arguments": args},
                }
            ],
        ),
        _msg("tool", f"{i} passed", tool_call_id=call, name="terminal"),
        _msg(
            "assistant",
            "Done.",
            tool_calls=[
                {
                    "id": f"{call}_f",
                    "type": "function",
                    "function": {"name": "finish", "arguments": json.dumps({"message": "ok"})},
                }
            ],
        ),
    ]
    return {
        "messages": messages,
        "tools": json.dumps(TOOLS),
        "rollout_id": f"rollout-{i // 2:04d}",
        "branch": i % 2,
        "experiment": "exp-a" if i % 3 else None,
        "model": "qwen3-coder",
        "reward": float(i % 2),
        "passed": bool(i % 2) if i % 5 else None,
        "num_turns": 2,
        "num_messages": len(messages),
        "prompt_tokens": 100 + i,
        "completion_tokens": 10 + i,
        "total_tokens": 110 + 2 * i,
    }


def make_summary(rows: int, **overrides: Any) -> ExportSummary:
    fields: dict[str, Any] = {
        "contagent_version": "0.1.0",
        "options": {"format": "prime-sft", "filter": "passed", "jobs": 2},
        "out_dir": "/tmp/out",
        "rollouts_read": 12,
        "training_ready": 9,
        "passed": 6,
        "not_ready_reasons": {"incomplete_consumed": 2, "tool_conflict": 1},
        "exclusions": {"duplicate_retry": 5, "unconsumed": 3, "abandoned": 1},
        "exchanges_read": 400,
        "steps_selected": 380,
        "repairs": 4,
        "branches_written": rows,
        "format_rows": {"prime-sft": rows},
        "rollouts_written": 7,
        "format_rollouts": {"prime-sft": 6},
        "models": ["qwen3-coder", "gpt|odd"],
        "experiments": ["exp-a"],
        "tokens": TokenUsage(
            billed=TokenCounts(prompt_tokens=9000, completion_tokens=900, total_tokens=9900),
            selected=TokenCounts(prompt_tokens=8000, completion_tokens=800, total_tokens=8800),
            excluded=TokenCounts(prompt_tokens=1000, completion_tokens=100, total_tokens=1100),
        ),
    }
    fields.update(overrides)
    return ExportSummary(**fields)


def build_folder(folder: Path, n_rows: int, shard_rows: int) -> list[dict[str, Any]]:
    rows = [sample_row(i) for i in range(n_rows)]
    with ShardWriter(folder, max_rows_per_shard=shard_rows) as writer:
        for start in range(0, n_rows, 3):  # several calls, crossing shard boundaries
            writer.write(rows[start : start + 3])
    write_dataset_card(folder, make_summary(n_rows), PrimeSft())
    return rows

"""Prime-SFT rows: one per conversation branch of a training-ready rollout."""

from __future__ import annotations

from typing import Any

import orjson

from contagent.chat import sum_usage
from contagent.trajectory import branch_conversations


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

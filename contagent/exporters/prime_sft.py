"""Prime-SFT rows: one per conversation branch of a training-ready rollout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from contagent.exporters.prime_sft_schema import PRIME_SFT_SCHEMA
from contagent.exporters.summary import ExportSummary
from contagent.trajectory import branch_conversations


def branch_records(
    row: dict[str, Any], branch_tools: dict[int, list[dict[str, Any]]]
) -> list[dict[str, Any]]:
    """The Parquet records of a row, one per branch, in branch order."""
    records = []
    for branch, messages in enumerate(branch_conversations(row["steps"], row["drop_reasoning"])):
        usage = dict.fromkeys(("prompt_tokens", "completion_tokens", "total_tokens"), 0)
        for step in row["steps"]:
            if step["branch"] == branch and step["usage"]:
                for key in usage:
                    usage[key] += step["usage"][key]
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


class PrimeSftWriter:
    """Writes ``OUT/prime-sft/`` as a Hub-ready dataset folder."""

    def __init__(self, folder: Path, shard_rows: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "data").mkdir(exist_ok=True)
        self._path = self.folder / "data" / "train-00000-of-00001.parquet"
        self._writer = pq.ParquetWriter(self._path, PRIME_SFT_SCHEMA)
        self._pa = pa

    def write(self, records: list[dict[str, Any]]) -> None:
        self._writer.write_table(self._pa.Table.from_pylist(records, schema=PRIME_SFT_SCHEMA))

    def close(self, summary: ExportSummary) -> list[Path]:
        self._writer.close()
        return [self._path]

    def abort(self) -> None:
        self._writer.close()

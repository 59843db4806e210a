"""Build one rollout's results row from its raw exchange log."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from contagent.derive import derive_row
from contagent.errors import ContagentError
from contagent.layout import RolloutPaths
from contagent.rawlog import read_exchanges, read_result
from contagent.rules import accounting_problems


@dataclass
class RolloutExport:
    """A row (plain dict, ready for orjson) and what else the export needs of it."""

    row: dict[str, Any]
    raw_bytes: int
    exchanges: int
    #: per branch, the union of its steps' tool definitions
    branch_tools: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


def build_row(paths: RolloutPaths, drop_reasoning: bool = False) -> RolloutExport:
    raw = read_exchanges(paths.exchanges)
    result = read_result(paths.result) or {}
    derived = derive_row(raw, result, paths.rollout_id, drop_reasoning)
    own = accounting_problems(derived.row, raw.indices)
    if own:
        raise ContagentError(
            f"{paths.root}: refusing to write an export that loses exchanges: {own[0]}",
            exit_code=3,
        )
    return RolloutExport(
        row=derived.row,
        raw_bytes=raw.size,
        exchanges=len(raw.indices),
        branch_tools=derived.branch_tools,
    )

"""A results row checked field by field against the row derived again from its raw log.

The row's shape is checked when it is read (:func:`contagent.core.rows.read_results`,
from :class:`~contagent.core.rows.ResultRow`'s fields); here every field of the model is
compared with the derivation.
"""

from __future__ import annotations

from typing import Any, get_args, get_origin

from pydantic import BaseModel

from contagent.core.rows import ROW_KEYS, ResultRow
from contagent.export.derive import derive_row
from contagent.rawlog.read import RawRollout


def _lists_of_entries() -> tuple[str, ...]:
    """The row's fields that are lists of typed entries (steps, excluded, repairs)."""
    out = []
    for name, info in ResultRow.model_fields.items():
        args = get_args(info.annotation)
        if get_origin(info.annotation) is list and args and isinstance(args[0], type):
            if issubclass(args[0], BaseModel):
                out.append(name)
    return tuple(out)


_ENTRY_LISTS = _lists_of_entries()


def derived_problems(
    row: dict[str, Any], raw: RawRollout, result: dict[str, Any], rollout_id: str
) -> list[str]:
    """Every field of ``row`` that differs from the row its recorded rollout gives (the raw
    log, result.json and reward.json).

    ``drop_reasoning`` is the export's option and is taken from the row (the caller
    checks it against the export); everything else follows from the recorded rollout.
    """
    expected = derive_row(raw, result, rollout_id, row["drop_reasoning"]).row
    problems: list[str] = []
    for key in ROW_KEYS:
        if key == "raw_log":
            continue  # the caller checks path, checksum and size
        have, want = row.get(key), expected[key]
        if key in _ENTRY_LISTS and isinstance(have, list):
            problems.extend(_list_problems(key, have, want))
        elif have != want:
            problems.append(f"{key} is {_short(have)}, the recorded rollout gives {_short(want)}")
    return problems


def _list_problems(key: str, have: list[Any], want: list[Any]) -> list[str]:
    if len(have) != len(want):
        return [f"{key} has {len(have)} entries, the recorded rollout gives {len(want)}"]
    problems = []
    for pos, (a, b) in enumerate(zip(have, want, strict=True)):
        if a == b:
            continue
        where = f"{key}[{pos}]"
        if isinstance(a, dict):
            index = b.get("exchange_index", pos)
            where = f"{key}[{pos}] (exchange {index})"
            fields = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k) or k not in a)
            problems.append(f"{where}: {', '.join(fields)} differ from the recorded rollout")
        else:
            problems.append(f"{where} differs from the recorded rollout")
    return problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."

"""A results row checked field by field against the row derived again from its raw log."""

from __future__ import annotations

from typing import Any

from contagent.derive import derive_row
from contagent.rawlog import RawRollout
from contagent.rows import ResultRow

#: Keys every results row has (its typed shape, :class:`contagent.rows.ResultRow`).
ROW_KEYS = tuple(ResultRow.model_fields)


def shape_problem(row: Any) -> str | None:
    """Why ``row`` is not a results row a validator can read, or None."""
    if not isinstance(row, dict):
        return f"not a JSON object but {type(row).__name__}"
    missing = [k for k in ROW_KEYS if k not in row]
    if missing:
        return f"missing keys: {', '.join(missing)}"
    extra = sorted(k for k in row if k not in ROW_KEYS)
    if extra:
        return f"unknown keys: {', '.join(extra)}"
    version = row["schema_version"]
    if not isinstance(version, int) or isinstance(version, bool):
        return f"schema_version {version!r} is not an integer"
    ref = row["raw_log"]
    if not (
        isinstance(ref, dict)
        and set(ref) == {"path", "sha256", "bytes"}
        and isinstance(ref.get("path"), str)
        and isinstance(ref.get("sha256"), str)
    ):
        return "raw_log is not {path, sha256, bytes}"
    if not isinstance(row["drop_reasoning"], bool):
        return "drop_reasoning is not a boolean"
    for key in ("steps", "excluded", "tools", "repairs", "not_ready_kinds"):
        value = row[key]
        if not isinstance(value, list) or (
            key in ("steps", "excluded", "repairs") and not all(isinstance(v, dict) for v in value)
        ):
            return f"{key} is not a list of objects"
    for key, shape in (("steps", _STEP), ("excluded", _EXCLUDED)):
        for pos, entry in enumerate(row[key]):
            wrong = _wrong_fields(entry, shape)
            if wrong:
                return f"{key}[{pos}] has wrong or missing fields: {', '.join(wrong)}"
    usage = row["token_usage"]
    if not isinstance(usage, dict) or not all(
        isinstance(usage.get(part), dict) for part in ("billed", "selected", "excluded")
    ):
        return "token_usage is not {billed, selected, excluded}"
    return None


_INT = (int,)
_OPT_INT = (int, type(None))
_OPT_DICT = (dict, type(None))
_OPT_STR = (str, type(None))
_STEP: dict[str, tuple[type, ...]] = {
    "exchange_index": _INT,
    "branch": _INT,
    "extends": _OPT_INT,
    "messages": (list,),
    "response": (dict,),
    "finish_reason": _OPT_STR,
    "consumed": (bool,),
    "truncated": (bool,),
    "usage": _OPT_DICT,
}
_EXCLUDED: dict[str, tuple[type, ...]] = {
    "exchange_index": _INT,
    "reason": (str,),
    "duplicate_of": _OPT_INT,
    "detail": _OPT_STR,
    "usage": _OPT_DICT,
}


def _wrong_fields(entry: dict[str, Any], shape: dict[str, tuple[type, ...]]) -> list[str]:
    wrong = [k for k in entry if k not in shape]
    for key, types in shape.items():
        value = entry.get(key, ...)
        if (
            value is ...
            or not isinstance(value, types)
            or (isinstance(value, bool) and bool not in types)
        ):
            wrong.append(key)
    return wrong


def derived_problems(
    row: dict[str, Any], raw: RawRollout, result: dict[str, Any], rollout_id: str
) -> list[str]:
    """Every field of ``row`` that differs from the row the raw log and result.json give.

    ``drop_reasoning`` is the export's option and is taken from the row (the caller
    checks it against the export); everything else follows from the raw log.
    """
    expected = derive_row(raw, result, rollout_id, row["drop_reasoning"]).row
    problems: list[str] = []
    for key in ROW_KEYS:
        if key == "raw_log":
            continue  # the caller checks path, checksum and size
        have, want = row[key], expected[key]
        if key in ("steps", "excluded", "repairs") and isinstance(have, list):
            problems.extend(_list_problems(key, have, want))
        elif have != want:
            problems.append(f"{key} is {_short(have)}, the raw log gives {_short(want)}")
    return problems


def _list_problems(key: str, have: list[Any], want: list[Any]) -> list[str]:
    if len(have) != len(want):
        return [f"{key} has {len(have)} entries, the raw log gives {len(want)}"]
    problems = []
    for pos, (a, b) in enumerate(zip(have, want, strict=True)):
        if a == b:
            continue
        where = f"{key}[{pos}]"
        if isinstance(a, dict):
            index = b.get("exchange_index", pos)
            where = f"{key}[{pos}] (exchange {index})"
            fields = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k) or k not in a)
            problems.append(f"{where}: {', '.join(fields)} differ from the raw log")
        else:
            problems.append(f"{where} differs from the raw log")
    return problems


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."

"""Rollout-level rules: truncation, which rows become training records, and the accounting
every export must pass (fail closed)."""

from __future__ import annotations

from collections import Counter
from typing import Any

_CUT_STOPS = frozenset({"max_iterations", "timeout"})


def rollout_truncation(
    result: dict[str, Any], cut_last_step: int | None, cut_final: int | None = None
) -> tuple[bool, str | None]:
    """Truncation: the iteration limit, a timeout, a cut last step, or a final generation that
    was cut with nothing after it (even though that exchange itself is excluded)."""
    stop = result.get("stop_condition")
    if stop in _CUT_STOPS or result.get("status") == "timeout":
        return True, f"rollout stopped by {stop or 'timeout'}"
    if cut_last_step is not None:
        return True, f"last step {cut_last_step} was cut"
    if cut_final is not None:
        return True, f"final generation {cut_final} was cut"
    return False, None


def final_cut(statuses: dict[int, str]) -> int | None:
    """The last exchange that produced a generation, when that generation was cut."""
    generations = [i for i, s in statuses.items() if s in ("completed", "incomplete")]
    last = max(generations, default=None)
    return last if last is not None and statuses[last] == "incomplete" else None


def selected_for_training(row: dict[str, Any], rollout_filter: str) -> bool:
    """The one rule for which rows become training records (Parquet): training-ready, and
    passed unless ``rollout_filter`` (``--filter``) is ``all``. Exporter and validator both
    call it."""
    if row.get("training_ready") is not True:
        return False
    return rollout_filter == "all" or row.get("passed") is True


def accounting_problems(row: dict[str, Any], raw_indices: list[int]) -> list[str]:
    """Fail closed: every raw exchange index appears exactly once, in steps or in excluded."""
    seen = Counter(s["exchange_index"] for s in row["steps"])
    seen.update(e["exchange_index"] for e in row["excluded"])
    problems = [f"exchange {i} appears {n} times" for i, n in sorted(seen.items()) if n > 1]
    raw = set(raw_indices)
    missing = sorted(raw - seen.keys())
    extra = sorted(seen.keys() - raw)
    if missing:
        problems.append(f"exchanges missing from the row: {missing[:10]}")
    if extra:
        problems.append(f"row names exchanges the raw log lacks: {extra[:10]}")
    return problems

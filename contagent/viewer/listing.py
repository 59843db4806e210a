"""The rollout list (filter, sort, one page at a time), from entries.

Everything is computed on the server from the small :class:`Entry` records, so
a page ships at most ``per`` rows whatever the number of rollouts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from contagent.viewer.source import Entry

PER_PAGE = 50
MAX_PER_PAGE = 500
MAX_OPTIONS = 200  # a select filter offers at most this many values


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    kind: Literal["text", "cat", "multi", "num"]


COLUMNS = (
    Column("rollout_id", "rollout", "text"),
    Column("experiment", "experiment", "cat"),
    Column("model", "model", "cat"),
    Column("status", "status", "cat"),
    Column("passed", "passed", "cat"),
    Column("reward", "reward", "num"),
    Column("training_ready", "training-ready", "cat"),
    Column("kinds", "not-ready kinds", "multi"),
    Column("turns", "turns", "num"),
    Column("tokens", "tokens", "num"),
    Column("excluded", "excluded", "num"),
    Column("wall", "wall s", "num"),
)
BY_KEY = {c.key: c for c in COLUMNS}


def shown(value: Any) -> str:
    """How a cell value is written in the list and in filter choices."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ", ".join(value) if value else "-"
    return str(value)


@dataclass
class Query:
    sort: str = "rollout_id"
    desc: bool = False
    page: int = 1
    per: int = PER_PAGE
    equals: dict[str, str] = field(default_factory=dict)  # cat/multi/text column -> value
    low: dict[str, float] = field(default_factory=dict)
    high: dict[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Query:
        q = cls()
        if params.get("sort") in BY_KEY:
            q.sort = params["sort"]
        q.desc = params.get("order") == "desc"
        q.page = max(1, _int(params.get("page"), 1))
        q.per = min(MAX_PER_PAGE, max(1, _int(params.get("per"), PER_PAGE)))
        for col in COLUMNS:
            if col.kind == "num":
                for prefix, target in (("min.", q.low), ("max.", q.high)):
                    value = _float(params.get(prefix + col.key))
                    if value is not None:
                        target[col.key] = value
            elif params.get("f." + col.key):
                q.equals[col.key] = params["f." + col.key]
        return q

    def params(self, **change: Any) -> dict[str, str]:
        """This query's URL parameters, with ``change`` applied (for links)."""
        out = {"sort": self.sort, "order": "desc" if self.desc else "asc"}
        out |= {"page": str(self.page), "per": str(self.per)}
        out |= {f"f.{k}": v for k, v in self.equals.items()}
        out |= {f"min.{k}": f"{v:g}" for k, v in self.low.items()}
        out |= {f"max.{k}": f"{v:g}" for k, v in self.high.items()}
        out |= {k: str(v) for k, v in change.items()}
        return out


def _int(value: str | None, default: int) -> int:
    try:
        return int(value) if value is not None else default
    except ValueError:
        return default


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


def _matches(entry: Entry, q: Query) -> bool:
    for key, wanted in q.equals.items():
        value = getattr(entry, key)
        if BY_KEY[key].kind == "text":
            if wanted.lower() not in str(value).lower():
                return False
        elif BY_KEY[key].kind == "multi":
            if wanted not in value and not (wanted == "-" and not value):
                return False
        elif shown(value) != wanted:
            return False
    for key, low in q.low.items():
        value = getattr(entry, key)
        if value is None or value < low:
            return False
    for key, high in q.high.items():
        value = getattr(entry, key)
        if value is None or value > high:
            return False
    return True


@dataclass
class Page:
    rows: list[Entry]
    total: int  # after filtering
    pages: int
    query: Query


def select(entries: list[Entry], q: Query) -> Page:
    """Filter, sort (empty values last either way) and cut one page."""
    kept = [e for e in entries if _matches(e, q)]
    present = [e for e in kept if getattr(e, q.sort) is not None]
    absent = [e for e in kept if getattr(e, q.sort) is None]
    present.sort(key=lambda e: (_sort_key(getattr(e, q.sort)), e.rollout_id), reverse=q.desc)
    ordered = present + absent
    pages = max(1, -(-len(ordered) // q.per))
    q.page = min(q.page, pages)
    start = (q.page - 1) * q.per
    return Page(ordered[start : start + q.per], len(ordered), pages, q)


def _sort_key(value: Any) -> Any:
    return ", ".join(value) if isinstance(value, tuple) else value


def options(entries: list[Entry]) -> dict[str, list[str]]:
    """The values each select filter offers, most frequent first."""
    out: dict[str, list[str]] = {}
    for col in COLUMNS:
        if col.kind not in ("cat", "multi"):
            continue
        counts: dict[str, int] = {}
        for entry in entries:
            value = getattr(entry, col.key)
            for item in (value or ("-",)) if col.kind == "multi" else (shown(value),):
                counts[item] = counts.get(item, 0) + 1
        out[col.key] = sorted(counts, key=lambda k: (-counts[k], k))[:MAX_OPTIONS]
    return out

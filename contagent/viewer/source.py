"""Where the viewer's rows come from: an export's ``results.jsonl`` or a run's log dir.

An export folder is indexed once per change of ``results.jsonl``: each line is
parsed into a small :class:`Entry` (what the list and the summary need) and its
byte offset is kept, so a rollout's full row is re-read only when its page is
opened. A log dir's rows are computed in memory with the exporter's own
:func:`~contagent.exporters.rollout.build_row`, again whenever a rollout's files
change, so rollouts appear while a run is going.

Rows are read defensively: a field the viewer does not know is ignored, one it
expects but misses shows as empty. A row with a newer ``schema_version`` is refused.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from contagent.errors import ContagentError
from contagent.layout import RolloutPaths, RunPaths

RESULTS_NAME = "results.jsonl"
SCHEMA_VERSION = 1
RESCAN_S = 1.0  # a log dir is looked at again at most this often


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _total(usage: Any, part: str) -> int:
    counts = usage.get(part) if isinstance(usage, dict) else None
    value = counts.get("total_tokens") if isinstance(counts, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


@dataclass
class Entry:
    """One rollout as the list and the summary show it."""

    rollout_id: str
    experiment: str | None = None
    model: str | None = None
    agent: str | None = None
    status: str | None = None
    passed: bool | None = None
    reward: float | None = None
    training_ready: bool | None = None
    kinds: tuple[str, ...] = ()
    turns: int = 0
    tokens: int = 0
    excluded: int = 0
    wall: float | None = None
    excluded_reasons: dict[str, int] = field(default_factory=dict)
    token_usage: dict[str, int] = field(default_factory=dict)  # part -> total tokens
    error: str | None = None  # the row could not be read or built

    @classmethod
    def of(cls, row: dict[str, Any], fallback_id: str) -> Entry:
        version = row.get("schema_version")
        if isinstance(version, int) and version > SCHEMA_VERSION:
            return cls(fallback_id, error=f"schema_version {version} is newer than this viewer")
        steps = _list(row.get("steps"))
        excluded = _list(row.get("excluded"))
        reasons: dict[str, int] = {}
        for exc in excluded:
            reason = str(exc.get("reason")) if isinstance(exc, dict) else "?"
            reasons[reason] = reasons.get(reason, 0) + 1
        usage = row.get("token_usage")
        kinds = row.get("not_ready_kinds")
        text = {k: row.get(k) if isinstance(row.get(k), str) else None for k in _TEXT_FIELDS}
        rid = row.get("rollout_id")
        return cls(
            rollout_id=rid if isinstance(rid, str) and rid else fallback_id,
            **text,
            passed=row.get("passed") if isinstance(row.get("passed"), bool) else None,
            reward=_num(row.get("reward")),
            training_ready=(
                row.get("training_ready") if isinstance(row.get("training_ready"), bool) else None
            ),
            kinds=tuple(str(k) for k in kinds) if isinstance(kinds, list) else (),
            turns=len(steps),
            tokens=_total(usage, "billed"),
            excluded=len(excluded),
            wall=_num(row.get("duration_s")),
            excluded_reasons=reasons,
            token_usage={p: _total(usage, p) for p in ("billed", "selected", "excluded")},
        )


_TEXT_FIELDS = ("experiment", "model", "agent", "status")


class Source:
    """The rollouts under one PATH; :meth:`refresh` picks up changes."""

    kind: str  # "export" or "run"

    def __init__(self, root: Path) -> None:
        self.root = root
        self.entries: list[Entry] = []
        self.by_id: dict[str, int] = {}
        self.generation = 0  # bumped whenever the entries change

    def refresh(self) -> None:
        raise NotImplementedError

    def row(self, rollout_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def run_file(self, rollout_id: str, kind: str) -> Path | None:
        """The run's ``.log``/``.result``/``.err`` of a rollout, when PATH is a log dir."""
        return None

    def _set(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.by_id = {}
        for pos, entry in enumerate(entries):
            self.by_id.setdefault(entry.rollout_id, pos)
        self.generation += 1


class ExportSource(Source):
    kind = "export"

    def __init__(self, results: Path) -> None:
        super().__init__(results.parent)
        self.results = results
        self._stamp: tuple[int, int, int] | None = None
        self._spans: list[tuple[int, int]] = []

    def refresh(self) -> None:
        try:
            st = self.results.stat()
        except OSError as exc:
            raise ContagentError(f"{self.results}: cannot read ({exc.strerror})") from None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        data = self.results.read_bytes()
        entries: list[Entry] = []
        spans: list[tuple[int, int]] = []
        start = 0
        while start < len(data):
            end = data.find(b"\n", start)
            end = len(data) if end == -1 else end
            if data[start:end].strip():
                entries.append(_entry(data[start:end], f"line-{len(spans) + 1}"))
                spans.append((start, end))
            start = end + 1
        self._spans, self._stamp = spans, stamp
        self._set(entries)

    def row(self, rollout_id: str) -> dict[str, Any] | None:
        pos = self.by_id.get(rollout_id)
        if pos is None:
            return None
        start, end = self._spans[pos]
        with self.results.open("rb") as f:
            f.seek(start)
            row = _parse(f.read(end - start))
        return row if isinstance(row, dict) else None


def _parse(line: bytes) -> Any:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def _entry(line: bytes, fallback_id: str) -> Entry:
    row = _parse(line)
    if not isinstance(row, dict):
        return Entry(fallback_id, error="not a JSON object")
    return Entry.of(row, fallback_id)


class RunSource(Source):
    """A run's ``--log-dir`` (rollouts under ``rollouts/``) or a proxy's record dir."""

    kind = "run"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.run = RunPaths(root)
        self.rollouts_dir = self.run.rollouts_dir if self.run.rollouts_dir.is_dir() else root
        self._rows: dict[str, tuple[Any, dict[str, Any] | None, Entry]] = {}
        self._checked = 0.0

    def refresh(self) -> None:
        now = time.monotonic()
        if self._rows and now - self._checked < RESCAN_S:
            return
        self._checked = now
        seen: dict[str, tuple[Any, dict[str, Any] | None, Entry]] = {}
        changed = False
        for log in sorted(self.rollouts_dir.glob("*/exchanges.jsonl")):
            paths = RolloutPaths(log.parent)
            stamp = (_stamp(paths.exchanges), _stamp(paths.result))
            old = self._rows.get(paths.rollout_id)
            if old is not None and old[0] == stamp:
                seen[paths.rollout_id] = old
                continue
            changed = True
            seen[paths.rollout_id] = (stamp, *_build(paths))
        if changed or seen.keys() != self._rows.keys():
            self._rows = seen
            self._set([entry for _, _, entry in seen.values()])

    def row(self, rollout_id: str) -> dict[str, Any] | None:
        for _, row, entry in self._rows.values():
            if entry.rollout_id == rollout_id:
                return row
        return None

    def run_file(self, rollout_id: str, kind: str) -> Path | None:
        if self.rollouts_dir != self.run.rollouts_dir:
            return None
        try:
            path = {"log": self.run.log, "result": self.run.result_text, "err": self.run.err}[kind](
                rollout_id
            )
        except (KeyError, ContagentError):
            return None
        return path if path.is_file() else None


def _stamp(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _build(paths: RolloutPaths) -> tuple[dict[str, Any] | None, Entry]:
    # The exporter's own row builder, so the viewer shows what an export would write.
    from contagent.exporters.rollout import build_row

    try:
        row = build_row(paths).row
    except ContagentError as exc:
        return None, Entry(paths.rollout_id, error=str(exc))
    return row, Entry.of(row, paths.rollout_id)


def open_source(path: Path) -> Source:
    """The source PATH names: an export folder (or its results.jsonl) or a log dir."""
    path = Path(path)
    if not path.exists():
        raise ContagentError(f"{path}: no such file or directory")
    if path.is_file():
        if path.name != RESULTS_NAME:
            raise ContagentError(f"{path}: not a {RESULTS_NAME}, an export folder or a log dir")
        source: Source = ExportSource(path.resolve())
    elif (path / RESULTS_NAME).is_file():
        source = ExportSource((path / RESULTS_NAME).resolve())
    else:
        source = RunSource(path.resolve())
    source.refresh()
    return source

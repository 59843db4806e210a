"""Where the viewer's rows come from: an export's ``results.jsonl`` or a run's log dir.

An export folder is indexed once per change of ``results.jsonl`` with the one
results reader (:func:`contagent.core.rows.parse_results`): each row becomes a small
:class:`Entry` (what the list needs), the rows' totals are summed with
:func:`contagent.core.rows.summarize`, and each line's byte span is kept, so a
rollout's full row is re-read only when its page is opened. A log dir's rows are
computed in memory with :func:`contagent.export.derive.build_row`, the exporter's own
builder, again whenever a rollout's files change, so rollouts appear while a run
is going. A line the reader refuses (a newer ``schema_version`` among them) is
listed with its reason.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from contagent.core.rows import RowSummary, parse_line, parse_results
from contagent.errors import ContagentError
from contagent.export.derive import build_row
from contagent.layout import RAW_LOG_NAMES, ExportPaths, RolloutPaths, RunPaths
from contagent.rawlog.read import MAX_RAW_LOG_BYTES

RESULTS_NAME = ExportPaths.RESULTS_NAME
RESCAN_S = 1.0  # a log dir is looked at again at most this often


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


@dataclass
class Entry:
    """One rollout as the list shows it."""

    rollout_id: str
    experiment: str | None = None
    model: str | None = None
    status: str | None = None
    passed: bool | None = None
    reward: float | None = None
    training_ready: bool | None = None
    kinds: tuple[str, ...] = ()
    turns: int = 0
    tokens: int = 0
    excluded: int = 0
    wall: float | None = None
    error: str | None = None  # the row could not be read or built

    @classmethod
    def of(cls, row: dict[str, Any], fallback_id: str) -> Entry:
        """The entry of a checked results row."""
        return cls(
            rollout_id=row["rollout_id"] or fallback_id,
            experiment=row["experiment"],
            model=row["model"],
            status=row["status"],
            passed=row["passed"],
            reward=_float(row["reward"]),
            training_ready=row["training_ready"],
            kinds=tuple(row["not_ready_kinds"]),
            turns=len(row["steps"]),
            tokens=row["token_usage"]["billed"].get("total_tokens", 0),
            excluded=len(row["excluded"]),
            wall=_float(row["duration_s"]),
        )


class Source:
    """The rollouts under one PATH; :meth:`refresh` picks up changes."""

    kind: str  # "export" or "run"

    def __init__(self, root: Path, max_raw_log: int = MAX_RAW_LOG_BYTES) -> None:
        self.root = root
        #: raw logs holding more plain bytes than this are not read
        self.max_raw_log = max_raw_log
        self.entries: list[Entry] = []
        self.by_id: dict[str, int] = {}
        self.summary = RowSummary()
        self.unreadable = 0  # entries whose row could not be read or built
        self.generation = 0  # bumped whenever the entries change

    def refresh(self) -> None:
        raise NotImplementedError

    def row(self, rollout_id: str) -> dict[str, Any] | None:
        raise NotImplementedError

    def run_file(self, rollout_id: str, kind: str) -> Path | None:
        """The run's ``.log``/``.result``/``.err`` of a rollout, when PATH is a log dir."""
        return None

    def _set(self, entries: list[Entry], summary: RowSummary) -> None:
        self.entries = entries
        self.summary = summary
        self.unreadable = sum(e.error is not None for e in entries)
        self.by_id = {}
        for pos, entry in enumerate(entries):
            self.by_id.setdefault(entry.rollout_id, pos)
        self.generation += 1


class ExportSource(Source):
    kind = "export"

    def __init__(self, results: Path, max_raw_log: int = MAX_RAW_LOG_BYTES) -> None:
        super().__init__(results.parent, max_raw_log)
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
        summary = RowSummary()
        for line in parse_results(data):
            fallback = f"line-{len(spans) + 1}"
            if line.row is None:
                entries.append(Entry(line.rollout_id or fallback, error=line.problem))
            else:
                entries.append(Entry.of(line.row, fallback))
                summary.add(line.row, len(line.row["steps"]))
            spans.append(line.span)
        self._spans, self._stamp = spans, stamp
        self._set(entries, summary)

    def row(self, rollout_id: str) -> dict[str, Any] | None:
        pos = self.by_id.get(rollout_id)
        if pos is None:
            return None
        start, end = self._spans[pos]
        with self.results.open("rb") as f:
            f.seek(start)
            return parse_line(f.read(end - start)).row


class RunSource(Source):
    """A run's ``--log-dir`` (rollouts under ``rollouts/``) or a proxy's record dir."""

    kind = "run"

    def __init__(self, root: Path, max_raw_log: int = MAX_RAW_LOG_BYTES) -> None:
        super().__init__(root, max_raw_log)
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
        for folder in sorted({log.parent for log in self._logs()}):
            paths = RolloutPaths(folder)
            stamp = (_stamp(paths.raw_log), _stamp(paths.result))
            old = self._rows.get(paths.rollout_id)
            if old is not None and old[0] == stamp:
                seen[paths.rollout_id] = old
                continue
            changed = True
            seen[paths.rollout_id] = (stamp, *_build(paths, self.max_raw_log))
        if changed or seen.keys() != self._rows.keys():
            self._rows = seen
            self._set([entry for _, _, entry in seen.values()], _summary(seen.values()))

    def _logs(self) -> list[Path]:
        """Every rollout's raw log, recorded or compacted (a rollout compacted meanwhile
        shows up under its new name)."""
        return [log for name in RAW_LOG_NAMES for log in self.rollouts_dir.glob(f"*/{name}")]

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


def _summary(rows: Iterable[tuple[Any, dict[str, Any] | None, Entry]]) -> RowSummary:
    summary = RowSummary()
    for _, row, _ in rows:
        if row is not None:
            summary.add(row, len(row["steps"]))
    return summary


def _build(paths: RolloutPaths, max_raw_log: int) -> tuple[dict[str, Any] | None, Entry]:
    try:
        row = build_row(paths, max_raw_log=max_raw_log).row
    except ContagentError as exc:
        return None, Entry(paths.rollout_id, error=str(exc))
    return row, Entry.of(row, paths.rollout_id)


def open_source(path: Path, max_raw_log: int = MAX_RAW_LOG_BYTES) -> Source:
    """The source PATH names: an export folder (or its results.jsonl) or a log dir."""
    path = Path(path)
    if not path.exists():
        raise ContagentError(f"{path}: no such file or directory")
    if path.is_file():
        if path.name != RESULTS_NAME:
            raise ContagentError(f"{path}: not a {RESULTS_NAME}, an export folder or a log dir")
        source: Source = ExportSource(path.resolve(), max_raw_log)
    elif (path / RESULTS_NAME).is_file():
        source = ExportSource((path / RESULTS_NAME).resolve(), max_raw_log)
    else:
        source = RunSource(path.resolve(), max_raw_log)
    source.refresh()
    return source

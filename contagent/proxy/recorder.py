"""Append-only writer of the raw exchange log, one file per rollout.

Every record is one ``os.write`` of one complete line on a file opened with
``O_APPEND``, made from the event-loop thread, so lines from concurrent
requests can never interleave and a killed process leaves whole lines only.
Index assignment and the request record happen in the same synchronous step,
so indices follow arrival order and the file never shows index ``n+1``
before ``n``.

Each log is held under an exclusive ``flock`` while its file is open, so a second
process recording the same rollout (it would assign the same indices) is refused
loudly instead of interleaving with this one; a log closed to bound open files is
checked on reopening to be as this proxy left it. ``contagent compact`` takes the
same lock, so it never compacts a log being recorded; a rollout whose log was
compacted is finished, and recording more of it is refused.

Records are built by :func:`contagent.rawlog.records.request_record` and
:func:`contagent.rawlog.records.outcome_record` (plain dicts: the hot path skips pydantic).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections import OrderedDict
from pathlib import Path
from typing import Any

import orjson

from contagent.errors import ContagentError
from contagent.layout import RolloutPaths

log = logging.getLogger(__name__)

_OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)


class RecordError(ContagentError):
    """The log could not be written; the exchange must not go upstream unrecorded."""


def verbatim(raw: bytes, parsed: Any) -> Any:
    """``parsed`` for a record, as the exact bytes it was parsed from when they fit on a line.

    Saves serialising the body again (~12 µs per 32 KB of chat history) and keeps the
    wire bytes. Only for bytes ``orjson`` parsed, so readers get ``parsed`` back; a raw
    CR or LF can only be whitespace between JSON tokens, but would split the line.
    """
    if parsed is None or b"\n" in raw or b"\r" in raw:
        return parsed
    return orjson.Fragment(raw)


def dump_line(record: dict[str, Any]) -> bytes:
    """One JSONL line. Non-JSON values (never expected) are stringified, not fatal."""
    return orjson.dumps(record, default=str, option=orjson.OPT_APPEND_NEWLINE)


def scan_log(path: Path) -> tuple[int, bool]:
    """Next free index of an existing log and whether its last line is torn.

    The next index is one past the highest request index found (a dense log
    has ``count == max + 1``; the larger is taken so an index is never reused).
    Reads line by line: a restart on a long rollout's log costs its largest
    line in memory, not the whole file.
    """
    next_index = 0
    count = 0
    line = b"\n"
    try:
        with path.open("rb") as fh:
            for line in fh:
                if b'"request"' not in line:  # outcome lines are most of the bytes
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and rec.get("type") == "request":
                    count += 1
                    idx = rec.get("index")
                    if isinstance(idx, int) and idx + 1 > next_index:
                        next_index = idx + 1
    except FileNotFoundError:
        return 0, False
    except OSError as exc:
        raise RecordError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return max(next_index, count), not line.endswith(b"\n")


class Recorder:
    """Per-rollout append-only logs under ``record_dir`` with dense indices.

    ``max_open_files`` bounds the file descriptors held at once; a closed log
    is reopened in append mode on its next record, locked again, and refused
    if it changed size meanwhile (another process wrote to it).
    """

    def __init__(self, record_dir: Path, *, max_open_files: int = 256) -> None:
        self.record_dir = Path(record_dir)
        self._max_open = max(1, max_open_files)
        self._next: dict[str, int] = {}
        self._paths: dict[str, Path] = {}
        self._fds: OrderedDict[str, int] = OrderedDict()
        self._closed_sizes: dict[str, int] = {}
        self._partial: set[str] = set()

    @property
    def known(self) -> dict[str, Path]:
        """Rollout ids already vetted, with their log paths."""
        return self._paths

    def _path(self, rollout_id: str) -> Path:
        path = self._paths.get(rollout_id)
        if path is None:
            path = RolloutPaths.for_rollout(self.record_dir, rollout_id).exchanges
            self._paths[rollout_id] = path
        return path

    def _fd(self, rollout_id: str) -> int:
        fd = self._fds.get(rollout_id)
        if fd is not None:
            self._fds.move_to_end(rollout_id)
            return fd
        path = self._path(rollout_id)
        _refuse_compacted(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, _OPEN_FLAGS, 0o644)
        except OSError as exc:
            raise RecordError(f"cannot open {path}: {exc.strerror or exc}") from exc
        try:
            _lock(fd, path)
            _refuse_compacted(path, fd)
            left = self._closed_sizes.get(rollout_id)
            if left is not None and os.fstat(fd).st_size != left:
                raise RecordError(
                    f"{path} changed while this proxy had it closed: another process "
                    "wrote to it, so its indices can no longer be trusted"
                )
        except BaseException:
            os.close(fd)
            raise
        self._closed_sizes.pop(rollout_id, None)
        self._fds[rollout_id] = fd
        while len(self._fds) > self._max_open:
            self._close_one(*self._fds.popitem(last=False))
        return fd

    def _close_one(self, rollout_id: str, fd: int) -> None:
        try:
            self._closed_sizes[rollout_id] = os.fstat(fd).st_size
        finally:
            os.close(fd)  # releases the lock

    def _first_use(self, rollout_id: str) -> int:
        path = self._path(rollout_id)
        self._fd(rollout_id)  # locked before the scan, so nobody appends behind it
        next_index, torn = scan_log(path)
        if torn:
            log.warning("%s: last line is torn (a crash mid-write); starting a new line", path)
            self._write(rollout_id, b"\n")
        if next_index:
            log.info("%s: continuing at index %d", path, next_index)
        return next_index

    def next_index(self, rollout_id: str) -> int:
        """Reserve the next index of ``rollout_id`` (raises ContagentError for unsafe ids)."""
        idx = self._next.get(rollout_id)
        if idx is None:
            idx = self._first_use(rollout_id)
        self._next[rollout_id] = idx + 1
        return idx

    def release(self, rollout_id: str, index: int) -> None:
        """Give back ``index`` when its request record could not be written (no gap is left)."""
        if self._next.get(rollout_id) == index + 1:
            self._next[rollout_id] = index

    def _write(self, rollout_id: str, line: bytes) -> None:
        fd = self._fd(rollout_id)
        if rollout_id in self._partial:
            line = b"\n" + line  # fence off what a failed write left, or this line joins it
        done = 0
        try:
            done = os.write(fd, line)
            while done < len(line):  # a short write: the rest goes after it
                done += os.write(fd, memoryview(line)[done:])
        except OSError as exc:
            if done:  # part of the line is on disk (a full disk, say)
                self._partial.add(rollout_id)
            raise RecordError(
                f"cannot append to {self._path(rollout_id)}: {exc.strerror or exc}"
            ) from exc
        if self._partial:
            self._partial.discard(rollout_id)

    def append(self, rollout_id: str, record: dict[str, Any]) -> None:
        """Append one record as one line."""
        self._write(rollout_id, dump_line(record))

    def close(self) -> None:
        while self._fds:
            _, fd = self._fds.popitem()
            os.close(fd)


def _refuse_compacted(path: Path, fd: int | None = None) -> None:
    """Refuse a rollout whose log was compacted (checked again once locked: a compaction
    may have ended in between, leaving ``fd`` on the removed log or a new empty one)."""
    compacted = RolloutPaths(path.parent).compacted
    if fd is not None:
        st = os.fstat(fd)
        if st.st_nlink and not compacted.exists():
            return
        if st.st_nlink and st.st_size == 0:
            path.unlink(missing_ok=True)  # created just now by this open, beside the compacted log
    elif not compacted.exists():
        return
    raise RecordError(
        f"{compacted}: this rollout is finished and its log compacted; record under a new "
        "rollout id"
    )


def _lock(fd: int, path: Path) -> None:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RecordError(
            f"{path} is being recorded by another process: one proxy per rollout log"
        ) from None
    except OSError as exc:
        # A file system without locks (some network or FUSE mounts) must not stop the
        # recording: the lock only guards against a second proxy, which the exporter
        # would still report as duplicate indices.
        log.warning("%s: cannot lock (%s); recording without the lock", path, exc.strerror or exc)

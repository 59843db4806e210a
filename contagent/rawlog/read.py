"""Read one rollout's raw exchange log into memory, checking its integrity.

Reading never trusts the file: a record that is not a JSON object, of an
unknown type or of a newer ``schema_version`` raises :class:`ContagentError`
naming the file and line. What a crash or a bug can leave behind (a torn line,
whether the proxy fenced it off on restart or it is the last line, an index
gap, a request without outcome, a duplicated index) is not an error here: it is
returned as ``problems`` so that the exporter keeps the rollout out of training
data *with the reason on its row*.

A log is read in either form, ``exchanges.jsonl`` or the compacted
``exchanges.jsonl.zst``; what is parsed, hashed and counted is always the
record stream (the plain bytes). Reading stops at ``max_bytes`` of them, so a
log past the limit, a corrupt frame or a decompression bomb is one error
naming the file, never an unbounded read.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import zstandard

from contagent import messages_api, responses
from contagent.chat import cached_tokens, usage_counts
from contagent.errors import ContagentError
from contagent.rawlog.records import OUTCOMES, SCHEMA_VERSION
from contagent.rawlog.resent import ResentHistory
from contagent.versions import check_version

#: The default raw-log size limit, in plain (decompressed) bytes, for every reader.
MAX_RAW_LOG_BYTES = 1 << 30
#: How a raw log is compacted: zstd level 3, long-distance matching over a 2^27-byte
#: window (``zstd -d --long=27`` reads it). Readers refuse frames that need a larger
#: window, which bounds their memory.
ZSTD_LEVEL = 3
ZSTD_WINDOW_LOG = 27
_REQUIRED_REQUEST: tuple[str, ...] = ("index", "method", "path")
_REQUIRED_OUTCOME: tuple[str, ...] = ("index", "outcome")


@dataclass
class RawRollout:
    """The parsed records of one ``exchanges.jsonl``; records are plain dicts (hot path)."""

    path: Path
    size: int
    requests: dict[int, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: (kind, text) of each integrity problem; kinds: duplicate_record, index_gap,
    #: no_outcome, no_request, torn_line, the Responses mapping's responses_chain, and
    #: both mappings' unsupported_item
    problems: list[tuple[str, str]] = field(default_factory=list)
    digest: _Sha256 | None = field(default=None, repr=False, compare=False)

    @property
    def sha256(self) -> str:
        """The SHA-256 of the record stream (waits for the hashing thread, if still at work)."""
        assert self.digest is not None
        return self.digest.hexdigest()

    def usage(self, index: int) -> dict[str, int] | None:
        """Normalised usage of exchange ``index`` (from the outcome or its response), if any."""
        return usage_counts(self._raw_usage(index))

    def cached_tokens(self, index: int) -> int | None:
        """Cached prompt tokens of exchange ``index``, when its usage says how many."""
        return cached_tokens(self._raw_usage(index)) if self.usage(index) is not None else None

    def _raw_usage(self, index: int) -> Any:
        out = self.outcomes.get(index)
        if out is None:
            return None
        usage = out.get("usage")
        if usage is None and isinstance(out.get("response"), dict):
            usage = out["response"].get("usage")
        return usage

    @property
    def indices(self) -> list[int]:
        """Every index that has a request or an outcome record, ascending."""
        return sorted(self.requests.keys() | self.outcomes.keys())


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_BLANK = frozenset(b" \t\r")


def _torn(line: memoryview) -> bool:
    """A record cut short mid-write: the start of a JSON object that never ends.

    The proxy fences such a line off with a newline when it restarts; a line that
    does end its object is corruption, not a torn write, and stays an error.
    """
    data = bytes(line).rstrip()
    return data.startswith(b"{") and not data.endswith(b"}")


def _lines(data: bytes | bytearray) -> Iterator[tuple[int, int]]:
    """The start and end offsets of each newline-terminated line: no copy of a large log."""
    start = 0
    while (end := data.find(b"\n", start)) != -1:
        yield start, end
        start = end + 1


def parse_exchanges(path: Path, data: bytes | bytearray) -> RawRollout:
    """Parse the bytes of an exchanges.jsonl file (pure, apart from naming ``path`` in errors)."""
    digest = _Sha256(data)
    try:
        raw = _parse(path, data)
    except BaseException:
        digest.hexdigest()  # no thread outlives a failed read
        raise
    raw.digest = digest
    return raw


class _Sha256:
    """The SHA-256 of a log, computed on another thread while the main one parses it and
    derives its row: hashlib releases the GIL while it hashes, so a second core hides
    its cost."""

    _THREAD_FROM = 1 << 20

    def __init__(self, data: bytes | bytearray) -> None:
        self._data: bytes | bytearray | None = data
        self._digest: str | None = None
        self._thread: threading.Thread | None = None
        if len(data) >= self._THREAD_FROM:
            self._thread = threading.Thread(target=self._run, name="contagent-sha256", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        assert self._data is not None
        self._digest = hashlib.sha256(self._data).hexdigest()

    def hexdigest(self) -> str:
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        if self._digest is None:  # a small log, or a thread that could not finish
            assert self._data is not None
            self._digest = hashlib.sha256(self._data).hexdigest()
        self._data = None
        return self._digest


def _parse(path: Path, data: bytes | bytearray) -> RawRollout:
    raw = RawRollout(path=path, size=len(data))
    reader = ResentHistory(data if data.endswith(b"\n") or not data else data + b"\n")
    for lineno, (start, end) in enumerate(_lines(reader.data), start=1):
        line = reader.view[start:end]
        if not line or (line[0] in _BLANK and not bytes(line).strip()):
            continue
        try:
            rec = reader.loads(start, end)
        except orjson.JSONDecodeError as exc:
            if not _torn(line):
                raise ContagentError(f"{path}:{lineno}: malformed JSON ({exc})") from None
            raw.problems.append(("torn_line", f"line {lineno} is torn (a write cut short)"))
            continue
        if not isinstance(rec, dict):
            raise ContagentError(f"{path}:{lineno}: record is not a JSON object")
        check_version(rec.get("schema_version", 1), SCHEMA_VERSION, f"{path}:{lineno}")
        kind = rec.get("type")
        if kind == "request":
            required, table = _REQUIRED_REQUEST, raw.requests
        elif kind == "outcome":
            required, table = _REQUIRED_OUTCOME, raw.outcomes
            if rec.get("outcome") not in OUTCOMES:
                raise ContagentError(f"{path}:{lineno}: unknown outcome {rec.get('outcome')!r}")
        else:
            raise ContagentError(f"{path}:{lineno}: unknown record type {kind!r}")
        missing = [name for name in required if name not in rec]
        if missing:
            raise ContagentError(f"{path}:{lineno}: {kind} record lacks {', '.join(missing)}")
        index = rec["index"]
        if not _is_index(index):
            raise ContagentError(f"{path}:{lineno}: index {index!r} is not a non-negative integer")
        if index in table:
            raw.problems.append(("duplicate_record", f"duplicate {kind} record for index {index}"))
            continue
        table[index] = rec
    # Responses- and Messages-API exchanges are read in chat shape, so every chat rule applies.
    raw.problems.extend(responses.normalise_exchanges(raw.requests, raw.outcomes))
    raw.problems.extend(messages_api.normalise_exchanges(raw.requests, raw.outcomes))
    _check_integrity(raw)
    return raw


def _check_integrity(raw: RawRollout) -> None:
    indices = raw.indices
    if indices:
        expected = set(range(indices[-1] + 1))
        gaps = sorted(expected - set(indices))
        if gaps:
            raw.problems.append(("index_gap", f"index gap: no record for {_ranges(gaps)}"))
    no_outcome = sorted(raw.requests.keys() - raw.outcomes.keys())
    if no_outcome:
        raw.problems.append(("no_outcome", f"request without outcome: {_ranges(no_outcome)}"))
    no_request = sorted(raw.outcomes.keys() - raw.requests.keys())
    if no_request:
        raw.problems.append(("no_request", f"outcome without request: {_ranges(no_request)}"))


def _ranges(values: list[int]) -> str:
    """``[1, 2, 3, 7]`` -> ``"1-3, 7"``."""
    runs: list[list[int]] = []
    for v in values:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def read_exchanges(path: Path, max_bytes: int = MAX_RAW_LOG_BYTES) -> RawRollout:
    """Read and parse the raw log ``path`` (either form); raise :class:`ContagentError`
    when it cannot be read, is corrupt or holds more than ``max_bytes`` plain bytes."""
    return parse_exchanges(Path(path), read_log_bytes(Path(path), max_bytes))


def zstd_decompressor() -> zstandard.ZstdDecompressor:
    return zstandard.ZstdDecompressor(max_window_size=1 << ZSTD_WINDOW_LOG)


def read_log_bytes(path: Path, max_bytes: int = MAX_RAW_LOG_BYTES) -> bytes | bytearray:
    """The record stream of the raw log ``path``: its bytes, decompressed if it is ``.zst``."""
    compacted = path.suffix == ".zst"
    # a compressed log may be a little larger than its content (incompressible bytes)
    bound = max_bytes + (max_bytes >> 7) + 65_536 if compacted else max_bytes
    try:
        with path.open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > bound:
                raise _too_large(path, max_bytes)
            # Asking for what the file holds, not the limit, saves allocating (and
            # faulting in) a limit-sized buffer; a log still growing is read on, to
            # the limit at most.
            data = fh.read(size + 1)
            if len(data) > size:
                data += fh.read(bound + 1 - len(data))
    except FileNotFoundError:
        raise ContagentError(f"{path}: raw exchange log not found") from None
    except OSError as exc:
        raise ContagentError(f"{path}: cannot read ({exc.strerror})") from None
    if len(data) > bound:
        raise _too_large(path, max_bytes)
    return _inflate(memoryview(data), path, max_bytes) if compacted else data


def _too_large(path: Path, max_bytes: int) -> ContagentError:
    return ContagentError(
        f"{path}: raw log holds more than {max_bytes} bytes, the raw-log limit (--max-raw-log)"
    )


def _inflate(data: memoryview, path: Path, max_bytes: int) -> bytes | bytearray:
    """Decompress every frame of ``data``, never producing more than ``max_bytes``.

    A frame that declares its size (contagent's and the ``zstd`` tool's do) is
    decompressed in one call into a buffer of that size, which zstd refuses to
    overrun; one that does not is read piecewise up to the limit.
    """
    dctx = zstd_decompressor()
    try:
        frames = list(_frames(data))
    except (ValueError, zstandard.ZstdError) as exc:
        raise ContagentError(f"{path}: corrupt zstd frame ({exc})") from None
    declared = sum(max(size, 0) for _, size in frames)
    if declared > max_bytes:
        raise _too_large(path, max_bytes)
    parts: list[bytes] = []
    total = 0
    try:
        for frame, size in frames:
            if size >= 0:
                part = dctx.decompress(frame)
            else:
                part = _read_bounded(dctx.stream_reader(frame), max_bytes - total, path)
            total += len(part)
            parts.append(part)
    except zstandard.ZstdError as exc:
        raise ContagentError(f"{path}: corrupt zstd frame ({exc})") from None
    if total > max_bytes:
        raise _too_large(path, max_bytes)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _read_bounded(reader: Any, budget: int, path: Path) -> bytes:
    chunks, got = [], 0
    while chunk := reader.read(1 << 20):
        got += len(chunk)
        if got > budget:
            raise _too_large(path, got)
        chunks.append(chunk)
    return b"".join(chunks)


_ZSTD_MAGIC = 0xFD2FB528
_SKIPPABLE = 0x184D2A50  # the 16 magic numbers of skippable frames share these bits


def _frames(data: memoryview) -> Iterator[tuple[memoryview, int]]:
    """Each zstd frame of ``data`` with its declared content size (-1: not declared).

    Walks the frame and block headers only (the package exposes no frame-size
    function); a file that ends inside a frame or holds anything but frames raises.
    """
    pos = 0
    if not data:
        raise ValueError("the file is empty")
    while pos < len(data):
        magic = int.from_bytes(data[pos : pos + 4], "little")
        if magic & 0xFFFFFFF0 == _SKIPPABLE:
            pos += 8 + int.from_bytes(data[pos + 4 : pos + 8], "little")
            continue
        if magic != _ZSTD_MAGIC:
            raise ValueError(f"no zstd frame at byte {pos}")
        params = zstandard.get_frame_parameters(data[pos : pos + 18])
        end = pos + zstandard.frame_header_size(data[pos : pos + 18])
        last = False
        while not last:
            if end + 3 > len(data):
                raise ValueError("the file ends inside a frame")
            head = int.from_bytes(data[end : end + 3], "little")
            last, kind, size = bool(head & 1), (head >> 1) & 3, head >> 3
            end += 3 + (1 if kind == 1 else size)
        end += 4 if params.has_checksum else 0
        if end > len(data):
            raise ValueError("the file ends inside a frame")
        size = params.content_size
        yield data[pos:end], (-1 if size == zstandard.CONTENTSIZE_UNKNOWN else size)
        pos = end

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
record stream (the plain bytes), read and parsed a chunk at a time
(:mod:`.stream`). Reading stops at ``max_bytes`` of them, so a log
past the limit, a corrupt frame or a decompression bomb is one error naming the
file, never an unbounded read.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from contagent import wire
from contagent.errors import ContagentError
from contagent.rawlog.records import OUTCOMES, SCHEMA_VERSION
from contagent.rawlog.resent import ResentHistory
from contagent.rawlog.stream import CHUNK, MAX_RAW_LOG_BYTES, CorruptLog, LogStream, Sha256
from contagent.versions import check_version
from contagent.wire.chat import cached_tokens, usage_counts

_REQUIRED_REQUEST: tuple[str, ...] = ("index", "method", "path")
_REQUIRED_OUTCOME: tuple[str, ...] = ("index", "outcome")


@dataclass
class RawRollout:
    """The parsed records of one ``exchanges.jsonl``; records are plain dicts (hot path)."""

    path: Path
    size: int
    requests: dict[int, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: (kind, text) of each integrity problem; kinds: corrupt_log, duplicate_record,
    #: index_gap, no_outcome, no_request, torn_line, the Responses mapping's
    #: responses_chain, and both mappings' unsupported_item
    problems: list[tuple[str, str]] = field(default_factory=list)
    digest: Sha256 | None = field(default=None, repr=False, compare=False)

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


def _lines(data: bytes | bytearray, start: int, stop: int) -> Iterator[tuple[int, int]]:
    """The start and end offsets of each newline-terminated line in ``data[start:stop]``."""
    while (end := data.find(b"\n", start, stop)) != -1:
        yield start, end
        start = end + 1


def parse_exchanges(path: Path, data: bytes) -> RawRollout:
    """Parse the bytes of an exchanges.jsonl file (pure, apart from naming ``path`` in errors)."""
    return parse_stream(LogStream(path, len(data), data=data))


def parse_stream(stream: LogStream) -> RawRollout:
    """Parse the record stream of ``stream`` as it is read, a block of lines at a time.

    A corrupt compacted log is read as a rollout with no records and the problem
    ``corrupt_log``, whose ``size`` and ``sha256`` are the stored file's (there is no
    record stream to count): one bad file never stops an export, and the row says why.
    """
    try:
        return _parse_stream(stream)
    except CorruptLog as exc:
        return _corrupt(stream.path, exc)


def _corrupt(path: Path, exc: CorruptLog) -> RawRollout:
    digest, size = Sha256(), 0
    try:
        with path.open("rb") as fh:
            while chunk := fh.read(CHUNK):
                digest.update(chunk)
                size += len(chunk)
    except OSError as err:
        raise ContagentError(f"{path}: cannot read ({err.strerror})") from None
    finally:
        digest.finish()
    return RawRollout(path=path, size=size, problems=[("corrupt_log", str(exc))], digest=digest)


def _parse_stream(stream: LogStream) -> RawRollout:
    path = stream.path
    raw = RawRollout(path=path, size=0)
    reader = ResentHistory()
    lineno = 0
    try:
        try:
            for data, first, stop in stream.blocks():
                reader.block(data)
                for start, end in _lines(data, first, stop):
                    lineno += 1
                    _record(raw, path, lineno, reader, start, end)
        except Exception:
            # A log past the limit is refused for that first, and a line of a compacted log
            # that fails to parse may be zstd's corruption, found only further on.
            stream.drain()
            raise
    except BaseException:
        stream.digest.hexdigest()  # no thread outlives a failed read
        raise
    raw.size, raw.digest = stream.size, stream.digest
    if any("upstream" in req for req in raw.requests.values()):  # the token route's
        from contagent.wire.translate.rebuild import translation_problems

        raw.problems.extend(translation_problems(raw.requests, raw.outcomes))
    # every API's exchanges are read in chat shape, so every chat rule applies
    for api in wire.adapters():
        raw.problems.extend(api.to_chat(raw.requests, raw.outcomes))
    _check_integrity(raw)
    return raw


def _record(
    raw: RawRollout, path: Path, lineno: int, reader: ResentHistory, start: int, end: int
) -> None:
    """Check and file the record on line ``lineno``, at ``[start, end)`` of the reader's block."""
    line = reader.view[start:end]
    if not line or (line[0] in _BLANK and not bytes(line).strip()):
        return
    try:
        rec = reader.loads(start, end)
    except orjson.JSONDecodeError as exc:
        if not _torn(line):
            raise ContagentError(f"{path}:{lineno}: malformed JSON ({exc})") from None
        raw.problems.append(("torn_line", f"line {lineno} is torn (a write cut short)"))
        return
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
        return
    table[index] = rec


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
    return parse_stream(LogStream(Path(path), max_bytes))

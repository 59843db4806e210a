"""Read one rollout's raw exchange log into memory, checking its integrity.

Reading never trusts the file: a line that is not a JSON object, a record of
an unknown type, or a torn last line raises :class:`ContagentError` naming the
file and line. Integrity problems that a crash or a bug can leave behind (an
index gap, a request without outcome, a duplicated index) are not errors here:
they are returned as ``problems`` so that the exporter can keep the rollout
out of training data *with the reason on its row*.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from contagent.chat import usage_counts
from contagent.errors import ContagentError
from contagent.records import OUTCOMES
from contagent.responses import normalise_exchanges

_REQUIRED_REQUEST: tuple[str, ...] = ("index", "method", "path")
_REQUIRED_OUTCOME: tuple[str, ...] = ("index", "outcome")


@dataclass
class RawRollout:
    """The parsed records of one ``exchanges.jsonl``; records are plain dicts (hot path)."""

    path: Path
    sha256: str
    size: int
    requests: dict[int, dict[str, Any]] = field(default_factory=dict)
    outcomes: dict[int, dict[str, Any]] = field(default_factory=dict)
    #: (kind, text) of each integrity problem; kinds: duplicate_record, index_gap,
    #: no_outcome, no_request, and the Responses mapping's responses_chain, unsupported_item
    problems: list[tuple[str, str]] = field(default_factory=list)

    def usage(self, index: int) -> dict[str, int] | None:
        """Normalised usage of exchange ``index`` (from the outcome or its response), if any."""
        out = self.outcomes.get(index)
        if out is None:
            return None
        usage = out.get("usage")
        if usage is None and isinstance(out.get("response"), dict):
            usage = out["response"].get("usage")
        return usage_counts(usage)

    @property
    def indices(self) -> list[int]:
        """Every index that has a request or an outcome record, ascending."""
        return sorted(self.requests.keys() | self.outcomes.keys())


def _is_index(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_BLANK = frozenset(b" \t\r")


def _lines(data: bytes) -> Iterator[memoryview]:
    """Each newline-terminated line as a view: no copy of a multi-megabyte log."""
    view = memoryview(data)
    start = 0
    while (end := data.find(b"\n", start)) != -1:
        yield view[start:end]
        start = end + 1


def parse_exchanges(path: Path, data: bytes) -> RawRollout:
    """Parse the bytes of an exchanges.jsonl file (pure, apart from naming ``path`` in errors)."""
    raw = RawRollout(path=path, sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    if data and not data.endswith(b"\n"):
        last = data.count(b"\n") + 1
        raise ContagentError(f"{path}:{last}: truncated last line (no newline at end of file)")
    for lineno, line in enumerate(_lines(data), start=1):
        if not line or (line[0] in _BLANK and not bytes(line).strip()):
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise ContagentError(f"{path}:{lineno}: malformed JSON ({exc})") from None
        if not isinstance(rec, dict):
            raise ContagentError(f"{path}:{lineno}: record is not a JSON object")
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
    # Responses-API exchanges are read in chat shape, so every chat rule applies to them.
    raw.problems.extend(normalise_exchanges(raw.requests, raw.outcomes))
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


def read_exchanges(path: Path) -> RawRollout:
    """Read and parse ``path``; raise :class:`ContagentError` when it cannot be read."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise ContagentError(f"{path}: raw exchange log not found") from None
    except OSError as exc:
        raise ContagentError(f"{path}: cannot read ({exc.strerror})") from None
    return parse_exchanges(Path(path), data)


def read_result(path: Path) -> dict[str, Any] | None:
    """The rollout's ``result.json`` as a dict, or None when there is none."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ContagentError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise ContagentError(f"{path}: malformed JSON ({exc})") from None
    if not isinstance(value, dict):
        raise ContagentError(f"{path}: result is not a JSON object")
    return value

"""One ``results.jsonl`` row per rollout: the typed contract between exporter and validator.

This module is the row's one home: its fields (:class:`ResultRow`), its version
(:data:`SCHEMA_VERSION`), its reader (:func:`read_results`, which every reader of
``results.jsonl`` uses) and its totals (:func:`summarize`). Adding a field is a
field here and its value in :func:`contagent.export.derive.derive_row`; the reader's
checks, the validator's field-by-field comparison and the JSON Schema follow.

Steps store what each request *adds* to the conversation (``messages``,
relative to the step it ``extends``), so a row stays a small fraction of the
raw log even though every raw request resends the whole history.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contagent.errors import ContagentError
from contagent.layout import ExportPaths
from contagent.model_schema import dict_builder, unvalidated
from contagent.rules import ExcludedReason, NotReadyKind
from contagent.rules.token_samples import TokenKind
from contagent.versions import NewerVersionError, check_version, version_field
from contagent.wire.chat import USAGE_FIELDS

#: The results row's version: the exporter writes it, every reader accepts 1 up to it.
SCHEMA_VERSION = 3

#: Keys a row has from the version given on; an older row may lack them (they read as null).
SINCE_VERSION: dict[str, int] = {"tokens": 2}


class TokenCounts(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0

    def add(self, usage: dict[str, Any] | None) -> None:
        if usage is None:
            return
        for field in USAGE_FIELDS:
            value = usage.get(field)
            if isinstance(value, int) and not isinstance(value, bool):
                setattr(self, field, getattr(self, field) + value)


class TokenUsage(BaseModel):
    """The token identity: ``selected + excluded == billed``, per field."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    billed: TokenCounts = Field(default_factory=unvalidated(TokenCounts))
    selected: TokenCounts = Field(default_factory=unvalidated(TokenCounts))
    excluded: TokenCounts = Field(default_factory=unvalidated(TokenCounts))


class _RowModel(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)


class Step(_RowModel):
    exchange_index: int = Field(ge=0, description="Index of the raw exchange this step is.")
    branch: int = Field(ge=0, description="Conversation branch (0-based) the step belongs to.")
    extends: int | None = Field(
        description="exchange_index of the previous step of the branch, or null for a branch's "
        "first step. The request's messages are that step's request messages + `messages`."
    )
    messages: list[Any] = Field(
        description="Request messages this step adds (after fragment repair), as sent."
    )
    response: dict[str, Any] = Field(
        description="The assistant message the server returned (reasoning policy applied)."
    )
    finish_reason: str | None
    consumed: bool = Field(description="A later request carries this response.")
    truncated: bool = Field(description="This step's own response was cut (see truncation).")
    usage: dict[str, int] | None = Field(description="Usage of this exchange.")


class Excluded(_RowModel):
    exchange_index: int = Field(ge=0)
    reason: ExcludedReason
    duplicate_of: int | None = Field(
        description="For duplicate_retry: the exchange kept in its place."
    )
    detail: str | None
    usage: dict[str, int] | None


class Repair(_RowModel):
    kind: Literal["merged_tool_fragments"]
    tool_call_id: str | None
    fragments: int = Field(ge=2, description="How many adjacent tool messages were merged.")
    first_exchange_index: int = Field(description="First request in which the repair was made.")


class RawLogRef(_RowModel):
    path: str = Field(description="Absolute path of the raw exchange log.")
    sha256: str
    bytes: int


class TokenBreak(_RowModel):
    exchange_index: int = Field(ge=0, description="The step whose prompt breaks the prefix.")
    branch: int = Field(ge=0)
    position: int = Field(
        ge=0,
        description="First position where its prompt ids differ from the previous step's "
        "prompt ids followed by its sampled ids.",
    )


class SamplingEntry(_RowModel):
    """A kept step's effective sampling, as recorded (null: not known), and its constraint."""

    exchange_index: int = Field(ge=0)
    temperature: float | int | None
    top_p: float | int | None
    top_k: int | None
    min_p: float | int | None
    presence_penalty: float | int | None
    frequency_penalty: float | int | None
    repetition_penalty: float | int | None
    logit_bias: bool | None = Field(description="A non-empty logit_bias was sent.")
    seed: int | None
    max_tokens: int | None
    sources: dict[str, str | None] = Field(
        description="Per parameter, where its value came from: override, client, defaults or "
        "server (null: not known)."
    )
    logprobs_mode: Literal["raw_logprobs", "processed_logprobs"] | None = Field(
        description="The server's logprobs mode (null: the log does not say)."
    )
    modified: bool = Field(
        description="A parameter that changes the sampled distribution was active or unknown."
    )
    constraint: Literal["none", "tool_call", "step"] = Field(
        description="What a grammar constrained: nothing, the tool-call spans, or all of it."
    )


class TokenSection(_RowModel):
    """What the raw log's token data gives: the token samples of the kept steps, or why none."""

    kinds: list[TokenKind] = Field(
        description="Why the kept steps give no token samples, sorted; empty when they do."
    )
    reason: str | None = Field(description="The steps behind ``kinds``; null when none.")
    samples: list[int] = Field(description="Token samples per branch (all 0 with kinds).")
    breaks: list[TokenBreak] = Field(description="Each prefix break, in step order.")
    sampling: list[SamplingEntry] = Field(
        default_factory=list,
        description="Each kept step's sampling, in step order (rows before version 3 lack it).",
    )


@dataclass(frozen=True)
class FromResult:
    """Marks a results-row field that ``result.json``'s field of the same name gives;
    ``fallback``: the raw log gives it when ``result.json`` does not."""

    fallback: bool = False


class ResultRow(_RowModel):
    schema_version: int = version_field(SCHEMA_VERSION, "Results row")
    rollout_id: Annotated[str, FromResult(fallback=True)]
    model: Annotated[str | None, FromResult(fallback=True)]
    experiment: Annotated[str | None, FromResult()]
    status: Annotated[str | None, FromResult()] = Field(
        description="Runner verdict from result.json, if any."
    )
    passed: Annotated[bool | None, FromResult()]
    reward: Annotated[float | None, FromResult()]
    stop_condition: Annotated[str | None, FromResult()]
    started: Annotated[float | None, FromResult()]
    ended: Annotated[float | None, FromResult()]
    duration_s: Annotated[float | None, FromResult()]
    training_ready: bool
    training_ready_reason: str | None = Field(
        description="Why the rollout is not training-ready (null when it is)."
    )
    not_ready_kinds: list[NotReadyKind] = Field(
        description="The kinds of reason behind training_ready_reason, sorted; empty when ready."
    )
    truncated: bool = Field(description="Truncation: iteration limit, timeout or a cut last step.")
    truncation_reason: str | None
    steps: list[Step]
    excluded: list[Excluded]
    tools: list[dict[str, Any]] = Field(description="Union of the steps' tool definitions.")
    token_usage: TokenUsage
    repairs: list[Repair]
    branches: int = Field(ge=0)
    drop_reasoning: bool = Field(description="Export option: reasoning_content left out.")
    tokens: TokenSection | None = Field(
        None,
        description="Token samples for RL (the tokens format); null when the raw log holds "
        "no token data (rows before version 2 lack it).",
    )
    raw_log: RawLogRef


#: Keys every results row has, in the order the exporter writes them.
ROW_KEYS: tuple[str, ...] = tuple(ResultRow.model_fields)


def _from_result(fallback: bool | None = None) -> tuple[str, ...]:
    return tuple(
        name
        for name, info in ResultRow.model_fields.items()
        for mark in info.metadata
        if isinstance(mark, FromResult) and fallback in (None, mark.fallback)
    )


#: A results row as a plain dict, its keys in :data:`ROW_KEYS` order: the exporter's fast path.
result_row = dict_builder(ResultRow)


#: The row's fields that ``result.json`` gives (:class:`FromResult`).
FROM_RESULT: tuple[str, ...] = _from_result()
#: Those a row carries over from ``result.json`` unchanged.
RESULT_FIELDS: tuple[str, ...] = _from_result(fallback=False)


def row_problem(row: Any) -> str | None:
    """Why ``row`` is not a results row of the model's shape (strict types), or None.

    A newer ``schema_version`` raises :class:`~contagent.versions.NewerVersionError`.
    """
    if not isinstance(row, dict):
        return f"not a JSON object but {type(row).__name__}"
    version = SCHEMA_VERSION
    if "schema_version" in row:
        try:
            version = check_version(row["schema_version"], SCHEMA_VERSION)
        except NewerVersionError:
            raise
        except ContagentError as exc:
            return str(exc)
    missing = [k for k in ROW_KEYS if k not in row and SINCE_VERSION.get(k, 1) <= version]
    if missing:
        return f"missing keys: {', '.join(missing)}"
    try:
        ResultRow.model_validate(row, strict=True)
    except ValidationError as exc:
        return _first_error(exc)
    return None


def _first_error(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_context=False, include_input=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "row"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{more}"


@dataclass(frozen=True)
class ResultLine:
    """One non-blank line of ``results.jsonl``: a checked row, or why it is not one."""

    lineno: int
    row: dict[str, Any] | None
    """The row, checked against :class:`ResultRow` (a plain dict: the fast path)."""
    problem: str | None = None
    newer: bool = False
    """The row has a newer ``schema_version`` than this contagent reads."""
    rollout_id: str | None = None
    """The line's ``rollout_id`` when it names one, even on a row with a problem."""
    span: tuple[int, int] = (0, 0)
    """Byte span of the line in the file, for re-reading one row later."""


def parse_line(
    data: bytes | memoryview, lineno: int = 1, span: tuple[int, int] = (0, 0)
) -> ResultLine:
    """One line of ``results.jsonl`` as a checked row, or the reason it is not one."""
    try:
        row = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        return ResultLine(lineno, None, f"not JSON ({' '.join(str(exc).split())})", span=span)
    rid = row.get("rollout_id") if isinstance(row, dict) else None
    rid = rid if isinstance(rid, str) else None
    try:
        problem = row_problem(row)
    except NewerVersionError as exc:
        return ResultLine(lineno, None, str(exc), newer=True, rollout_id=rid, span=span)
    if problem is not None:
        return ResultLine(lineno, None, problem, rollout_id=rid, span=span)
    return ResultLine(lineno, row, rollout_id=rid, span=span)


def parse_results(data: bytes) -> Iterator[ResultLine]:
    """Each non-blank line of a ``results.jsonl``'s bytes, numbered from 1."""
    view = memoryview(data)
    start, lineno = 0, 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end == -1 else end
        lineno += 1
        if data[start:end].strip():
            yield parse_line(view[start:end], lineno, (start, end))
        start = end + 1


def read_results(path: Path) -> list[ResultLine]:
    """Every row of ``path`` (a ``results.jsonl``), line-numbered, with per-line problems.

    Raises :class:`ContagentError` only when the file itself cannot be read.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ContagentError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise ContagentError(
            f"{path}: is a directory, expected {ExportPaths.RESULTS_NAME}"
        ) from None
    except OSError as exc:
        raise ContagentError(f"{path}: cannot read ({exc.strerror})") from None
    return list(parse_results(data))


class GroupCounts(_RowModel):
    rollouts: int = 0
    passed: int = 0
    training_ready: int = 0


#: How a missing experiment or model is named in the per-group totals.
UNNAMED = "-"


class TokenSummary(_RowModel):
    """The rows' tokens sections, counted."""

    rollouts: int = Field(0, description="Rollouts whose raw log holds token data.")
    prefix_breaks: int = Field(
        0, description="Steps whose prompt tokens do not extend the previous step's tokens."
    )
    kinds: dict[str, int] = Field(
        default_factory=dict,
        description="Rollouts whose kept steps give no token samples, per kind of reason.",
    )

    def add(self, section: Mapping[str, Any] | None) -> None:
        if section is None:
            return
        self.rollouts += 1
        self.prefix_breaks += len(section["breaks"])
        for kind in section["kinds"]:
            _count(self.kinds, kind)


class RowSummary(BaseModel):
    """Totals over a set of results rows: what the export summary, the dataset card and
    the viewer show (one set of figures, one set of charts)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    rollouts_read: int = 0
    training_ready: int = 0
    passed: int = Field(0, description="Rollouts whose result says passed.")
    not_ready_reasons: dict[str, int] = Field(
        default_factory=dict,
        description="Rollouts not training-ready, per kind of reason (a rollout can count "
        "under several).",
    )
    exclusions: dict[str, int] = Field(
        default_factory=dict, description="Excluded exchanges by reason."
    )
    steps_selected: int = 0
    repairs: int = 0
    models: list[str] = Field(default_factory=list)
    experiments: list[str] = Field(default_factory=list)
    per_experiment: dict[str, GroupCounts] = Field(default_factory=dict)
    per_model: dict[str, GroupCounts] = Field(default_factory=dict)
    steps_per_rollout: dict[str, int] = Field(
        default_factory=dict, description="Rollouts per number of steps (keys are the numbers)."
    )
    tokens: TokenUsage = Field(default_factory=unvalidated(TokenUsage))
    token_samples: TokenSummary = Field(default_factory=unvalidated(TokenSummary))
    raw_logs: list[str] = Field(
        default_factory=list,
        description="The raw log of every rollout read, in results.jsonl order: the validator "
        "checks that each has exactly one row.",
    )

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.rollouts_read if self.rollouts_read else None

    def add(self, row: Mapping[str, Any], steps: int) -> None:
        """Count one row (``steps``: its number of steps, so a caller may drop them)."""
        self.rollouts_read += 1
        self.raw_logs.append(row["raw_log"]["path"])
        self.steps_selected += steps
        self.repairs += len(row["repairs"])
        ready, passed = row["training_ready"] is True, row.get("passed") is True
        self.training_ready += ready
        self.passed += passed
        _count(self.steps_per_rollout, str(steps))
        for exc in row["excluded"]:
            _count(self.exclusions, exc["reason"])
        for kind in row["not_ready_kinds"]:
            _count(self.not_ready_reasons, kind)
        for part in ("billed", "selected", "excluded"):
            getattr(self.tokens, part).add(row["token_usage"][part])
        self.token_samples.add(row.get("tokens"))
        for name, names, groups in (
            (row.get("experiment"), self.experiments, self.per_experiment),
            (row.get("model"), self.models, self.per_model),
        ):
            if name and name not in names:
                bisect.insort(names, name)
            group = groups.setdefault(name or UNNAMED, GroupCounts.model_construct())
            group.rollouts += 1
            group.passed += passed
            group.training_ready += ready


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def summarize(rows: Iterable[Mapping[str, Any]]) -> RowSummary:
    """The totals of ``rows`` (checked results rows)."""
    summary = RowSummary()
    for row in rows:
        summary.add(row, len(row["steps"]))
    return summary

"""``contagent export``: raw exchange logs -> results.jsonl (+ one dataset folder per format)."""

from __future__ import annotations

import gc
import logging
import multiprocessing
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, BinaryIO, Literal

import orjson
import pyarrow as pa

from contagent import __version__
from contagent.charts.export_charts import card_images
from contagent.errors import ContagentError
from contagent.export.dataset_folder import ShardWriter, rows_to_batch, write_dataset_card
from contagent.export.derive import RolloutExport, build_row, read_verdict
from contagent.export.document_folder import DocumentWriter
from contagent.export.export_summary import ExportSummary, TokenGroups
from contagent.export.formats import (
    DOCUMENT_FORMATS,
    FILTER_KEY,
    FORMATS_KEY,
    document_format_named,
    format_named,
)
from contagent.export.formats.documents import outcome
from contagent.layout import ExportPaths, RolloutPaths, find_rollouts
from contagent.model_schema import plain_dump
from contagent.rawlog.read import MAX_RAW_LOG_BYTES
from contagent.rules.groups import (
    ADVANTAGE_METHODS,
    GROUP_PARTS,
    AdvantageMethod,
    GroupFacts,
    attempt_of,
    group_counts,
    group_table,
)
from contagent.rules.rl import TOKENS_OPTIONS_KEY, TokenOptions

log = logging.getLogger(__name__)

Progress = Callable[[int, int], None]

# The Hub's license ids (https://huggingface.co/docs/hub/repositories-licenses) are lower-case
# slugs; "other" needs a name and link of its own, which is what no license given means here.
_LICENSE_ID = re.compile(r"[a-z0-9][a-z0-9.+-]{0,63}")


@dataclass(frozen=True)
class ExportOptions:
    formats: tuple[str, ...] = ("prime-sft",)
    """Dataset folders to write besides results.jsonl (``prime-sft``, ``trl``); may be empty."""
    filter: Literal["passed", "all"] = "passed"
    jobs: int = 1
    drop_reasoning: bool = False
    shard_rows: int = 10_000
    license: str | None = None
    """The Hub license id the dataset is released under (``apache-2.0``, ``cc-by-4.0``, ...).
    None: the card declares ``other`` and says the model's and the tasks' terms apply."""
    max_raw_log: int = MAX_RAW_LOG_BYTES
    """A raw log holding more plain bytes than this (in either form) stops the export."""
    advantage: AdvantageMethod = "grpo"
    """How the tokens format's advantages are computed from each group's rewards."""
    group_by: tuple[str, ...] = ()
    """What the group key adds to the task and the model (``agent``)."""
    allow_raw_logprobs: bool = False
    """Token samples of steps whose raw logprobs are not the sampled distribution's too."""
    train_constrained: bool = False
    """Keep the tokens a grammar constrained in the tokens format's ``mask``."""

    @property
    def tokens(self) -> TokenOptions:
        return TokenOptions(
            self.advantage, self.group_by, self.allow_raw_logprobs, self.train_constrained
        )


@dataclass
class _Done:
    """One rollout as the export writes it: its row and its records per format."""

    row_json: bytes
    row: dict[str, Any]  # without steps (kept small across processes)
    batches: dict[str, pa.RecordBatch]  # the rollout's rows per format, converted in the worker
    documents: dict[str, tuple[bytes | None, str | None]]  # per document format: JSON or why not
    raw_bytes: int
    exchanges: int
    left_out: dict[str, str]  # per Parquet format that leaves the selected row out: the kind


@contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Parsed JSON holds no reference cycles, so reference counting frees it all.

    With the collector on, every few hundred new containers it walks the whole
    parsed rollout again (27% more export time on the benchmark corpus).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def read_rollout(paths: RolloutPaths, options: ExportOptions) -> RolloutExport:
    """The part of :func:`export_rollout` that needs no group: reading the raw log and
    deriving the row (a rollout engine does it as each rollout ends, before its group)."""
    with _without_cyclic_gc():
        return build_row(paths, options.drop_reasoning, options.max_raw_log)


def export_rollout(
    paths: RolloutPaths,
    options: ExportOptions,
    group: GroupFacts | None,
    read: RolloutExport | None = None,
) -> _Done:
    """One rollout's row and format records, by the rules and code of :func:`export`;
    ``group``: its group and advantage (:func:`group_table_of` over the group's rollouts);
    ``read``: what :func:`read_rollout` gave for it, if it was read already (used once).
    A rollout engine derives each finished rollout's samples here."""
    with _without_cyclic_gc():
        return _build(paths, options, group, read)


def _export_one(args: tuple[RolloutPaths, ExportOptions, GroupFacts | None]) -> _Done:
    paths, options, group = args
    with _without_cyclic_gc():
        return _build(paths, options, group)


def _build(
    paths: RolloutPaths,
    options: ExportOptions,
    group: GroupFacts | None,
    read: RolloutExport | None = None,
) -> _Done:
    done = read or build_row(paths, options.drop_reasoning, options.max_raw_log)
    row = done.row
    done.data = replace(done.data, group=group, token_options=options.tokens)
    batches = {}
    documents: dict[str, tuple[bytes | None, str | None]] = {}
    left_out: dict[str, str] = {}
    for name in options.formats:
        if name in DOCUMENT_FORMATS:
            doc, reason = outcome(DOCUMENT_FORMATS[name], row, done.data, options.filter)
            documents[name] = (None if doc is None else orjson.dumps(doc), reason)
            continue
        fmt = format_named(name)
        if not fmt.selected(row, options.filter):
            continue
        kind = fmt.left_out(row, done.data)
        if kind is not None:
            left_out[name] = kind
        else:
            batches[name] = rows_to_batch(fmt.records(row, done.data), fmt.schema)
    head = {k: v for k, v in row.items() if k not in ("steps", "tools")}
    head["steps_count"] = len(row["steps"])
    return _Done(
        orjson.dumps(row) + b"\n",
        head,
        batches,
        documents,
        done.raw_bytes,
        done.exchanges,
        left_out,
    )


def group_table_of(rollouts: list[RolloutPaths], options: TokenOptions) -> dict[str, GroupFacts]:
    """Every rollout's group and advantage (by its rollout id, which names a group of one
    as validate names it), from the verdicts beside the raw logs: the rows name the same
    rollouts by the same verdicts."""
    attempts = []
    for paths in rollouts:
        verdict = read_verdict(paths)
        attempts.append(attempt_of(paths.rollout_id, verdict, options.group_by))
    return group_table(attempts, options.advantage)


def _results(
    rollouts: list[RolloutPaths], options: ExportOptions, groups: dict[str, GroupFacts]
) -> Iterator[_Done]:
    work = [(p, options, groups.get(p.rollout_id)) for p in rollouts]
    if options.jobs <= 1 or len(work) <= 1:
        yield from map(_export_one, work)
        return
    if options.formats:
        # pyarrow imports pandas lazily on its first conversion (~0.5 s); pay it once
        # here rather than once in every forked worker.
        rows_to_batch([])
    ctx = multiprocessing.get_context("fork" if os.name == "posix" else "spawn")
    with ctx.Pool(min(options.jobs, len(work))) as pool:
        yield from pool.imap(_export_one, work, chunksize=1)


def _check_license(license_id: str | None) -> None:
    if license_id is None:
        return
    if license_id == "other":
        raise ContagentError(
            "--license other: leave --license out, and the card declares 'other' with the "
            "model's and the tasks' terms"
        )
    if not _LICENSE_ID.fullmatch(license_id):
        raise ContagentError(
            f"--license {license_id!r} is not a Hub license id (lower case, e.g. apache-2.0, mit, "
            "cc-by-4.0: https://huggingface.co/docs/hub/repositories-licenses)"
        )


def export(
    run_dirs: list[Path],
    out_dir: Path,
    options: ExportOptions | None = None,
    progress: Progress | None = None,
) -> ExportSummary:
    """Export every rollout under ``run_dirs`` into ``out_dir``; return what was done.

    ``results.jsonl`` and the summary are written to temporary names and renamed
    at the end, so an interrupted export never leaves a half file under the
    final name.
    """
    options = options or ExportOptions()
    if options.jobs < 1:
        raise ContagentError("--jobs must be at least 1")
    if options.max_raw_log < 1:
        raise ContagentError("--max-raw-log must be at least 1 byte")
    _check_token_options(options)
    _check_license(options.license)
    names = list(dict.fromkeys(options.formats))
    formats = [format_named(n) for n in names if n not in DOCUMENT_FORMATS]
    document_formats = [document_format_named(n) for n in names if n in DOCUMENT_FORMATS]
    rollouts = find_rollouts(run_dirs)
    paths = ExportPaths(Path(out_dir))
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ContagentError(
            f"{paths.root}: cannot create output directory ({exc.strerror})"
        ) from None
    summary = ExportSummary.model_construct(
        contagent_version=__version__,
        options={**asdict(options), "run_dirs": [str(d) for d in run_dirs]},
        out_dir=str(paths.root),
    )
    tmp = ExportPaths.staging(paths.results)
    stamp = {
        FILTER_KEY: options.filter.encode(),
        FORMATS_KEY: ",".join(names).encode(),
    }
    writers = {
        f.name: ShardWriter(
            paths.format_folder(f.name).root,
            f.schema,
            max_rows_per_shard=options.shard_rows,
            metadata={**stamp, TOKENS_OPTIONS_KEY: options.tokens.stamp()}
            if f.name == "tokens"
            else stamp,
        )
        for f in formats
    }
    groups = group_table_of(rollouts, options.tokens) if "tokens" in writers else {}
    documents: dict[str, DocumentWriter] = {}
    try:
        for d in document_formats:
            folder = paths.document_folder(d.name).root
            documents[d.name] = DocumentWriter(folder, d, options.filter, names)
        with open(tmp, "wb") as fh:
            _write_rows(fh, rollouts, options, groups, (writers, documents), summary, progress)
        for fmt in formats:
            summary.parquet_files += [str(p) for p in writers[fmt.name].close()]
        for name, doc_writer in documents.items():
            summary.document_files[name] = [str(p) for p in doc_writer.close()]
        images = card_images(summary) if formats else []  # drawn once for all
        for fmt in formats:
            write_dataset_card(paths.format_folder(fmt.name).root, summary, fmt, images)
        os.replace(tmp, paths.results)
    except BaseException:
        tmp.unlink(missing_ok=True)
        for writer in writers.values():
            writer.abort()
        for doc_writer in documents.values():
            doc_writer.abort()
        raise
    summary.results_path = str(paths.results)
    _write_summary(paths, summary)
    return summary


def _write_rows(
    fh: BinaryIO,
    rollouts: list[RolloutPaths],
    options: ExportOptions,
    groups: dict[str, GroupFacts],
    all_writers: tuple[dict[str, ShardWriter], dict[str, DocumentWriter]],
    summary: ExportSummary,
    progress: Progress | None,
) -> None:
    writers, documents = all_writers
    seen_ids: set[str] = set()
    sampled: list[str] = []
    for n, done in enumerate(_results(rollouts, options, groups), start=1):
        row = done.row
        if row["rollout_id"] in seen_ids:
            raise ContagentError(f"two rollouts share the id {row['rollout_id']!r}")
        seen_ids.add(row["rollout_id"])
        fh.write(done.row_json)
        summary.add(row, row["steps_count"])
        summary.exchanges_read += done.exchanges
        summary.raw_bytes += done.raw_bytes
        for name, batch in done.batches.items():
            writers[name].write_batch(batch)
            summary.format_rows[name] = summary.format_rows.get(name, 0) + batch.num_rows
            _count(summary.format_rollouts, name, batch.num_rows > 0)
        for name, kind in done.left_out.items():
            summary.count_left_out(name, kind)
        if "tokens" in done.batches and done.batches["tokens"].num_rows:
            sampled.append(rollouts[n - 1].rollout_id)
        sft = [b for n, b in done.batches.items() if format_named(n).key_columns == ("branch",)]
        if sft:
            # The SFT formats hold the same rows, one per branch: count them once.
            summary.branches_written += sft[0].num_rows
        for name, (doc, reason) in done.documents.items():
            documents[name].add(row["rollout_id"], doc, reason)
            _count(summary.format_rows, name, doc is not None)
            _count(summary.format_rollouts, name, doc is not None)
        written = any(b.num_rows for b in done.batches.values())
        if written or any(doc is not None for doc, _ in done.documents.values()):
            summary.rollouts_written += 1
        if progress:
            progress(n, len(rollouts))
    for name in [*writers, *documents]:
        summary.format_rows.setdefault(name, 0)
        summary.format_rollouts.setdefault(name, 0)
    if "tokens" in writers:
        summary.token_groups = TokenGroups.model_construct(**asdict(group_counts(groups, sampled)))


def _count(counts: dict[str, int], name: str, n: int) -> None:
    counts[name] = counts.get(name, 0) + n


def _check_token_options(options: ExportOptions) -> None:
    if options.advantage not in ADVANTAGE_METHODS:
        raise ContagentError(
            f"--advantage {options.advantage!r}: one of {', '.join(ADVANTAGE_METHODS)}"
        )
    unknown = set(options.group_by) - set(GROUP_PARTS)
    if unknown:
        raise ContagentError(
            f"--group-by {', '.join(sorted(unknown))}: one of {', '.join(GROUP_PARTS)}"
        )


def _write_summary(paths: ExportPaths, summary: ExportSummary) -> None:
    tmp = ExportPaths.staging(paths.summary)
    tmp.write_bytes(orjson.dumps(plain_dump(summary), option=orjson.OPT_INDENT_2))
    os.replace(tmp, paths.summary)

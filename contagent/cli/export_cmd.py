"""``contagent export`` and ``contagent validate``."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from contagent.cli._common import (
    MAX_RAW_LOG_HELP,
    console,
    fail,
    lean_pyarrow,
    raw_log_limit,
    run_guarded,
    tune_allocator,
)


@contextmanager
def _progress_bar() -> Iterator[Callable[[int, int], None] | None]:
    """A progress bar on a terminal (its module loads only there), else nothing."""
    if not console.is_terminal:
        yield None
        return
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
    )

    columns = (TextColumn("exporting"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task("export", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield progress


def _export(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Rollout directories, or folders above them.")
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output directory.")],
    format_names: Annotated[
        list[str] | None,
        typer.Option(
            "--format",
            help="Dataset folder to write besides results.jsonl: prime-sft (default), trl, "
            "tokens (token samples for RL) or atif (Harbor's trajectories, a JSON file per "
            "rollout); repeat for several. results: results.jsonl alone.",
        ),
    ] = None,
    rollout_filter: Annotated[
        str, typer.Option("--filter", help="Rollouts in the Parquet: passed or all.")
    ] = "passed",
    jobs: Annotated[int, typer.Option(help="Worker processes.")] = 1,
    drop_reasoning: Annotated[bool, typer.Option(help="Leave reasoning_content out.")] = False,
    shard_rows: Annotated[int, typer.Option(help="Parquet rows per shard.")] = 10_000,
    license_id: Annotated[
        str | None,
        typer.Option(
            "--license",
            help="Hub license id the dataset cards declare (e.g. apache-2.0, cc-by-4.0); "
            "default: none, and the cards declare 'other', with the model's and tasks' terms.",
        ),
    ] = None,
    push_to_hub: Annotated[
        str | None,
        typer.Option(
            help="Then upload the dataset folder (one --format) to this Hub repo (ORG/NAME); "
            "default: no upload."
        ),
    ] = None,
    hub_private: Annotated[
        bool, typer.Option("--hub-private/--hub-public", help="Visibility if the repo is created.")
    ] = True,
    max_raw_log: Annotated[str | None, typer.Option(help=MAX_RAW_LOG_HELP)] = None,
    advantage: Annotated[
        str,
        typer.Option(
            help="tokens: the advantage from each group's rewards: grpo (reward minus the "
            "group mean), grpo-std (divided by the group's std) or none."
        ),
    ] = "grpo",
    group_by: Annotated[
        list[str] | None,
        typer.Option(
            help="tokens: add to the group key (task and model): agent (repeatable; "
            "default: task and model alone)."
        ),
    ] = None,
    allow_raw_logprobs: Annotated[
        bool,
        typer.Option(
            help="tokens: also steps whose raw logprobs are not the sampled distribution's."
        ),
    ] = False,
    train_constrained: Annotated[
        bool,
        typer.Option(help="tokens: keep the tokens a grammar constrained in the mask."),
    ] = False,
) -> None:
    """Rebuild results.jsonl and the training formats' dataset folders from raw exchange logs.

    Exit 0 when every rollout has its row (one not training-ready, a torn or corrupt raw log
    among them, is counted in the summary), 2 unusable input or options (nothing is written),
    3 a row that would lose an exchange (refused), 130 interrupted.
    """
    lean_pyarrow()
    tune_allocator()
    from contagent.export.exporter import ExportOptions, export

    formats = _formats(format_names, rollout_filter, push_to_hub)
    if push_to_hub:
        from contagent.hub.upload import resolve_token

        run_guarded(lambda: resolve_token(None))  # no token: fail before any work
    options = ExportOptions(
        formats=formats,
        filter=rollout_filter,  # type: ignore[arg-type]
        jobs=jobs,
        drop_reasoning=drop_reasoning,
        shard_rows=shard_rows,
        license=license_id,
        max_raw_log=raw_log_limit(max_raw_log),
        advantage=advantage,  # type: ignore[arg-type]
        group_by=tuple(group_by or ()),
        allow_raw_logprobs=allow_raw_logprobs,
        train_constrained=train_constrained,
    )
    with _progress_bar() as progress:
        summary = run_guarded(lambda: export(run_dirs, out, options, progress))
    console.print(_summary_table(summary))
    if push_to_hub:
        from contagent.cli.hub_cmd import print_upload
        from contagent.hub.upload import push_export_to_hub

        repo = push_to_hub
        name = formats[0]
        print_upload(run_guarded(lambda: push_export_to_hub(out, repo, name, private=hub_private)))


def _formats(
    given: list[str] | None, rollout_filter: str, push_to_hub: str | None
) -> tuple[str, ...]:
    """The dataset folders to write; a one-line error for options that do not go together."""
    from contagent.export.formats import DOCUMENT_FORMATS, FORMAT_NAMES

    given = given or ["prime-sft"]
    for name in given:
        if name != "results" and name not in FORMAT_NAMES:
            fail(f"unknown --format {name!r} ({', '.join(FORMAT_NAMES)} or results)")
    if "results" in given and len(set(given)) > 1:
        fail("--format results means results.jsonl alone; leave it out to add dataset folders")
    formats = tuple(dict.fromkeys(n for n in given if n != "results"))
    if rollout_filter not in ("passed", "all"):
        fail(f"unknown --filter {rollout_filter!r} (passed or all)")
    if push_to_hub and len(formats) != 1:
        fail(
            "--push-to-hub uploads one dataset folder: give exactly one --format "
            "(prime-sft, trl or tokens)"
        )
    if push_to_hub and formats[0] in DOCUMENT_FORMATS:
        fail(f"--push-to-hub uploads a Parquet dataset folder, and {formats[0]} is not one")
    return formats


def _summary_table(summary: Any) -> Table:
    """The export summary's counts, one a row."""
    from contagent.export.formats import FORMAT_NAMES, rows_are

    table = Table(title=f"contagent export -> {summary.out_dir}", show_header=False)
    table.add_row("rollouts read", str(summary.rollouts_read))
    table.add_row("training-ready", str(summary.training_ready))
    for reason, n in sorted(summary.not_ready_reasons.items()):
        table.add_row(f"  not ready: {reason}", str(n))
    table.add_row("exchanges read", f"{summary.exchanges_read} ({summary.raw_bytes / 1e6:.1f} MB)")
    table.add_row("steps selected", str(summary.steps_selected))
    for reason, n in sorted(summary.exclusions.items()):
        table.add_row(f"  excluded: {reason}", str(n))
    table.add_row("repairs", str(summary.repairs))
    if summary.format_rows:
        table.add_row("rollouts written", str(summary.rollouts_written))
    for name in FORMAT_NAMES:
        if name in summary.format_rows:
            table.add_row(f"{name}: {rows_are(name)}", str(summary.format_rows[name]))
            for kind, n in sorted(summary.left_out.get(name, {}).items()):
                table.add_row(f"  left out: {kind}", str(n))
    tokens = summary.token_samples
    if tokens.rollouts:
        table.add_row("rollouts with token data", str(tokens.rollouts))
        table.add_row("  prefix breaks", str(tokens.prefix_breaks))
        for kind, n in sorted(tokens.kinds.items()):
            table.add_row(f"  no token samples: {kind}", str(n))
    groups = summary.token_groups
    if groups is not None and groups.groups:
        table.add_row("tokens: groups", str(groups.groups))
        table.add_row("  groups of one (advantage 0)", str(groups.singletons))
        table.add_row("  short groups", str(groups.short))
    for part in ("billed", "selected", "excluded"):
        counts = getattr(summary.tokens, part)
        table.add_row(
            f"tokens {part}",
            f"{counts.total_tokens} (prompt {counts.prompt_tokens}, completion {counts.completion_tokens})",
        )
    return table


def _validate(
    results: Annotated[Path, typer.Argument(help="The results.jsonl an export wrote.")],
    json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Print a machine-readable report on stdout (default: off, lines on stderr).",
        ),
    ] = False,
    max_raw_log: Annotated[str | None, typer.Option(help=MAX_RAW_LOG_HELP)] = None,
) -> None:
    """Prove from the raw logs that an export kept every rule.

    Exit 0 healthy, 1 violations, 2 unusable input, 4 an internal error of the validator.
    """
    lean_pyarrow()
    tune_allocator()
    from contagent.validate.check import validate

    limit = raw_log_limit(max_raw_log)
    report = run_guarded(lambda: validate(results, limit))
    if json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        _print_report(report)
    raise typer.Exit(0 if report.ok else 1)


def _print_report(report: Any) -> None:
    """One line per violation, then the verdict; lines are never wrapped (a pipe or a log
    file gets each one whole), and what the export holds is never read as markup."""
    from rich.markup import escape

    for v in report.violations:
        # A problem of the export as a whole (a folder, the set of rows) names no rollout.
        where = "in the export" if v.rollout_id is None else escape(v.rollout_id)
        console.print(
            f"[red]violation[/red] {where}: {escape(v.reason)}", highlight=False, soft_wrap=True
        )
    verdict = (
        "[green]healthy[/green]"
        if report.ok
        else f"[red]{len(report.violations)} violation(s)[/red]"
    )
    console.print(
        f"validated {report.rows} rows ({report.training_ready} training-ready, "
        f"{report.parquet_rows} Parquet rows"
        + (f", {report.documents} documents" if report.documents else "")
        + f"): {verdict}",
        soft_wrap=True,
    )


def register(app: typer.Typer) -> None:
    app.command("export")(_export)
    app.command("validate")(_validate)

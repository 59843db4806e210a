"""``contagent compact``: store finished raw logs compressed (zstd, long-distance matching)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from contagent.cli._common import console, run_guarded


def compact(
    run_dirs: Annotated[
        list[Path], typer.Argument(help="Rollout directories, or folders above them.")
    ],
) -> None:
    """Replace each finished exchanges.jsonl by exchanges.jsonl.zst: the same records, in 0.4%
    of a 200-step log's size (docs/benchmarks.md). Logs still being recorded are skipped;
    every reader takes either form.

    Exit 0 when every log is compacted (or already was), 1 when one was skipped or failed.
    """
    from contagent.rawlog.compact import Compaction, compact_dirs

    def show(c: Compaction) -> None:
        if c.status == "compacted":
            ratio = c.stored_bytes / c.plain_bytes if c.plain_bytes else 0.0
            console.print(
                f"compacted {c.root}: {_size(c.plain_bytes)} -> {_size(c.stored_bytes)} "
                f"({ratio:.1%})",
                highlight=False,
                soft_wrap=True,
            )
        elif c.status != "already":
            console.print(f"{c.status} {c.root}: {c.note}", highlight=False, soft_wrap=True)

    done = run_guarded(lambda: compact_dirs(run_dirs, show))
    plain = sum(c.plain_bytes for c in done)
    stored = sum(c.stored_bytes for c in done)
    counts = {s: sum(c.status == s for c in done) for s in ("compacted", "already")}
    left = len(done) - counts["compacted"] - counts["already"]
    console.print(
        f"{counts['compacted']} compacted ({_size(plain)} -> {_size(stored)}), "
        f"{counts['already']} already compacted, {left} left as they are",
        highlight=False,
    )
    raise typer.Exit(1 if left else 0)


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 100_000 else f"{n / 1e3:.1f} kB"


def register(app: typer.Typer) -> None:
    app.command("compact")(compact)

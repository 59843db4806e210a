"""``contagent upload``: publish a dataset folder to the Hugging Face Hub."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from contagent.cli._common import run_guarded

out = Console()


if TYPE_CHECKING:
    from contagent.hub.upload import UploadResult


def register(app: typer.Typer) -> None:
    app.command("upload")(upload)


def upload(
    folder: Annotated[Path, typer.Argument(help="Dataset folder, e.g. OUT/prime-sft.")],
    repo_id: Annotated[str, typer.Option("--repo-id", help="Dataset repo on the Hub, ORG/NAME.")],
    private: Annotated[
        bool, typer.Option("--private/--public", help="Visibility when the repo is created.")
    ] = True,
    revision: Annotated[
        str | None,
        typer.Option("--revision", help="Branch to commit to (created if missing); default main."),
    ] = None,
    message: Annotated[
        str | None,
        typer.Option(
            "--message",
            help="Commit message (default: 'Upload N shard(s) and dataset card with "
            "contagent VERSION').",
        ),
    ] = None,
) -> None:
    """Upload the shards and card of FOLDER to a Hub dataset repo in one commit.

    The token comes from HF_TOKEN or the saved login (`hf auth login`).
    """
    from contagent.hub.upload import upload_dataset_folder

    result = run_guarded(
        lambda: upload_dataset_folder(
            folder, repo_id, private=private, revision=revision, message=message
        )
    )
    print_upload(result)


def print_upload(result: UploadResult) -> None:
    table = Table(show_header=False, box=None)
    table.add_row("repo", f"{result.repo_url} ({'private' if result.private else 'public'})")
    table.add_row("branch", result.revision)
    if result.committed:
        table.add_row("commit", result.commit_url or result.commit_oid)
    else:
        table.add_row("commit", f"none: the Hub already holds these files ({result.commit_oid})")
    table.add_row("uploaded", str(len(result.files_uploaded)))
    table.add_row("unchanged", str(len(result.files_skipped)))
    table.add_row("deleted", str(len(result.files_deleted)))
    out.print(table)

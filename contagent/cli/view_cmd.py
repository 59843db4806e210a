"""``contagent view``: browse an export or a run's log dir in a local, read-only web app."""

from __future__ import annotations

import sys
import webbrowser
from pathlib import Path
from typing import Annotated

import typer

from contagent.cli._common import MAX_RAW_LOG_HELP, raw_log_limit, run_guarded


def view(
    path: Annotated[
        Path, typer.Argument(help="Export folder (with results.jsonl) or a run's --log-dir.")
    ],
    host: Annotated[
        str, typer.Option(help="Address to listen on (loopback unless you mean to share it).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 8765,
    no_open: Annotated[
        bool, typer.Option("--no-open", help="Do not open a browser (default: open one).")
    ] = False,
    max_raw_log: Annotated[str | None, typer.Option(help=MAX_RAW_LOG_HELP)] = None,
) -> None:
    """Serve summary charts, the rollout list and each rollout's exchanges until Ctrl+C."""
    from contagent.viewer.app import is_loopback, serve

    if not is_loopback(host):
        sys.stderr.write(
            f"contagent view: warning: listening on {host}: anyone who reaches it can read "
            "these rollouts\n"
        )

    def ready(url: str) -> None:
        sys.stdout.write(f"contagent view serving {path} on {url} (Ctrl+C stops)\n")
        sys.stdout.flush()
        if not no_open:
            webbrowser.open(url)

    limit = raw_log_limit(max_raw_log)
    run_guarded(lambda: serve(path, host, port, ready, limit))


def register(app: typer.Typer) -> None:
    app.command("view")(view)

"""``contagent proxy``: the recording proxy in the foreground."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated

import typer

from contagent.cli._common import console, run_guarded
from contagent.errors import ContagentError


def _proxy(
    upstream: Annotated[
        str, typer.Option("--upstream", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000")
    ],
    record_dir: Annotated[
        Path, typer.Option("--record-dir", help="Where DIR/<rollout_id>/exchanges.jsonl go.")
    ],
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on (0: any free port).")] = 0,
    upstream_api_key_env: Annotated[
        str | None,
        typer.Option(help="Environment variable holding the upstream API key (sent as Bearer)."),
    ] = None,
    upstream_timeout: Annotated[
        float | None,
        typer.Option(help="Seconds to wait for upstream bytes before giving up (504)."),
    ] = None,
    upstream_ca: Annotated[
        Path | None,
        typer.Option(
            help="PEM file of the CA(s) that sign an https upstream's certificate; "
            "trusted instead of the system's store."
        ),
    ] = None,
) -> None:
    """Forward /r/<rollout_id>/v1/... to UPSTREAM/v1/... and record every exchange.

    Prints the URL it listens on; stops on SIGINT/SIGTERM after recording the
    requests in flight.
    """
    from contagent.proxy import ProxyRunSummary, run_proxy

    def start() -> ProxyRunSummary:
        key = None
        if upstream_api_key_env:
            key = os.environ.get(upstream_api_key_env)
            if not key:
                raise ContagentError(f"environment variable {upstream_api_key_env} is not set")
        if upstream_timeout is not None and upstream_timeout <= 0:
            raise ContagentError("--upstream-timeout must be positive")
        if record_dir.exists() and not record_dir.is_dir():
            raise ContagentError(f"{record_dir}: not a directory")

        def ready(url: str) -> None:
            sys.stdout.write(f"contagent proxy listening on {url} (record dir {record_dir})\n")
            sys.stdout.flush()

        return run_proxy(
            upstream,
            record_dir,
            host=host,
            port=port,
            upstream_api_key=key,
            upstream_timeout=upstream_timeout,
            upstream_ca=upstream_ca,
            on_ready=ready,
        )

    summary = run_guarded(start)
    detail = ", ".join(f"{k} {v}" for k, v in sorted(summary.outcomes.items())) or "no exchanges"
    console.print(
        f"contagent proxy stopped: {summary.exchanges} exchanges recorded ({detail})",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.command("proxy")(_proxy)

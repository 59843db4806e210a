"""``contagent export`` and ``contagent validate``."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Filled in by the export stage."""

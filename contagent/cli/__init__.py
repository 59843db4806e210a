"""The ``contagent`` command line: thin wrappers that parse options and call one library function.

Each stage registers its commands from its own module, so the stages stay
independent; printing and progress bars live here only.
"""

from __future__ import annotations

import typer

app = typer.Typer(
    name="contagent",
    help="Turn coding-agent runs into training data people can trust.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    # A callback keeps `contagent` a command group even while only one command is registered.
    pass


def _register() -> None:
    from contagent.cli import compact_cmd, engine_cmd, export_cmd, proxy_cmd, run_cmd

    export_cmd.register(app)
    compact_cmd.register(app)
    proxy_cmd.register(app)
    run_cmd.register(app)
    engine_cmd.register(app)

    from contagent.cli import hub_cmd

    hub_cmd.register(app)

    from contagent.cli import view_cmd

    view_cmd.register(app)


def main() -> None:
    _register()
    app()

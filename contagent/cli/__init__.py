"""The ``contagent`` command line: thin wrappers that parse options and call one library function.

Each stage registers its commands from its own module, so the stages stay
independent; printing and progress bars live here only.
"""

from __future__ import annotations

import gc
import importlib
import sys

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


#: Each command's module, in the order ``contagent --help`` lists them.
COMMAND_MODULES: dict[str, tuple[str, ...]] = {
    "export_cmd": ("export", "validate"),
    "compact_cmd": ("compact",),
    "proxy_cmd": ("proxy", "reward"),
    "run_cmd": ("run",),
    "engine_cmd": ("gc", "build"),
    "hub_cmd": ("upload",),
    "view_cmd": ("view",),
}


def _register(argv: list[str]) -> None:
    """Register the command ``argv`` names, and only its module (each imports what its
    commands need); anything else (``--help``, a typo) registers every command."""
    wanted = [m for m, names in COMMAND_MODULES.items() if argv[:1] and argv[0] in names]
    for name in wanted or COMMAND_MODULES:
        importlib.import_module(f"contagent.cli.{name}").register(app)


#: Commands that start with Python's cyclic garbage collector off: their start-up makes
#: tens of thousands of objects (imports, option parsing) and no garbage cycles, and the
#: collector walking them costs more than the rest of the option parsing.
#: :func:`contagent.cli._common.run_guarded` turns it back on before the work.
QUICK_START = ("export", "validate")


def main() -> None:
    if sys.argv[1:2] and sys.argv[1] in QUICK_START:
        gc.disable()
    _register(sys.argv[1:])
    app()

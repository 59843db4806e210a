"""Every command's help as a user reads it: each option says its default, no bracketed text
is eaten as markup, the commands whose exit codes mean several things list them, and the
defaults the docs show are the code's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
import typer
from rich.console import Console
from rich.text import Text
from typer.core import TyperOption
from typer.rich_utils import _get_parameter_help

from contagent import cli
from contagent.cli.run_options import COMPAT_PANEL
from tests.helpers import REPO

#: Commands whose exit status tells several outcomes apart: their help lists them.
EXIT_CODES = ("export", "validate", "proxy", "compact", "run")


def _commands() -> dict[str, Any]:
    app = typer.Typer()
    for module in cli.COMMAND_MODULES:
        __import__(f"contagent.cli.{module}", fromlist=["register"]).register(app)
    return dict(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


COMMANDS = _commands()


def _options() -> Iterator[tuple[str, TyperOption]]:
    for name, command in COMMANDS.items():
        for param in command.params:
            if isinstance(param, TyperOption) and not param.required and param.name != "help":
                yield name, param


def _has_effect(param: TyperOption) -> bool:
    """The seed pipeline's options that ``run`` accepts and ignores have no default to
    state: their help says why they are not needed."""
    return param.rich_help_panel != COMPAT_PANEL


def _shown_help(command: str, param: TyperOption) -> str:
    """The option's help text as ``--help`` prints it: prose, then ``[default: ...]``."""
    ctx = typer.Context(COMMANDS[command], info_name=command)
    columns = _get_parameter_help(param=param, ctx=ctx, markup_mode="rich")
    console = Console(width=10_000, color_system=None)
    with console.capture() as capture:
        console.print(columns)
    return " ".join(capture.get().split())


OPTIONS = {f"{c} {p.opts[0]}": (c, p) for c, p in _options()}


def test_the_walk_sees_every_command_and_flag() -> None:
    assert set(COMMANDS) == {n for names in cli.COMMAND_MODULES.values() for n in names}
    assert {"proxy --upstream-timeout", "view --no-open", "validate --json"} <= set(OPTIONS)


@pytest.mark.parametrize("option", sorted(o for o, (_, p) in OPTIONS.items() if _has_effect(p)))
def test_every_option_states_its_default(option: str) -> None:
    """typer prints ``[default: X]`` by itself, except for a value that defaults to None and
    an on/off flag that defaults to off: those say their default in their help text."""
    shown = _shown_help(*OPTIONS[option])
    assert "default" in shown.lower(), f"{option}: no default in {shown!r}"


def _texts() -> Iterator[tuple[str, str]]:
    for name, command in COMMANDS.items():
        yield name, command.help or ""
        for param in command.params:
            yield f"{name} {param.name}", getattr(param, "help", None) or ""


@pytest.mark.parametrize(("where", "text"), list(_texts()))
def test_no_bracketed_text_is_eaten_as_markup(where: str, text: str) -> None:
    """Help is rich markup: ``[ray]`` unescaped is a tag, and prints as nothing."""
    assert Text.from_markup(text).plain == text.replace("\\[", "["), where


def test_the_exit_codes_are_listed() -> None:
    for name in EXIT_CODES:
        doc = " ".join((COMMANDS[name].help or "").split())
        assert re.search(r"Exit 0 .*[,;] [12] ", doc), f"{name}: no exit codes in its help"


#: ``[--option VALUE]`` in a docs usage block: VALUE is the default the docs show.
_DOCS_USAGE = re.compile(r"\[(--[a-z-]+) ([^\]\s]+)\]")


def _docs_defaults() -> Iterator[tuple[str, str, str]]:
    """(command, option, value) for each ``[--option VALUE]`` after ``contagent COMMAND``."""
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in re.findall(r"```(?:bash|console)?\n(.*?)```", path.read_text(), re.S):
            for usage in re.split(r"\n(?=\$? ?contagent )", block):
                command = re.match(r"\$? ?contagent ([a-z]+)", usage)
                if command and command[1] in COMMANDS:
                    for option, value in _DOCS_USAGE.findall(usage):
                        yield command[1], option, value


#: "`--option` (default `X`", "`--option VALUE` (default X", "`--option`, default X" in prose.
_DOCS_PROSE = re.compile(r"`(--[a-z-]+)(?: [A-Z_]+)?`,? \(?default `?([\w.-]+)`?")


def _prose_defaults() -> Iterator[tuple[str, str, str]]:
    """(file, option, value) for each default stated in the docs' prose."""
    for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for option, value in _DOCS_PROSE.findall(" ".join(path.read_text().split())):
            yield path.name, option, value


def _default(param: TyperOption) -> str | None:
    value = param.default
    if value is None or isinstance(value, bool):
        return None
    return f"{value:g}" if isinstance(value, float) else str(value)


def test_the_docs_show_the_codes_defaults() -> None:
    """A placeholder (upper case, or an example for an option with no default value) is
    not a default; any other value the docs show is the code's default."""
    seen = 0
    for command, option, value in _docs_defaults():
        param = OPTIONS.get(f"{command} {option}", (None, None))[1]
        assert param is not None, f"docs show contagent {command} {option}: no such option"
        default = _default(param)
        if default is None or value.isupper():
            continue
        seen += 1
        assert value == default, f"docs: contagent {command} {option} {value}, code: {default}"
    assert seen >= 5


def test_the_docs_prose_states_the_codes_defaults() -> None:
    """A default the docs state in words is that option's default in some command that has
    it (``--port``'s differ between ``proxy`` and ``view``)."""
    seen = 0
    for doc, option, value in _prose_defaults():
        params = [p for key, (_, p) in OPTIONS.items() if key.split()[1] == option]
        assert params, f"{doc}: {option} is no command's option"
        defaults = {_default(p) for p in params} - {None}
        if defaults:
            seen += 1
            assert value in defaults, f"{doc}: {option} default {value}, code: {defaults}"
    assert seen >= 5


def test_the_proxy_commands_limits_are_the_proxys_own() -> None:
    """``contagent proxy`` states the client limits' defaults so that --help shows them
    without importing the proxy; they are :class:`Limits`' own."""
    from dataclasses import asdict

    from contagent.proxy.http1 import Limits

    for name, value in asdict(Limits()).items():
        param = OPTIONS[f"proxy --{name.replace('_', '-')}"][1]
        assert param.default == value, name


def test_compact_and_the_readme_give_one_figure_for_the_size() -> None:
    figure = re.compile(r"([\d.]+%) of a 200-step log's size")
    readme = figure.findall(" ".join((REPO / "README.md").read_text().split()))
    shown = figure.findall(" ".join((COMMANDS["compact"].help or "").split()))
    assert shown and set(shown) == set(readme)

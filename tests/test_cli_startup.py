"""What a command's process loads: its own command module, and pyarrow without numpy
and pandas for export and validate, whose start-up alone runs without the cyclic garbage
collector (the start-up targets in docs/benchmarks.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer

from contagent import cli

# Runs the CLI as `contagent` does, then names the modules of interest it loaded.
AUDIT = """
import sys
from contagent.cli import main
sys.argv = ["contagent", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
names = ("numpy", "pandas", "contagent.cli.run_cmd", "contagent.cli.view_cmd", "pyarrow")
import gc
print("loaded:" + ",".join(n for n in names if n in sys.modules), file=sys.stderr)
print(f"collector on: {gc.isenabled()}, frozen: {gc.get_freeze_count() > 0}", file=sys.stderr)
"""


def loaded(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = subprocess.run(
        [sys.executable, "-c", AUDIT, *args], capture_output=True, text=True, timeout=120
    )
    line = [x for x in proc.stderr.splitlines() if x.startswith("loaded:")][-1]
    return proc, set(filter(None, line.removeprefix("loaded:").split(",")))


def test_every_command_module_is_in_the_table() -> None:
    folder = Path(cli.__file__).parent
    modules = {p.stem for p in folder.glob("*.py") if "\ndef register(" in p.read_text()}
    assert modules == set(cli.COMMAND_MODULES)


def test_each_module_registers_the_commands_the_table_names() -> None:
    for module, names in cli.COMMAND_MODULES.items():
        app = typer.Typer()
        __import__(f"contagent.cli.{module}", fromlist=["register"]).register(app)
        assert tuple(c.name for c in app.registered_commands) == names, module


def test_export_and_validate_load_pyarrow_without_numpy_or_other_commands(
    samples: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    proc, mods = loaded("export", str(samples), "--out", str(out), "--filter", "all")
    assert proc.returncode == 0, proc.stderr
    assert mods == {"pyarrow"}
    proc, mods = loaded("validate", str(out / "results.jsonl"))
    assert proc.returncode == 0, proc.stderr
    assert mods == {"pyarrow"}
    # off for the start-up only, whose objects the collector then never walks again
    assert "collector on: True, frozen: True" in proc.stderr
    # the Parquet rows pyarrow wrote without numpy read back as the export wrote them
    assert "healthy" in proc.stderr


def test_help_lists_every_command() -> None:
    proc, mods = loaded("--help")
    assert "collector on: True, frozen: False" in proc.stderr
    assert {"contagent.cli.run_cmd", "contagent.cli.view_cmd"} <= mods
    for names in cli.COMMAND_MODULES.values():
        for name in names:
            assert name in proc.stdout

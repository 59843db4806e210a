"""What a command's process loads: its own command module, and pyarrow without numpy
and pandas for export and validate, whose start-up alone runs without the cyclic garbage
collector (the start-up targets in docs/benchmarks.md)."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from contagent import cli
from contagent.cli._common import is_glibc

# Runs the CLI as `contagent` does; a probe's own lines follow it and report on stderr.
RUN_CLI = """
import sys
from contagent.cli import main
sys.argv = ["contagent", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
"""

# names the modules of interest the command loaded, and the collector's state after it
AUDIT = (
    RUN_CLI
    + """
names = ("numpy", "pandas", "contagent.cli.run_cmd", "contagent.cli.view_cmd", "pyarrow")
import gc
print("loaded:" + ",".join(n for n in names if n in sys.modules), file=sys.stderr)
print(f"collector on: {gc.isenabled()}, frozen: {gc.get_freeze_count() > 0}", file=sys.stderr)
"""
)


def probe(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=120
    )


def listed(proc: subprocess.CompletedProcess[str], tag: str) -> set[str]:
    """The comma-separated names on the last stderr line that starts with `tag`."""
    line = [x for x in proc.stderr.splitlines() if x.startswith(tag)][-1]
    return set(filter(None, line.removeprefix(tag).split(",")))


def loaded(*args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    proc = probe(AUDIT, *args)
    return proc, listed(proc, "loaded:")


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


# The packages a command's start-up must not pay for unless its work needs them.
HEAVY = ("pydantic", "pyarrow", "aiohttp", "PIL", "yaml", "numpy", "pandas", "matplotlib")
HEAVY_AUDIT = (
    RUN_CLI
    + """
print("heavy:" + ",".join(sorted({m.split(".")[0] for m in sys.modules} & set(%r))), file=sys.stderr)
"""
)


def heavy(*args: str) -> set[str]:
    return listed(probe(HEAVY_AUDIT % (HEAVY,), *args), "heavy:")


def test_help_of_a_command_loads_no_heavy_package() -> None:
    for command in ("export", "validate", "proxy", "compact"):
        assert heavy(command, "--help") == set(), command


def test_parsing_options_loads_no_pydantic(samples: Path) -> None:
    # compact's own work needs none of them, so whatever it loads comes from the command
    # line parser (a typer that builds a pydantic validator for every option loads pydantic)
    assert heavy("compact", str(samples / "clean_pass")) == set()


def test_a_proxy_starts_without_aiohttp_or_the_export() -> None:
    # what `contagent proxy --tokens off` runs before its URL line: its modules, and
    # asking the upstream what it is (port 1: refused at once)
    code = (
        "import sys; import contagent.cli.proxy_cmd, contagent.proxy; "
        "from contagent.proxy.identify import plan_tokens; "
        "plan = plan_tokens('off', 'http://127.0.0.1:1'); "
        "print(plan.line); "
        "print(','.join(sorted({m.split('.')[0] for m in sys.modules} & set(sys.argv[1:]))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, *HEAVY],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    line, loaded_heavy = proc.stdout.splitlines()
    assert line == "tokens: not recorded (--tokens off)"
    assert set(filter(None, loaded_heavy.split(","))) == {"pydantic"}


def test_an_export_builds_no_pydantic_validator(tmp_path: Path) -> None:
    # the summaries are made and written without validation: the first validator a process
    # builds loads pydantic's plugin machinery (importlib.metadata), about 0.03 s of CPU;
    # a rollout with no posted reward and every format leaves nothing else to validate
    from tools.corpus import make_rollout

    make_rollout(tmp_path / "runs", 0, 3, random.Random(0))
    # the probe sees the machinery load once a validator is built, so it looks at the right
    # module: a pydantic that named it otherwise would fail the test, not pass it unseen
    code = (
        RUN_CLI
        + """
seen = lambda: 'pydantic.plugin._loader' in sys.modules
print('plugins:', seen(), file=sys.stderr)
import pydantic
pydantic.TypeAdapter(int)
print('after a validator:', seen(), file=sys.stderr)
"""
    )
    out = tmp_path / "out"
    formats = [x for name in ("prime-sft", "trl", "tokens", "atif") for x in ("--format", name)]
    proc = probe(code, "export", str(tmp_path / "runs"), "--out", str(out), *formats)
    assert (out / "export-summary.json").is_file(), proc.stderr
    assert "plugins: False" in proc.stderr and "after a validator: True" in proc.stderr


# the first argument, "default", runs the command without the allocator's tuning
FAULTS = (
    """
import resource, sys
import contagent.cli._common as common
if sys.argv.pop(1) == "default":
    common.tune_allocator = lambda: None
"""
    + RUN_CLI
    + """
print("faults:", resource.getrusage(resource.RUSAGE_SELF).ru_minflt, file=sys.stderr)
"""
)


@pytest.mark.skipif(not is_glibc(), reason="the allocator's thresholds are glibc's")
def test_export_reuses_the_memory_of_the_chunks_it_read(tmp_path: Path) -> None:
    # each 4 MiB chunk read would otherwise be fresh memory, a page fault per 4 KiB page
    # (six logs of about 5 MB, as the benchmark corpus holds them: 0.8 faults a page)
    from tools.corpus import make_rollout

    logs = [make_rollout(tmp_path / "runs", n, 60, random.Random(n)).raw_log for n in range(6)]
    pages = sum(log.stat().st_size for log in logs) // 4096
    faults = {}
    for mode in ("tuned", "default"):
        out = tmp_path / mode
        proc = probe(FAULTS, mode, "export", str(tmp_path / "runs"), "--out", str(out))
        assert (out / "results.jsonl").is_file(), proc.stderr
        faults[mode] = int(proc.stderr.rsplit("faults:", 1)[1])
    assert faults["default"] - faults["tuned"] > pages // 2, (faults, pages)

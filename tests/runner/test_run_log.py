"""The run's own log under --log-dir: lines and tables appended; an unwritable one is quiet."""

from __future__ import annotations

from pathlib import Path

from rich.table import Table
from rich.text import Text

from contagent.cli.run_log import RunLog
from contagent.layout import RunPaths


def test_lines_and_tables_are_appended(tmp_path: Path) -> None:
    path = RunPaths(tmp_path / "logs").run_log("r1")
    journal = RunLog(path)
    journal.line("stopping: SIGTERM")
    table = Table(title="run r1")
    table.add_column("rollout")
    table.add_row("exp_001")
    journal.render("[yellow]skipped:[/]", Text("bad one"))
    journal.render(table)
    journal.close()
    text = path.read_text()
    assert path == tmp_path / "logs" / "runs" / "r1.log"
    assert text.splitlines()[0].endswith(" stopping: SIGTERM")
    assert "skipped: bad one" in text and "exp_001" in text and "\x1b[" not in text


def test_a_log_that_cannot_be_written_is_given_up_quietly(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    journal = RunLog(tmp_path / "file" / "runs" / "r.log")  # a file where a folder must be
    journal.line("nothing")
    journal.render(Text("nothing"))
    journal.close()

"""What ``contagent run`` shows: the live progress display and the summary at the end."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from contagent.cli._common import console
from contagent.cli.run_log import RunLog
from contagent.runner.progress import RunProgress
from contagent.runner.summary import RunEvent, RunSummary

_STYLES = {
    "ready": "green",
    "paused": "yellow",
    "stopped": "red",
    "stopping": "yellow",
    "left": "red",
    "leftovers": "yellow",
}


class Progress(RunProgress):
    """Live counts while rollouts run; rendered by rich.live."""

    def __init__(self, journal: RunLog | None = None) -> None:
        super().__init__()
        self.journal = journal  # what the run says goes there too

    def on_event(self, event: RunEvent) -> None:
        # printed outside the lock: printing refreshes the live display, which takes it
        if event.kind in _STYLES:
            console.print(
                f"[{_STYLES[event.kind]}]{event.kind}:[/]", Text(event.message), soft_wrap=True
            )
            if self.journal is not None:
                self.journal.line(f"{event.kind}: {event.message}")
        elif event.kind == "notice":
            console.print(f"[yellow]{event.name}:[/]", Text(event.message), soft_wrap=True)
        elif event.kind == "waiting" and not self.status:  # once; the live line shows the rest
            console.print(Text(event.message), soft_wrap=True)
        self.observe(event)

    def __rich__(self) -> Group:
        with self.lock:
            judged = self.passed + self.failed + self.errors
            rate = f"{100 * self.passed / judged:.0f}%" if judged else "-"
            head = Text.assemble(
                ("rollouts ", "bold"),
                f"{self.done}/{self.total} done  {len(self.running)} running  ",
                (f"{self.passed} passed  ", "green"),
                (f"{self.failed} failed  ", "red"),
                (f"{self.errors} errors  ", "yellow"),
                f"pass rate {rate}  tokens {self.tokens:,}  ",
                f"{time.monotonic() - self.t0:.0f}s",
            )
            now = time.monotonic()
            lines = [
                Text(f"  running {n} ({now - t:.0f}s)", style="dim")
                for n, t in sorted(self.running.items())
            ]
            if self.nodes:
                per_node = "  ".join(f"{n} {k}" for n, k in sorted(self.nodes.items()))
                lines.insert(0, Text(f"  done per node: {per_node}", style="dim"))
            if self.status:
                lines.insert(0, Text(self.status, style="yellow"))
            return Group(head, *lines)


def summary_table(summary: RunSummary) -> Table:
    table = Table(
        title=f"run {summary.run_id}  ({summary.wall_s:.1f}s)",
        caption=summary.exit_reason(),
    )
    for col in ("rollout", "status", "stop", "iter", "tokens", "wall s", "node", "note"):
        table.add_column(
            col,
            justify="right" if col in ("iter", "tokens", "wall s") else "left",
            no_wrap=col in ("rollout", "node"),
        )
    colour = {"passed": "green", "failed": "red"}
    for r in sorted([*summary.resumed, *summary.results], key=lambda r: r.rollout_id):
        note = "resumed" if r in summary.resumed else (r.error or "")
        table.add_row(
            r.rollout_id,
            Text(str(r.status), style=colour.get(str(r.status), "yellow")),
            r.stop_condition or "",
            "" if r.iterations is None else str(r.iterations),
            "" if r.tokens is None else f"{r.tokens.total_tokens:,}",
            "" if r.timings is None else f"{r.timings.wall_s:.1f}",
            r.node or "",
            note[:80],
        )
    for name in summary.not_started:
        table.add_row(name, Text("not started", style="yellow"), "", "", "", "", "", "run stopped")
    for p in summary.problems:
        table.add_row(p.name, Text("skipped", style="yellow"), "", "", "", "", "", p.message[:120])
    return table


def print_summary(summary: RunSummary, progress: Progress, journal: RunLog) -> None:
    """The run's end on the terminal and in its run log: what was skipped, the table, totals."""

    def say(*what: Any) -> None:
        console.print(*what, soft_wrap=True)
        journal.render(*what)

    for message in progress.problems:
        say("[yellow]skipped:[/]", Text(message))
    say(summary_table(summary))
    passed, rollouts, used = summary.totals()
    rate = f" ({100 * passed / rollouts:.0f}%)" if rollouts else ""
    say(f"passed {passed}/{rollouts}{rate}, tokens {used:,}")
    say(
        Text(
            f"logs: {summary.log_dir}   export: contagent export {summary.log_dir / 'rollouts'} --out OUT"
        )
    )

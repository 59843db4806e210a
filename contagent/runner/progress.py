"""A run's progress counted from its events: what ``contagent run`` shows while it runs."""

from __future__ import annotations

import threading
import time

from contagent.runner.summary import RunEvent


class RunProgress:
    """Counts of a run's :class:`~contagent.runner.run.RunEvent` s so far; :meth:`observe`
    takes ``lock``, and so must whoever reads the counts from another thread."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.total = 0
        self.running: dict[str, float] = {}  # name -> monotonic time it started
        self.done = 0
        self.passed = 0
        self.failed = 0
        self.errors = 0
        self.tokens = 0
        self.nodes: dict[str, int] = {}  # rollouts finished on each node
        self.problems: list[str] = []
        self.status = ""  # the LLM server's, while the run waits for it
        self.t0 = time.monotonic()

    def observe(self, event: RunEvent) -> None:
        with self.lock:
            if event.kind == "waiting":
                self.status = event.message
            elif event.kind in ("ready", "stopped"):
                self.status = ""
            elif event.kind == "planned":
                self.total = event.total
            elif event.kind == "problem":
                self.problems.append(event.message)
            elif event.kind == "started":
                self.running[event.name] = time.monotonic()
            elif event.kind in ("finished", "skipped"):
                self._ended(event)

    def _ended(self, event: RunEvent) -> None:
        self.running.pop(event.name, None)
        result = event.result
        self.done += 1
        if result is None:
            return
        self.passed += result.status == "passed"
        self.failed += result.status == "failed"
        self.errors += result.status not in ("passed", "failed")
        if result.tokens is not None:
            self.tokens += result.tokens.total_tokens
        if event.kind == "finished" and result.node:
            self.nodes[result.node] = self.nodes.get(result.node, 0) + 1
